package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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
	"response_schema":       "responseSchema",
	"response_json_schema":  "responseJsonSchema",
}

type geminiPart struct {
	Text             string              `json:"text,omitempty"`
	Thought          bool                `json:"thought,omitempty"`
	InlineData       *geminiData         `json:"inlineData,omitempty"`
	FileData         *geminiFile         `json:"fileData,omitempty"`
	FunctionCall     *geminiCall         `json:"functionCall,omitempty"`
	FunctionResponse *geminiFunctionResp `json:"functionResponse,omitempty"`
	ThoughtSignature string              `json:"thoughtSignature,omitempty"`
}

type geminiData struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

type geminiFile struct {
	MimeType string `json:"mimeType"`
	FileURI  string `json:"fileUri"`
}

type geminiCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
}

type geminiFunctionResp struct {
	Name     string         `json:"name"`
	Response map[string]any `json:"response"`
}

// geminiParts is a turn's parts: the answers to the tool calls it follows,
// its images and documents (inlineData, or fileData for a URL), its text,
// and the function calls of a model turn (with their thought signatures).
func geminiParts(msgs []Message, i int) []geminiPart {
	m := msgs[i]
	var parts []geminiPart
	for _, c := range answersTools(msgs, i) {
		parts = append(parts, geminiPart{FunctionResponse: &geminiFunctionResp{Name: c.Name, Response: map[string]any{"error": notRun}}})
	}
	for _, pt := range m.Parts {
		if pt.Data != "" {
			parts = append(parts, geminiPart{InlineData: &geminiData{MimeType: pt.mediaType(), Data: pt.Data}})
		} else {
			parts = append(parts, geminiPart{FileData: &geminiFile{MimeType: pt.mediaType(), FileURI: pt.URL}})
		}
	}
	if m.Content != "" || (len(parts) == 0 && len(m.ToolCalls) == 0) {
		parts = append(parts, geminiPart{Text: m.Content})
	}
	for _, c := range m.ToolCalls {
		args, _ := c.arguments()
		parts = append(parts, geminiPart{FunctionCall: &geminiCall{Name: c.Name, Args: args}, ThoughtSignature: c.Signature})
	}
	return parts
}

// geminiToolConfig is Request.ToolChoice as a functionCallingConfig (nil: not sent).
func geminiToolConfig(choice string) map[string]any {
	mode := map[string]string{ToolChoiceAuto: "AUTO", ToolChoiceNone: "NONE", ToolChoiceRequired: "ANY"}
	switch {
	case choice == "":
		return nil
	case mode[choice] != "":
		return map[string]any{"functionCallingConfig": map[string]any{"mode": mode[choice]}}
	}
	return map[string]any{"functionCallingConfig": map[string]any{"mode": "ANY", "allowedFunctionNames": []string{choice}}}
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
		// What the params set wins (a response_mime_type or schema of their own).
		if _, set := gen["responseMimeType"]; !set {
			gen["responseMimeType"] = "application/json"
		}
		_, own := gen["responseSchema"]
		if _, ownJSON := gen["responseJsonSchema"]; req.Schema != nil && !own && !ownJSON {
			// responseJsonSchema takes JSON Schema as it is; responseSchema
			// is an OpenAPI subset that refuses additionalProperties, $ref,
			// const and type lists.
			gen["responseJsonSchema"] = req.Schema
		}
	}
	contents := make([]geminiContent, 0, len(req.Messages))
	for i, m := range req.Messages {
		role := m.Role
		if role == "assistant" {
			role = "model"
		}
		contents = append(contents, geminiContent{Role: role, Parts: geminiParts(req.Messages, i)})
	}
	body := map[string]any{"contents": contents}
	if req.System != "" {
		body["systemInstruction"] = geminiContent{Parts: []geminiPart{{Text: req.System}}}
	}
	if len(req.Tools) > 0 {
		decls := make([]map[string]any, len(req.Tools))
		for i, t := range req.Tools {
			d := map[string]any{"name": t.Name, "parametersJsonSchema": t.parameters()}
			if t.Description != "" {
				d["description"] = t.Description
			}
			decls[i] = d
		}
		body["tools"] = []map[string]any{{"functionDeclarations": decls}}
	}
	if tc := geminiToolConfig(req.ToolChoice); tc != nil {
		body["toolConfig"] = tc
	}
	if len(gen) > 0 {
		body["generationConfig"] = gen
	}
	return body
}

type geminiResponse struct {
	Candidates []struct {
		// Content stays raw: a candidate stopped by a filter has none, and a
		// wrong shape must be told from an absent one.
		Content      json.RawMessage `json:"content"`
		FinishReason string          `json:"finishReason"`
	} `json:"candidates"`
	PromptFeedback *struct {
		BlockReason string `json:"blockReason"`
	} `json:"promptFeedback"`
	UsageMetadata *struct {
		PromptTokenCount        int `json:"promptTokenCount"`
		CandidatesTokenCount    int `json:"candidatesTokenCount"`
		ThoughtsTokenCount      int `json:"thoughtsTokenCount"`
		CachedContentTokenCount int `json:"cachedContentTokenCount"`
	} `json:"usageMetadata"`
	ModelVersion string          `json:"modelVersion"`
	Error        json.RawMessage `json:"error"`
}

// geminiFinish normalises finishReason.
func geminiFinish(r string) string {
	switch r {
	case "":
		return ""
	case "STOP":
		return FinishStop
	case "MAX_TOKENS":
		return FinishLength
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY":
		return FinishContentFilter
	case "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS":
		return FinishToolCalls
	}
	return FinishOther // LANGUAGE, OTHER, FINISH_REASON_UNSPECIFIED, …
}

// apply adds one response (or stream chunk) to out and returns its new
// text; a candidate of the wrong shape is an error naming what was found.
func (r *geminiResponse) apply(out *Response) (string, error) {
	if r.ModelVersion != "" {
		out.Model = r.ModelVersion
	}
	if u := r.UsageMetadata; u != nil {
		// Thinking tokens are billed as output. promptTokenCount includes
		// the cached content.
		out.Usage = Usage{InputTokens: u.PromptTokenCount, OutputTokens: u.CandidatesTokenCount + u.ThoughtsTokenCount,
			CachedInputTokens: u.CachedContentTokenCount, ReasoningTokens: u.ThoughtsTokenCount}
	}
	if len(r.Candidates) == 0 {
		return "", nil
	}
	c := r.Candidates[0]
	if c.FinishReason != "" {
		out.FinishReasonRaw = c.FinishReason
		out.FinishReason = geminiFinish(c.FinishReason)
	}
	if len(c.Content) == 0 || string(c.Content) == "null" {
		if c.FinishReason == "" {
			return "", fmt.Errorf("candidates[0] has no content and no finishReason")
		}
		return "", nil // stopped (by a filter, say) before any text
	}
	var content struct {
		Parts []struct {
			Text             json.RawMessage `json:"text"`
			Thought          bool            `json:"thought"`
			FunctionCall     *geminiCall     `json:"functionCall"`
			ThoughtSignature string          `json:"thoughtSignature"`
		} `json:"parts"`
	}
	if err := json.Unmarshal(c.Content, &content); err != nil {
		return "", fmt.Errorf("candidates[0].content is %s, want an object with parts", jsonKind(c.Content))
	}
	var b strings.Builder
	for i, part := range content.Parts {
		if fc := part.FunctionCall; fc != nil {
			if fc.Name == "" {
				return "", fmt.Errorf("candidates[0].content.parts[%d].functionCall has no name", i)
			}
			out.ToolCalls = append(out.ToolCalls, ToolCall{ID: callID(fc.ID, len(out.ToolCalls)), Name: fc.Name,
				Arguments: rawArgs(string(fc.Args)), Signature: part.ThoughtSignature})
			continue
		}
		if part.Thought || len(part.Text) == 0 {
			continue // a thought summary
		}
		var s string
		if err := json.Unmarshal(part.Text, &s); err != nil {
			return "", fmt.Errorf("candidates[0].content.parts[%d].text is %s, want a string", i, jsonKind(part.Text))
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// blocked reports a prompt that Gemini refused to answer at all
// (promptFeedback.blockReason, no candidates), and makes out its answer: a
// content filter's, its usage kept, since the prompt's tokens are counted
// (usageMetadata) and the same prompt is blocked again.
func (r *geminiResponse) blocked(out *Response) bool {
	if len(r.Candidates) > 0 || r.PromptFeedback == nil || r.PromptFeedback.BlockReason == "" {
		return false
	}
	_, _ = r.apply(out) // without candidates: the usage and the model alone, no error
	out.FinishReason, out.FinishReasonRaw = FinishContentFilter, FinishRawBlockPrefix+r.PromptFeedback.BlockReason
	return true
}

// FinishRawBlockPrefix begins FinishReasonRaw of a Gemini prompt that was
// blocked before any answer ("blockReason SAFETY").
const FinishRawBlockPrefix = "blockReason "

func hasError(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// Call implements Provider.
func (p *gemini) Call(ctx context.Context, req Request) (Response, error) {
	return timed(func() (Response, error) { return p.call(ctx, req) })
}

func (p *gemini) call(ctx context.Context, req Request) (res Response, err error) {
	key, kerr := p.key(req.Model)
	if kerr != nil {
		return Response{}, kerr
	}
	ctx, cancel := p.callContext(ctx, req.Stream) // idle.go
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
	out := Response{Model: req.Model}
	if r.blocked(&out) {
		return out, nil
	}
	if len(r.Candidates) == 0 {
		return Response{}, p.invalidResponse(req.Model, "response has no candidates")
	}
	text, err := r.apply(&out)
	if err != nil {
		return Response{}, p.invalidResponse(req.Model, err.Error())
	}
	out.Text = text
	withCalls(&out)
	return out, nil
}

// stream reads alt=sse chunks, each a whole GenerateContentResponse. The
// stream has no end marker: a clean end after a finishReason is success,
// anything else a broken stream.
func (p *gemini) stream(ctx context.Context, body io.Reader, req Request, key string) (Response, error) {
	w := p.watchIdle(ctx) // idle.go
	defer w.end()
	sr := newSSEReader(body)
	sr.idle = w
	var text strings.Builder
	out := Response{Model: req.Model}
	for {
		ev, err := sr.next()
		if err == io.EOF && out.FinishReason != "" {
			out.Text = text.String()
			withCalls(&out)
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
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// Whole JSON of the wrong shape: not a cut stream.
				return Response{}, p.invalidResponse(req.Model, "stream chunk: "+err.Error())
			}
			return Response{}, p.streamBroken(ctx, badEvent(ev.data, err), req.Model, key)
		}
		if hasError(chunk.Error) {
			return Response{}, p.inBandError(ev.data, req.Model, key)
		}
		if chunk.blocked(&out) {
			continue // the stream ends after it
		}
		calls := len(out.ToolCalls)
		d, err := chunk.apply(&out)
		if err != nil {
			return Response{}, p.invalidResponse(req.Model, "stream chunk: "+err.Error())
		}
		if d != "" || len(out.ToolCalls) > calls || out.FinishReason != "" || geminiThinks(&chunk) { // idle.go
			w.progress()
		} else {
			w.keepalive() // a chunk without candidates, or with empty parts
		}
		if d != "" {
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
