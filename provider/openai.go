package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/jetpool/jetpool/retry"
)

// OpenAIBaseURLDefault is the base URL of an openai provider that sets none.
const OpenAIBaseURLDefault = "https://api.openai.com/v1"

// openAI speaks Chat Completions, for OpenAI and every compatible endpoint.
type openAI struct{ *client }

func newOpenAI(cfg Config) (Provider, error) {
	c, err := newClient(cfg, OpenAIBaseURLDefault)
	if err != nil {
		return nil, err
	}
	c.auth = func(h http.Header, key string) { h.Set("Authorization", "Bearer "+key) }
	c.known = openAIKnown
	return &openAI{c}, nil
}

func (p *openAI) Kind() string { return KindOpenAI }

// openAIKnown is what we know of OpenAI-compatible endpoints that
// retry.Classify cannot tell from the status and type alone.
func openAIKnown(e *retry.Error) retry.Class {
	if e.Status == http.StatusTooManyRequests && strings.HasPrefix(e.Message, "Request too large") {
		// OpenAI: "Request too large for gpt-4o in organization … on tokens per
		// min (TPM): Limit 30000, Requested 50000. The input or output tokens
		// must be reduced in order to run successfully." A 429 with
		// code rate_limit_exceeded, but the request alone exceeds the per-minute
		// budget: no wait lets it through. (Groq says the same as a 413.)
		return retry.ClassInvalidRequest
	}
	return retry.ClassNone
}

type openAIMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

func (p *openAI) body(req Request) map[string]any {
	msgs := make([]openAIMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, openAIMessage{Role: "system", Content: req.System})
	}
	for _, m := range req.Messages {
		msgs = append(msgs, openAIMessage{Role: m.Role, Content: m.Content})
	}
	own := map[string]any{"model": req.Model, "messages": msgs}
	if _, set := req.Params["stream"]; set || req.Stream {
		own["stream"] = req.Stream // Request.Stream, not a param, decides
	}
	if req.Stream {
		if _, set := req.Params["stream_options"]; !set {
			own["stream_options"] = map[string]any{"include_usage": true}
		}
	}
	if _, set := req.Params["response_format"]; req.JSON && !set {
		if req.Schema != nil {
			own["response_format"] = map[string]any{"type": "json_schema",
				"json_schema": map[string]any{"name": "response", "schema": req.Schema}}
		} else {
			own["response_format"] = map[string]any{"type": "json_object"}
		}
	}
	return mergeParams(req.Params, own)
}

// openAIChoice is a choice of a completion or of a stream chunk.
type openAIChoice struct {
	Message      struct{ Content json.RawMessage } `json:"message"`
	Delta        struct{ Content json.RawMessage } `json:"delta"`
	FinishReason *string                           `json:"finish_reason"`
}

type openAIResponse struct {
	Model   string         `json:"model"`
	Choices []openAIChoice `json:"choices"`
	Usage   *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error json.RawMessage `json:"error"`
}

func (r *openAIResponse) usage() Usage {
	if r.Usage == nil {
		return Usage{}
	}
	return Usage{InputTokens: r.Usage.PromptTokens, OutputTokens: r.Usage.CompletionTokens}
}

// Call implements Provider.
func (p *openAI) Call(ctx context.Context, req Request) (res Response, err error) {
	key, kerr := p.key(req.Model)
	if kerr != nil {
		return Response{}, kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	hdr := http.Header{}
	if req.Stream {
		hdr.Set("Accept", "text/event-stream")
	}
	resp, rerr := p.send(ctx, http.MethodPost, p.endpoint("chat/completions", nil), p.body(req), req.Model, key, hdr)
	if rerr != nil {
		return Response{}, rerr
	}
	defer resp.Body.Close()
	defer p.noteRateLimit(resp.Header, &res, &err) // http.go
	if req.Stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return p.stream(ctx, resp.Body, req, key)
	}
	// Not a stream (or a server that answered a stream request with plain JSON).
	b, rerr := p.readBody(ctx, resp, req.Model, key)
	if rerr != nil {
		return Response{}, rerr
	}
	var r openAIResponse
	if rerr := p.decodeBody(b, &r, req.Model, key); rerr != nil {
		return Response{}, rerr
	}
	if len(r.Error) > 0 && string(r.Error) != "null" && len(r.Choices) == 0 {
		return Response{}, p.inBandError(b, req.Model, key)
	}
	if len(r.Choices) == 0 {
		return Response{}, &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
			Message: "response has no choices", Provider: p.cfg.Name, Model: req.Model}
	}
	ch := r.Choices[0]
	out := Response{Text: contentText(ch.Message.Content), Usage: r.usage(), Model: cmp.Or(r.Model, req.Model)}
	if ch.FinishReason != nil {
		out.FinishReason = *ch.FinishReason
	}
	if req.Stream && req.OnDelta != nil && out.Text != "" {
		req.OnDelta(out.Text)
	}
	return out, nil
}

// stream reads an SSE stream of chat.completion.chunk objects up to data: [DONE].
func (p *openAI) stream(ctx context.Context, body io.Reader, req Request, key string) (Response, error) {
	sr := newSSEReader(body)
	var text strings.Builder
	out := Response{Model: req.Model}
	for {
		ev, err := sr.next()
		if err != nil {
			if err == io.EOF && out.FinishReason != "" {
				// Some compatible servers end the stream without [DONE].
				break
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // ended before the answer did
			}
			return Response{}, p.streamBroken(ctx, err, req.Model, key)
		}
		if bytes.Equal(bytes.TrimSpace(ev.data), []byte("[DONE]")) {
			break
		}
		var chunk openAIResponse
		if err := json.Unmarshal(ev.data, &chunk); err != nil {
			return Response{}, p.streamBroken(ctx, fmt.Errorf("bad stream chunk: %w", err), req.Model, key)
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			return Response{}, p.inBandError(ev.data, req.Model, key)
		}
		if chunk.Model != "" {
			out.Model = chunk.Model
		}
		if chunk.Usage != nil {
			out.Usage = chunk.usage()
		}
		for _, ch := range chunk.Choices {
			if d := contentText(ch.Delta.Content); d != "" {
				text.WriteString(d)
				if req.OnDelta != nil {
					req.OnDelta(d)
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				out.FinishReason = *ch.FinishReason
			}
		}
	}
	out.Text = text.String()
	return out, nil
}

// contentText is a message's content: a string, null, or (some compatible
// servers) a list of {"type":"text","text":…} parts.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// Preflight lists the models (GET /models) and looks for model there. An
// endpoint without a listing (404/405), or with an empty one, gets a
// one-token call instead.
func (p *openAI) Preflight(ctx context.Context, model string) error {
	key, kerr := p.key(model)
	if kerr != nil {
		return kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	resp, rerr := p.send(ctx, http.MethodGet, p.endpoint("models", nil), nil, model, key, nil)
	if rerr != nil {
		if rerr.Status == http.StatusNotFound || rerr.Status == http.StatusMethodNotAllowed {
			return p.probe(ctx, model)
		}
		return rerr
	}
	defer resp.Body.Close()
	b, rerr := p.readBody(ctx, resp, model, key)
	if rerr != nil {
		return rerr
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Data) == 0 {
		return p.probe(ctx, model)
	}
	if model == "" {
		return nil
	}
	for _, m := range list.Data {
		if sameModel(m.ID, model) {
			return nil
		}
	}
	return &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "NotFoundError",
		Message:  fmt.Sprintf("model %q is not in the provider's model list (%d models)", model, len(list.Data)),
		Provider: p.cfg.Name, Model: model}
}

// probe is a one-token call.
func (p *openAI) probe(ctx context.Context, model string) error {
	if model == "" {
		return nil // nothing more to prove without a model
	}
	_, err := p.Call(ctx, Request{Model: model, Messages: []Message{{Role: "user", Content: "ping"}},
		Params: map[string]any{"max_tokens": 1}})
	return err
}

// sameModel matches a listed id against a requested model: Gemini's
// compatible endpoint lists "models/x", Ollama lists "x:latest".
func sameModel(listed, model string) bool {
	return listed == model || strings.TrimPrefix(listed, "models/") == model ||
		listed == model+":latest"
}
