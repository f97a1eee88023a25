package providertest

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// answer is one composed answer, billed or not.
type answer struct {
	kind, model string
	text        string
	finish      string // the wire format's own word
	usage       BillUsage
	reasoning   int
}

// compose makes the answer to p under a: its text, finish and usage.
func (s *BillingServer) compose(p *prompt, a BillAnswer) answer {
	ans := answer{kind: p.call.Kind, model: p.call.Model, reasoning: a.Reasoning}
	ans.text = a.Text
	if ans.text == "" {
		ans.text = "answer of " + p.call.Key
		if p.call.JSON {
			b, _ := json.Marshal(map[string]string{"answer": ans.text})
			ans.text = string(b)
		}
	}
	in, sys := p.inputTokens()
	in += a.PadInput
	u := BillUsage{Input: in}
	s.mu.Lock()
	switch {
	case p.call.Kind == "anthropic" && p.cacheSys && sys > 0:
		if s.cached["anthropic\x00"+p.system] {
			u.CachedInput = sys
		} else {
			u.CacheWrite = sys
			s.cached["anthropic\x00"+p.system] = true
		}
	case p.call.Kind != "anthropic" && s.CachePrefix && sys > 0:
		if s.cached[p.call.Kind+"\x00"+p.system] {
			u.CachedInput = sys
		}
		s.cached[p.call.Kind+"\x00"+p.system] = true
	}
	s.mu.Unlock()
	out := Tokens(ans.text)
	cut := a.Finish == "length"
	if limit := p.call.MaxTokens; limit > 0 {
		ans.reasoning = min(ans.reasoning, limit)
		if room := limit - ans.reasoning; out > room {
			out, cut = room, true
		}
	} else if cut {
		out = (out + 1) / 2
	}
	if cut {
		ans.text = ans.text[:min(len(ans.text), out*4)]
	}
	u.Output = out + ans.reasoning
	ans.usage = u
	ans.finish = finishWord(p.call.Kind, cut)
	return ans
}

func finishWord(kind string, cut bool) string {
	switch {
	case kind == "anthropic" && cut:
		return "max_tokens"
	case kind == "anthropic":
		return "end_turn"
	case kind == "gemini" && cut:
		return "MAX_TOKENS"
	case kind == "gemini":
		return "STOP"
	case cut:
		return "length"
	}
	return "stop"
}

// body is the answer as a whole response body of its wire format.
func (a answer) body() string {
	u := a.usage
	switch a.kind {
	case "anthropic":
		return mustJSON(map[string]any{"id": "msg_bill", "type": "message", "role": "assistant", "model": a.model,
			"content": []any{map[string]any{"type": "text", "text": a.text}}, "stop_reason": a.finish, "stop_sequence": nil,
			"usage": a.anthropicUsage(true)})
	case "gemini":
		return a.geminiChunk(a.text, true)
	}
	return mustJSON(map[string]any{"id": "chatcmpl-bill", "object": "chat.completion", "created": 1741570283, "model": a.model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": a.text, "refusal": nil},
			"logprobs": nil, "finish_reason": a.finish}},
		"usage": map[string]any{"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
			"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedInput},
			"completion_tokens_details": map[string]any{"reasoning_tokens": a.reasoning}}})
}

// anthropicUsage is Anthropic's usage object: input_tokens leaves out what
// was read from or written to the cache.
func (a answer) anthropicUsage(withOutput bool) map[string]any {
	u := a.usage
	m := map[string]any{"input_tokens": u.Input - u.CachedInput - u.CacheWrite,
		"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CachedInput, "output_tokens": 1}
	if withOutput {
		m["output_tokens"] = u.Output
	}
	return m
}

func (a answer) geminiChunk(text string, last bool) string {
	cand := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
	out := map[string]any{"candidates": []any{cand}, "modelVersion": a.model, "responseId": "bill"}
	if last {
		u := a.usage
		cand["finishReason"] = a.finish
		meta := map[string]any{"promptTokenCount": u.Input, "candidatesTokenCount": u.Output - a.reasoning,
			"totalTokenCount": u.Input + u.Output}
		if a.reasoning > 0 {
			meta["thoughtsTokenCount"] = a.reasoning
		}
		if u.CachedInput > 0 {
			meta["cachedContentTokenCount"] = u.CachedInput
		}
		out["usageMetadata"] = meta
	}
	return mustJSON(out)
}

// stream sends the answer as its wire format's stream, in two chunks of
// text; drop cuts it after the first, with no usage sent.
func (s *BillingServer) stream(w http.ResponseWriter, a answer, drop bool) {
	half := len(a.text) / 2
	parts := []string{a.text[:half], a.text[half:]}
	var evs []string
	switch a.kind {
	case "anthropic":
		evs = append(evs,
			anthropicEvent("message_start", mustJSON(map[string]any{"type": "message_start", "message": map[string]any{
				"id": "msg_bill", "type": "message", "role": "assistant", "content": []any{}, "model": a.model,
				"stop_reason": nil, "stop_sequence": nil, "usage": a.anthropicUsage(false)}})),
			anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
		for _, t := range parts {
			evs = append(evs, anthropicEvent("content_block_delta", mustJSON(map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": t}})))
		}
		evs = append(evs, anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
			anthropicEvent("message_delta", mustJSON(map[string]any{"type": "message_delta",
				"delta": map[string]any{"stop_reason": a.finish, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": a.usage.Output}})),
			anthropicEvent("message_stop", `{"type":"message_stop"}`))
	case "gemini":
		evs = append(evs, "data: "+a.geminiChunk(parts[0], false)+"\r\n\r\n", "data: "+a.geminiChunk(parts[1], true)+"\r\n\r\n")
	default:
		chunk := func(choices any, usage any) string {
			return "data: " + mustJSON(map[string]any{"id": "chatcmpl-bill", "object": "chat.completion.chunk", "created": 1741570283,
				"model": a.model, "choices": choices, "usage": usage}) + "\n\n"
		}
		evs = append(evs, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil}}, nil))
		for _, t := range parts {
			evs = append(evs, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"content": t}, "finish_reason": nil}}, nil))
		}
		u := a.usage
		evs = append(evs, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": a.finish}}, nil),
			chunk([]any{}, map[string]any{"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
				"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedInput},
				"completion_tokens_details": map[string]any{"reasoning_tokens": a.reasoning}}),
			"data: [DONE]\n\n")
	}
	if drop {
		// The first chunks only: the role, and the first half of the text.
		n := 2
		if a.kind == "anthropic" {
			n = 3
		}
		if a.kind == "gemini" {
			n = 1
		}
		SSE{Events: evs[:n], Drop: true}.ServeHTTP(w, nil)
		return
	}
	SSE{Events: evs}.ServeHTTP(w, nil)
}

// fail answers an error status in kind's wire format.
func (s *BillingServer) fail(w http.ResponseWriter, kind string, a BillAnswer) {
	body := a.Body
	if body == "" {
		msg := fmt.Sprintf("the billing fake answers %d", a.Status)
		switch kind {
		case "anthropic":
			typ := "api_error"
			if a.Status == http.StatusTooManyRequests {
				typ = "rate_limit_error"
			}
			body = AnthropicError(typ, msg)
		case "gemini":
			status := "UNAVAILABLE"
			if a.Status == http.StatusTooManyRequests {
				status = "RESOURCE_EXHAUSTED"
			}
			body = GeminiError(a.Status, status, msg)
		default:
			typ := "server_error"
			if a.Status == http.StatusTooManyRequests {
				typ = "rate_limit_exceeded"
			}
			body = OpenAIError(msg, typ, "")
		}
	}
	rp := Reply{Status: a.Status, Body: body}
	if a.RetryAfter != "" {
		rp.Header = Header("Retry-After", a.RetryAfter)
	}
	rp.ServeHTTP(w, nil)
}

// BatchUsage is what a batch request of kind's wire format (an OpenAI
// batch line's body, an Anthropic batch request's params) answered with
// text is billed for, counted as BillingServer counts an online call.
func BatchUsage(kind string, body map[string]any, text string) (BillUsage, BillCall) {
	path := "/v1/chat/completions"
	if kind == "anthropic" {
		path = "/v1/messages"
	}
	p, _ := readPrompt(path, body)
	in, _ := p.inputTokens()
	return BillUsage{Input: in, Output: Tokens(text)}, p.call
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("providertest: " + err.Error())
	}
	return string(b)
}
