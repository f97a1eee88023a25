package provider_test

import (
	"strings"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// rawStop is each wire format's own word for a normal end.
var rawStop = map[string]string{
	provider.KindOpenAI: "stop", provider.KindAnthropic: "end_turn", provider.KindGemini: "STOP", provider.KindSim: "stop",
}

// finishCases are the suite's cases of answers that are not a plain
// stop: cut at max_tokens, stopped by a filter, usage with cached
// and reasoning tokens, and 200 bodies of the wrong shape.
func finishCases() []suiteCase {
	const cut = "Hello from"
	short := []string{"Hello", " from"}
	invalid := func(msg string) want {
		return want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: msg}}
	}
	invalidStream := func(msg string) want {
		w := invalid(msg)
		w.deltas = ptr("")
		return w
	}
	return []suiteCase{{
		name: "truncated at max_tokens",
		cells: map[string]cell{
			"openai":    {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIChatFinish("gpt-4o-mini", cut, "length", 12, 5)}, want: want{text: cut, finish: "length", finishRaw: "length"}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessageStop("claude-sonnet-4-5", cut, "max_tokens", 12, 5)}, want: want{text: cut, finish: "length", finishRaw: "max_tokens"}},
			"gemini":    {serve: providertest.Reply{Status: 200, Body: providertest.GeminiResponseFinish("gemini-2.5-flash", cut, "MAX_TOKENS", 12, 5)}, want: want{text: cut, finish: "length", finishRaw: "MAX_TOKENS"}},
			"sim": {sim: &provider.SimConfig{Reply: answer}, params: map[string]any{"max_tokens": float64(2)},
				want: want{text: "Hello fr", finish: "length", finishRaw: "length", usage: provider.Usage{InputTokens: 5, OutputTokens: 2}}},
		},
	}, {
		name:   "truncated at max_tokens, streaming",
		stream: true,
		cells: map[string]cell{
			"openai":    {serve: providertest.SSE{Events: providertest.OpenAIStreamFinish("gpt-4o-mini", short, "length", 12, 5)}, want: want{text: cut, finish: "length", finishRaw: "length"}},
			"anthropic": {serve: providertest.SSE{Events: providertest.AnthropicStreamStop("claude-sonnet-4-5", short, "max_tokens", 12, 5)}, want: want{text: cut, finish: "length", finishRaw: "max_tokens"}},
			"gemini":    {serve: providertest.SSE{Events: providertest.GeminiStreamFinish("gemini-2.5-flash", short, "MAX_TOKENS", 12, 5)}, want: want{text: cut, finish: "length", finishRaw: "MAX_TOKENS"}},
			"sim": {sim: &provider.SimConfig{Reply: answer}, params: map[string]any{"max_completion_tokens": 2},
				want: want{text: "Hello fr", finish: "length", finishRaw: "length", usage: provider.Usage{InputTokens: 5, OutputTokens: 2}}},
		},
	}, {
		name: "content filter",
		cells: map[string]cell{
			"openai":    {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIChatFinish("gpt-4o-mini", cut, "content_filter", 12, 5)}, want: want{text: cut, finish: "content_filter", finishRaw: "content_filter"}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessageStop("claude-sonnet-4-5", "I can't help with that.", "refusal", 12, 5)}, want: want{text: "I can't help with that.", finish: "content_filter", finishRaw: "refusal"}},
			// Gemini's blocked candidate has no content at all.
			"gemini": {serve: providertest.Reply{Status: 200, Body: `{"candidates":[{"finishReason":"SAFETY","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"HIGH","blocked":true}]}],` +
				`"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":5,"totalTokenCount":17},"modelVersion":"gemini-2.5-flash"}`},
				want: want{noText: true, finish: "content_filter", finishRaw: "SAFETY"}},
			"sim": {sim: &provider.SimConfig{Faults: provider.SimFaults{ContentFilter: 1}},
				want: want{noText: true, finish: "content_filter", finishRaw: "content_filter", usage: provider.Usage{InputTokens: 5, OutputTokens: 7}}},
		},
	}, {
		name:   "content filter, streaming",
		stream: true,
		cells: map[string]cell{
			"openai":    {serve: providertest.SSE{Events: providertest.OpenAIStreamFinish("gpt-4o-mini", short, "content_filter", 12, 5)}, want: want{text: cut, finish: "content_filter", finishRaw: "content_filter"}},
			"anthropic": {serve: providertest.SSE{Events: providertest.AnthropicStreamStop("claude-sonnet-4-5", short, "refusal", 12, 5)}, want: want{text: cut, finish: "content_filter", finishRaw: "refusal"}},
			"gemini":    {serve: providertest.SSE{Events: providertest.GeminiStreamFinish("gemini-2.5-flash", short, "RECITATION", 12, 5)}, want: want{text: cut, finish: "content_filter", finishRaw: "RECITATION"}},
			"sim":       {skip: "the sim's filter has no stream of its own: see content filter"},
		},
	}, {
		// A model that declines is a content filter's answer in every wire
		// format: OpenAI's message.refusal (finish_reason stop), Anthropic's
		// stop_reason refusal, Gemini's promptFeedback.blockReason (no
		// candidates). The refusal's text and the usage stay: it is billed.
		name: "refusal",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIRefusal("gpt-4o-mini", refused, 12, 5)},
				want: want{text: refused, finish: "content_filter", finishRaw: "refusal"}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessageStop("claude-sonnet-4-5", refused, "refusal", 12, 5)},
				want: want{text: refused, finish: "content_filter", finishRaw: "refusal"}},
			"gemini": {serve: providertest.Reply{Status: 200, Body: providertest.GeminiPromptBlocked("gemini-2.5-flash", "PROHIBITED_CONTENT", 12)},
				want: want{noText: true, finish: "content_filter", finishRaw: "blockReason PROHIBITED_CONTENT", usage: provider.Usage{InputTokens: 12}}},
			"sim": {skip: "the sim's filter answers no text: see content filter"},
		},
	}, {
		name:   "refusal, streaming",
		stream: true,
		cells: map[string]cell{
			"openai": {serve: providertest.SSE{Events: providertest.OpenAIRefusalStream("gpt-4o-mini", refusedPieces, 12, 5)},
				want: want{text: refused, finish: "content_filter", finishRaw: "refusal"}},
			"anthropic": {serve: providertest.SSE{Events: providertest.AnthropicStreamStop("claude-sonnet-4-5", refusedPieces, "refusal", 12, 5)},
				want: want{text: refused, finish: "content_filter", finishRaw: "refusal"}},
			"gemini": {serve: providertest.SSE{Events: providertest.GeminiPromptBlockedStream("gemini-2.5-flash", "SAFETY", 12)},
				want: want{noText: true, finish: "content_filter", finishRaw: "blockReason SAFETY", usage: provider.Usage{InputTokens: 12}}},
			"sim": {skip: "the sim's filter has no stream of its own: see content filter"},
		},
	}, {
		name: "usage with cached and reasoning tokens",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 200, Body: strings.Replace(strings.Replace(providertest.OpenAIChat("gpt-4o-mini", answer, 12, 5),
				`"cached_tokens":0`, `"cached_tokens":8`, 1), `"reasoning_tokens":0`, `"reasoning_tokens":3`, 1)},
				want: want{usage: provider.Usage{InputTokens: 12, OutputTokens: 5, CachedInputTokens: 8, ReasoningTokens: 3}}},
			// Anthropic's input_tokens leave the cache out; the adapter adds it in.
			"anthropic": {serve: providertest.Reply{Status: 200, Body: strings.Replace(providertest.AnthropicMessage("claude-sonnet-4-5", answer, 2, 5),
				`"cache_creation_input_tokens":0,"cache_read_input_tokens":0`, `"cache_creation_input_tokens":4,"cache_read_input_tokens":6`, 1)},
				want: want{usage: provider.Usage{InputTokens: 12, OutputTokens: 5, CachedInputTokens: 6, CacheWriteTokens: 4}}},
			// Gemini's thoughts are billed as output: 2 + 3.
			"gemini": {serve: providertest.Reply{Status: 200, Body: strings.Replace(providertest.GeminiResponse("gemini-2.5-flash", answer, 12, 2),
				`"candidatesTokenCount":2,`, `"candidatesTokenCount":2,"thoughtsTokenCount":3,"cachedContentTokenCount":8,`, 1)},
				want: want{usage: provider.Usage{InputTokens: 12, OutputTokens: 5, CachedInputTokens: 8, ReasoningTokens: 3}}},
			"sim": {skip: "the sim has no reasoning; its cache (cache: [system]) is TestSimMultimodal's"},
		},
	}, {
		name: "wrong-typed content",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":12345},"finish_reason":"stop"}]}`},
				want: invalid("choices[0].message.content is a number, want a string or a list of parts")},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: `{"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":12345}],"stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":5}}`},
				want: invalid("content[0].text is a number, want a string")},
			"gemini": {serve: providertest.Reply{Status: 200, Body: `{"candidates":[{"content":{"parts":[{"text":12345}],"role":"model"},"finishReason":"STOP"}],"modelVersion":"gemini-2.5-flash"}`},
				want: invalid("candidates[0].content.parts[0].text is a number, want a string")},
			"sim": wireOnlyCell,
		},
	}, {
		name:   "wrong-typed content, streaming",
		stream: true,
		cells: map[string]cell{
			"openai": {serve: providertest.SSE{Events: []string{`data: {"object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":12345},"finish_reason":null}]}` + "\n\n", "data: [DONE]\n\n"}},
				want: invalidStream("delta.content is a number")},
			"anthropic": {serve: providertest.SSE{Events: []string{"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":12345}}\n\n"}},
				want: invalidStream("delta.text is a number, want a string")},
			"gemini": {serve: providertest.SSE{Events: []string{`data: {"candidates":[{"content":{"parts":[{"text":12345}],"role":"model"},"finishReason":"STOP"}]}` + "\r\n\r\n"}},
				want: invalidStream("parts[0].text is a number")},
			"sim": wireOnlyCell,
		},
	}, {
		name: "missing message",
		cells: map[string]cell{
			"openai":    {serve: providertest.Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"finish_reason":"stop"}]}`}, want: invalid("choices[0] has no message")},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: `{"type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_reason":"end_turn","usage":{"input_tokens":12,"output_tokens":5}}`}, want: invalid("message has no content")},
			"gemini":    {serve: providertest.Reply{Status: 200, Body: `{"usageMetadata":{"promptTokenCount":12},"modelVersion":"gemini-2.5-flash"}`}, want: invalid("response has no candidates")},
			"sim":       wireOnlyCell,
		},
	}, {
		name: "empty choices",
		cells: map[string]cell{
			"openai":    {serve: providertest.Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[]}`}, want: invalid("response has no choices")},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: `{"type":"message","content":"Hello"}`}, want: invalid("content is a string, want a list of content blocks")},
			"gemini":    {serve: providertest.Reply{Status: 200, Body: `{"candidates":[{"index":0}]}`}, want: invalid("candidates[0] has no content and no finishReason")},
			"sim":       wireOnlyCell,
		},
	}}
}

// refused is a model's refusal, whole and in streamed pieces.
const refused = "I'm sorry, I can't help with that."

var refusedPieces = []string{"I'm sorry,", " I can't help", " with that."}

var wireOnlyCell = cell{skip: "wire-only: the sim has no HTTP layer"}
