package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/jetpool/jetpool/retry"
)

// GeminiBaseURLDefault is the base URL of a gemini provider that sets none.
const GeminiBaseURLDefault = "https://generativelanguage.googleapis.com/v1beta"

// gemini speaks the native generateContent API. The key travels in the
// x-goog-api-key header, never in the URL's ?key=, so that it cannot leak
// through a logged URL.
type gemini struct{ *client }

func newGemini(cfg Config) (Provider, error) {
	c, err := newClient(cfg, GeminiBaseURLDefault)
	if err != nil {
		return nil, err
	}
	c.auth = func(h http.Header, key string) { h.Set("X-Goog-Api-Key", key) }
	return &gemini{c}, nil
}

func (p *gemini) Kind() string { return KindGemini }

// modelPath is "models/{model}" ("models/x" and "tunedModels/x" kept as they are).
func modelPath(model string) string {
	if strings.Contains(model, "/") {
		return model
	}
	return "models/" + model
}

// geminiParams maps common parameter names onto generationConfig's.
var geminiParams = map[string]string{
	"max_tokens":            "maxOutputTokens",
	"max_completion_tokens": "maxOutputTokens",
	"max_output_tokens":     "maxOutputTokens",
	"top_p":                 "topP",
	"top_k":                 "topK",
	"stop":                  "stopSequences",
	"stop_sequences":        "stopSequences",
	"presence_penalty":      "presencePenalty",
	"frequency_penalty":     "frequencyPenalty",
	"candidate_count":       "candidateCount",
	"response_mime_type":    "responseMimeType",
}

type geminiPart struct {
	Text    string `json:"text,omitempty"`
	Thought bool   `json:"thought,omitempty"`
}

type geminiContent struct {
	Role  string       `json:"role,omitempty"`
	Parts []geminiPart `json:"parts"`
}

func (p *gemini) body(req Request) map[string]any {
	gen := map[string]any{}
	for k, v := range req.Params {
		if g, ok := geminiParams[k]; ok {
			k = g
		}
		if s, ok := v.(string); ok && k == "stopSequences" {
			v = []string{s}
		}
		gen[k] = v
	}
	if req.JSON {
		gen["responseMimeType"] = "application/json"
		if req.Schema != nil {
			gen["responseJsonSchema"] = req.Schema
		}
	}
	contents := make([]geminiContent, 0, len(req.Messages))
	for _, m := range req.Messages {
		role := m.Role
		if role == "assistant" {
			role = "model"
		}
		contents = append(contents, geminiContent{Role: role, Parts: []geminiPart{{Text: m.Content}}})
	}
	body := map[string]any{"contents": contents}
	if req.System != "" {
		body["systemInstruction"] = geminiContent{Parts: []geminiPart{{Text: req.System}}}
	}
	if len(gen) > 0 {
		body["generationConfig"] = gen
	}
	return body
}

type geminiResponse struct {
	Candidates []struct {
		Content      geminiContent `json:"content"`
		FinishReason string        `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *struct {
		PromptTokenCount     int `json:"promptTokenCount"`
		CandidatesTokenCount int `json:"candidatesTokenCount"`
		ThoughtsTokenCount   int `json:"thoughtsTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string          `json:"modelVersion"`
	Error        json.RawMessage `json:"error"`
}

// geminiFinish normalises finishReason.
func geminiFinish(r string) string {
	switch r {
	case "STOP":
		return "stop"
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY":
		return "content_filter"
	}
	return strings.ToLower(r)
}

// apply adds one response (or stream chunk) to out and returns its new text.
func (r *geminiResponse) apply(out *Response) string {
	if r.ModelVersion != "" {
		out.Model = r.ModelVersion
	}
	if u := r.UsageMetadata; u != nil {
		// Thinking tokens are billed as output.
		out.Usage = Usage{InputTokens: u.PromptTokenCount, OutputTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount}
	}
	if len(r.Candidates) == 0 {
		return ""
	}
	c := r.Candidates[0]
	if c.FinishReason != "" {
		out.FinishReason = geminiFinish(c.FinishReason)
	}
	var b strings.Builder
	for _, part := range c.Content.Parts {
		if !part.Thought {
			b.WriteString(part.Text)
		}
	}
	return b.String()
}

// blocked is the error of a prompt that Gemini refused to answer at all.
func (r *geminiResponse) blocked(p *gemini, model string) *retry.Error {
	if len(r.Candidates) > 0 || r.PromptFeedback == nil || r.PromptFeedback.BlockReason == "" {
		return nil
	}
	// The same prompt will be blocked again: permanent.
	return &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "PromptBlockedError",
		ProviderType: "BLOCKED", ProviderCode: r.PromptFeedback.BlockReason,
		Message:  "prompt blocked: " + r.PromptFeedback.BlockReason,
		Provider: p.cfg.Name, Model: model}
}

func hasError(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// Call implements Provider.
func (p *gemini) Call(ctx context.Context, req Request) (res Response, err error) {
	key, kerr := p.key(req.Model)
	if kerr != nil {
		return Response{}, kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	target := p.endpoint(modelPath(req.Model)+":generateContent", nil)
	if req.Stream {
		target = p.endpoint(modelPath(req.Model)+":streamGenerateContent", url.Values{"alt": {"sse"}})
	}
	resp, rerr := p.send(ctx, http.MethodPost, target, p.body(req), req.Model, key, nil)
	if rerr != nil {
		return Response{}, rerr
	}
	defer resp.Body.Close()
	defer p.noteRateLimit(resp.Header, &res, &err) // http.go
	if req.Stream {
		return p.stream(ctx, resp.Body, req, key)
	}
	b, rerr := p.readBody(ctx, resp, req.Model, key)
	if rerr != nil {
		return Response{}, rerr
	}
	var r geminiResponse
	if rerr := p.decodeBody(b, &r, req.Model, key); rerr != nil {
		return Response{}, rerr
	}
	if hasError(r.Error) {
		return Response{}, p.inBandError(b, req.Model, key)
	}
	if e := r.blocked(p, req.Model); e != nil {
		return Response{}, e
	}
	out := Response{Model: req.Model}
	out.Text = r.apply(&out)
	return out, nil
}

// stream reads alt=sse chunks, each a whole GenerateContentResponse. The
// stream has no end marker: a clean end after a finishReason is success,
// anything else a broken stream.
func (p *gemini) stream(ctx context.Context, body io.Reader, req Request, key string) (Response, error) {
	sr := newSSEReader(body)
	var text strings.Builder
	out := Response{Model: req.Model}
	for {
		ev, err := sr.next()
		if err == io.EOF && out.FinishReason != "" {
			out.Text = text.String()
			return out, nil
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return Response{}, p.streamBroken(ctx, err, req.Model, key)
		}
		var chunk geminiResponse
		if err := json.Unmarshal(ev.data, &chunk); err != nil {
			return Response{}, p.streamBroken(ctx, fmt.Errorf("bad stream chunk: %w", err), req.Model, key)
		}
		if hasError(chunk.Error) {
			return Response{}, p.inBandError(ev.data, req.Model, key)
		}
		if e := chunk.blocked(p, req.Model); e != nil {
			return Response{}, e
		}
		if d := chunk.apply(&out); d != "" {
			text.WriteString(d)
			if req.OnDelta != nil {
				req.OnDelta(d)
			}
		}
	}
}

// Preflight gets the model (GET /models/{model}), or lists one model when
// none is given.
func (p *gemini) Preflight(ctx context.Context, model string) error {
	key, kerr := p.key(model)
	if kerr != nil {
		return kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	target := p.endpoint("models", url.Values{"pageSize": {"1"}})
	if model != "" {
		target = p.endpoint(modelPath(model), nil)
	}
	resp, rerr := p.send(ctx, http.MethodGet, target, nil, model, key, nil)
	if rerr != nil {
		return rerr
	}
	resp.Body.Close()
	return nil
}
