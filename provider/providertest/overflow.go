package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// Dialects of ContextWindow: which server's overflow error it sends.
const (
	DialectOpenAI    = "openai"    // 400 context_length_exceeded, "… resulted in N tokens"
	DialectVLLM      = "vllm"      // 400 BadRequestError, the completion counted: "(P in the messages, C in the completion)"
	DialectAnthropic = "anthropic" // 400 "prompt is too long: N tokens > W maximum", or "input length and `max_tokens` exceed context limit"
	DialectGemini    = "gemini"    // 400 INVALID_ARGUMENT "The input token count (N) exceeds …"
	DialectLlamaCpp  = "llama.cpp" // 400 exceed_context_size_error with n_prompt_tokens and n_ctx
	DialectOllama    = "ollama"    // 500 "input length exceeds the context length": no sizes
)

// ContextWindow is a fake endpoint with a context window: a request whose
// prompt (the text of its system prompt and messages) is over the model's
// window, at one token per BytesPerToken bytes, is refused with the overflow
// error the real server sends (status, body, type and code as it sends
// them); any other is answered with a short completion in the dialect's wire
// format (OpenAI's for vllm, llama.cpp and ollama).
type ContextWindow struct {
	Dialect string
	// Windows are the windows by model, in tokens; Window is any other
	// model's.
	Windows map[string]int
	Window  int
	// BytesPerToken is 4 when 0.
	BytesPerToken int

	mu      sync.Mutex
	calls   int
	refused int
}

// Calls returns the requests answered and those refused for overflow.
func (c *ContextWindow) Calls() (calls, refused int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.refused
}

func (c *ContextWindow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, "providertest: bad JSON", http.StatusBadRequest)
		return
	}
	model, _ := req["model"].(string)
	if c.Dialect == DialectGemini { // .../models/{model}:generateContent
		model = strings.TrimPrefix(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:], "models/")
		model, _, _ = strings.Cut(model, ":")
	}
	window := c.Window
	if n, ok := c.Windows[model]; ok {
		window = n
	}
	per := c.BytesPerToken
	if per == 0 {
		per = 4
	}
	prompt := (promptBytes(req) + per - 1) / per
	answer := maxTokens(req)
	c.mu.Lock()
	c.calls++
	refuse := prompt > window || (c.Dialect == DialectAnthropic || c.Dialect == DialectVLLM) && prompt+answer > window
	if refuse {
		c.refused++
	}
	c.mu.Unlock()
	if refuse {
		c.overflow(w, prompt, answer, window)
		return
	}
	switch c.Dialect {
	case DialectAnthropic:
		Reply{Status: 200, Body: AnthropicMessage(model, "fits", prompt, 2)}.ServeHTTP(w, r)
	case DialectGemini:
		Reply{Status: 200, Body: GeminiResponse(model, "fits", prompt, 2)}.ServeHTTP(w, r)
	default:
		Reply{Status: 200, Body: OpenAIChat(model, "fits", prompt, 2)}.ServeHTTP(w, r)
	}
}

// overflow writes the dialect's refusal of a prompt of prompt tokens, with
// answer tokens reserved for the completion, in a window of window tokens.
func (c *ContextWindow) overflow(w http.ResponseWriter, prompt, answer, window int) {
	var rp Reply
	switch c.Dialect {
	case DialectOpenAI:
		rp = Reply{Status: 400, Body: fmt.Sprintf(`{"error":{"message":%s,"type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
			q(fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. Please reduce the length of the messages.", window, prompt)))}
	case DialectVLLM:
		rp = Reply{Status: 400, Body: fmt.Sprintf(`{"object":"error","message":%s,"type":"BadRequestError","param":null,"code":400}`,
			q(fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). "+
				"Please reduce the length of the messages or completion.", window, prompt+answer, prompt, answer)))}
	case DialectAnthropic:
		msg := fmt.Sprintf("prompt is too long: %d tokens > %d maximum", prompt, window)
		if prompt <= window {
			msg = fmt.Sprintf("input length and `max_tokens` exceed context limit: %d + %d > %d, decrease input length or `max_tokens` and try again", prompt, answer, window)
		}
		rp = Reply{Status: 400, Body: AnthropicError("invalid_request_error", msg)}
	case DialectGemini:
		rp = Reply{Status: 400, Body: GeminiError(400, "INVALID_ARGUMENT",
			fmt.Sprintf("The input token count (%d) exceeds the maximum number of tokens allowed (%d).", prompt, window))}
	case DialectLlamaCpp:
		rp = Reply{Status: 400, Body: fmt.Sprintf(`{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it",`+
			`"type":"exceed_context_size_error","n_prompt_tokens":%d,"n_ctx":%d}}`, prompt, window)}
	case DialectOllama:
		rp = Reply{Status: 500, Body: `{"error":{"message":"input length exceeds the context length","type":"api_error","param":null,"code":null}}`}
	default:
		panic("providertest: unknown dialect " + c.Dialect)
	}
	rp.ServeHTTP(w, nil)
}

// promptBytes counts the text a request sends the model: every string under
// a "content", "text" or "system" key (OpenAI's messages, Anthropic's
// system and content blocks, Gemini's parts and systemInstruction).
func promptBytes(v any) int {
	n := 0
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "content" || k == "text" || k == "system") {
				n += len(s)
				continue
			}
			n += promptBytes(e)
		}
	case []any:
		for _, e := range x {
			n += promptBytes(e)
		}
	}
	return n
}

// maxTokens is the room a request reserves for its answer (max_tokens, or
// Gemini's generationConfig.maxOutputTokens).
func maxTokens(req map[string]any) int {
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if f, ok := req[k].(float64); ok {
			return int(f)
		}
	}
	if gc, ok := req["generationConfig"].(map[string]any); ok {
		if f, ok := gc["maxOutputTokens"].(float64); ok {
			return int(f)
		}
	}
	return 0
}
