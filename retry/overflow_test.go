package retry

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The sizes each provider's overflow message names, read from the texts
// they send.
func TestParseOverflow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src, msg string
		want     Overflow
	}{
		{"openai", "This model's maximum context length is 128000 tokens. However, your messages resulted in 130517 tokens. Please reduce the length of the messages.",
			Overflow{Limit: 128000, Prompt: 130517, Over: 2517}},
		{"openai, with the completion", "This model's maximum context length is 4097 tokens, however you requested 4294 tokens (3294 in your prompt; 1000 for the completion). Please reduce your prompt; or completion length.",
			Overflow{Limit: 4097, Prompt: 3294, Completion: 1000, Over: 197}},
		{"openai, functions are input", "This model's maximum context length is 8192 tokens. However, your messages resulted in 8400 tokens (8000 in the messages, 400 in the functions). Please reduce the length of the messages or functions.",
			Overflow{Limit: 8192, Prompt: 8400, Over: 208}},
		{"openai python SDK text", "Error code: 400 - {'error': {'message': \"This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. Please reduce the length of the messages.\", 'type': 'invalid_request_error', 'param': 'messages', 'code': 'context_length_exceeded'}}",
			Overflow{Limit: 8192, Prompt: 9013, Over: 821}},
		{"vllm, groq, deepseek", "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
			Overflow{Limit: 4096, Prompt: 4000, Completion: 1000, Over: 904}},
		{"vllm, input tokens", "This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens. Please reduce the length of the input messages.",
			Overflow{Limit: 32768, Prompt: 40000, Over: 7232}},
		{"openrouter", "This endpoint's maximum context length is 131072 tokens. However, you requested about 140000 tokens (139000 of text input, 1000 in the output). Please reduce the length of either one, or use the \"middle-out\" transform to compress your prompt automatically.",
			Overflow{Limit: 131072, Prompt: 139000, Completion: 1000, Over: 8928}},
		{"anthropic", "prompt is too long: 210000 tokens > 200000 maximum", Overflow{Limit: 200000, Prompt: 210000, Over: 10000}},
		{"anthropic, with max_tokens", "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again",
			Overflow{Limit: 200000, Prompt: 197000, Completion: 8192, Over: 5192}},
		{"gemini", "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).", Overflow{Limit: 1048576, Prompt: 1200000, Over: 151424}},
		{"vertex", "The input token count exceeds the maximum number of tokens allowed 1048576.", Overflow{}},
		{"vertex, counted", "The input token count 1100000 exceeds the maximum number of tokens allowed 1048576.", Overflow{Limit: 1048576, Prompt: 1100000, Over: 51424}},
		{"llama.cpp", "request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it", Overflow{Limit: 4096, Prompt: 4390, Over: 294}},
		{"llama.cpp, counts from the error object", "the request exceeds the available context size, try increasing it (n_prompt_tokens 4390, n_ctx 4096)", Overflow{Limit: 4096, Prompt: 4390, Over: 294}},
		{"llama.cpp, as JSON text", `{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":4390,"n_ctx":4096}`,
			Overflow{Limit: 4096, Prompt: 4390, Over: 294}},
		{"llama-cpp-python", "Requested tokens (2285) exceed context window of 2048", Overflow{Limit: 2048, Prompt: 2285, Over: 237}},
		{"mistral", "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length", Overflow{Limit: 32768, Prompt: 40000, Over: 7232}},
		{"cohere", "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 4500. Try using a shorter prompt, or enabling prompt truncating.",
			Overflow{Limit: 4081, Prompt: 4500, Over: 419}},
		{"cohere v2", "too many tokens: size limit exceeded by 1234 tokens. Try using shorter or fewer inputs, or setting prompt_truncation='AUTO'.", Overflow{Over: 1234}},
		{"thousands separators", "prompt is too long: 210,000 tokens > 200,000 maximum", Overflow{Limit: 200000, Prompt: 210000, Over: 10000}},
		// No sizes.
		{"ollama", "input length exceeds the context length", Overflow{}},
		{"openai responses", "Your input exceeds the context window of this model. Please adjust your input and try again.", Overflow{}},
		{"bedrock", "Input is too long for requested model.", Overflow{}},
		// A complaint about max_tokens itself is not over the window.
		{"vllm max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096 tokens and your request has 100 input tokens (5000 > 4096 - 100).", Overflow{}},
		{"not over", "prompt is too long: 100 tokens > 200 maximum", Overflow{}},
	} {
		got, ok := ParseOverflow(tc.msg)
		require.Equal(t, tc.want, got, tc.src)
		require.Equal(t, tc.want.Sized(), ok, tc.src)
	}
}

// Every overflow of the classifier's corpus either names its sizes or is
// one of the few messages known to name none.
func TestParseOverflowCorpus(t *testing.T) {
	t.Parallel()
	sizeless := map[string]bool{
		"openai/responses context window":               true,
		"ollama/context overflow as a 500":              true,
		"llama.cpp/exceed_context_size_error":           true,
		"litellm/ContextWindowExceededError":            true,
		"bedrock/input is too long":                     true,
		"issues/llama.cpp overflow inside a 200 stream": true,
	}
	n := 0
	for _, tc := range corpus {
		if tc.want != ClassContextOverflow || tc.src == "rule" {
			continue
		}
		key := tc.src + "/" + tc.name
		_, ok := ParseOverflow(tc.err.Message)
		if !sizeless[key] {
			require.True(t, ok, "%s names its sizes: %q", key, tc.err.Message)
			n++
		} else {
			require.False(t, ok, key)
		}
	}
	require.GreaterOrEqual(t, n, 10)
}

func TestOverflowKeep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		o           Overflow
		sent, field int
		keep        int
		ok          bool
	}{
		// 4,294 tokens for 17,176 characters: 4 a token. 197 over plus a
		// margin of 205 (5 % of 4,097): 402 tokens, 1,608 characters.
		{"openai", Overflow{Limit: 4097, Prompt: 3294, Completion: 1000, Over: 197}, 13176, 13000, 13000 - int((197+205)*4.0), true},
		{"anthropic", Overflow{Limit: 200000, Prompt: 210000, Over: 10000}, 840000, 800000, 800000 - (10000+10000)*4, true},
		// 2 characters a token (a denser text): twice as few characters cut per token.
		{"dense", Overflow{Limit: 1000, Prompt: 1100, Over: 100}, 2200, 2000, 2000 - (100+50)*2, true},
		{"the rest alone is over", Overflow{Limit: 1000, Prompt: 5000, Over: 4000}, 20000, 1000, 0, false},
		{"no sizes: half", Overflow{}, 9000, 8001, 4000, true},
		{"no sizes, one character", Overflow{}, 10, 1, 0, false},
		{"excess only: the heuristic", Overflow{Over: 400}, 10000, 8000, 8000 - (400+100)*4, true},
		{"margin at least", Overflow{Limit: 100, Prompt: 101, Over: 1}, 404, 300, 300 - (1+16)*4, true},
		{"empty field", Overflow{Limit: 100, Prompt: 101, Over: 1}, 404, 0, 0, false},
	} {
		keep, ok := tc.o.Keep(tc.sent, tc.field)
		require.Equal(t, tc.ok, ok, tc.name)
		if tc.ok {
			require.Equal(t, tc.keep, keep, tc.name)
		}
	}
}

// What an overflow teaches lets a later prompt of the same job be known
// to overflow before it is sent, not one merely near the window.
func TestWindowEstimate(t *testing.T) {
	t.Parallel()
	o, ok := ParseOverflow("prompt is too long: 10000 tokens > 8000 maximum")
	require.True(t, ok)
	w, ok := o.Window(40000)
	require.True(t, ok)
	require.Equal(t, Window{Limit: 8000, PerToken: 4}, w)

	_, over := w.Estimate(32000 * 1.1) // 8,800 tokens: within the slack
	require.False(t, over)
	est, over := w.Estimate(40000)
	require.True(t, over)
	require.Equal(t, Overflow{Limit: 8000, Prompt: 10000, Over: 2000}, est)
	keep, ok := est.Keep(40000, 36000)
	require.True(t, ok)
	require.Equal(t, 36000-(2000+400)*4, keep)

	w = Window{Limit: 4097, Completion: 1000, PerToken: 4}
	est, over = w.Estimate(16000) // 4,000 + 1,000 for the answer
	require.True(t, over)
	require.Equal(t, 903, est.Over)

	_, ok = Overflow{Over: 5}.Window(100)
	require.False(t, ok, "no window named")
	_, over = Window{}.Estimate(1 << 20)
	require.False(t, over, "nothing known")
}

func TestOverflowString(t *testing.T) {
	t.Parallel()
	require.Equal(t, "210,000 tokens > 200,000", Overflow{Limit: 200000, Prompt: 210000, Over: 10000}.String())
	require.Equal(t, "3,294 + 1,000 tokens for the answer > 4,097", Overflow{Limit: 4097, Prompt: 3294, Completion: 1000, Over: 197}.String())
	require.Equal(t, "1,234 tokens over the limit", Overflow{Over: 1234}.String())
	require.Equal(t, "the provider named no sizes", Overflow{}.String())
	require.Equal(t, "0", Thousands(0))
	require.Equal(t, "999", Thousands(999))
	require.Equal(t, "-1,000,000", Thousands(-1000000))
}
