package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
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
	Role string `json:"role"`
	// Content is a string, a list of parts, or nil (an assistant turn of
	// tool calls alone).
	Content    any              `json:"content"`
	ToolCalls  []openAIToolCall `json:"tool_calls,omitempty"`
	ToolCallID string           `json:"tool_call_id,omitempty"`
}

type openAIToolCall struct {
	ID       string             `json:"id"`
	Type     string             `json:"type"`
	Function openAIFunctionCall `json:"function"`
}

type openAIFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// messages is the conversation in Chat Completions' shape: the system
// prompt first, images and documents as content parts, an assistant turn's
// tool calls answered by tool messages before the next user turn.
func (p *openAI) messages(req Request) ([]openAIMessage, *retry.Error) {
	msgs := make([]openAIMessage, 0, len(req.Messages)+1)
	if req.System != "" {
		msgs = append(msgs, openAIMessage{Role: "system", Content: req.System})
	}
	for i, m := range req.Messages {
		for j, c := range answersTools(req.Messages, i) {
			msgs = append(msgs, openAIMessage{Role: "tool", ToolCallID: callID(c.ID, j), Content: notRun})
		}
		om := openAIMessage{Role: m.Role, Content: m.Content}
		if len(m.Parts) > 0 {
			parts, err := p.parts(m, req.Model)
			if err != nil {
				return nil, err
			}
			om.Content = parts
		}
		for j, c := range m.ToolCalls {
			om.ToolCalls = append(om.ToolCalls, openAIToolCall{ID: callID(c.ID, j), Type: "function",
				Function: openAIFunctionCall{Name: c.Name, Arguments: c.argumentText()}})
		}
		if len(m.ToolCalls) > 0 && m.Content == "" {
			om.Content = nil
		}
		msgs = append(msgs, om)
	}
	return msgs, nil
}

// parts is a user turn with images (image_url: a URL or a data: URL) and
// documents (file: base64 data only; Chat Completions takes no document URL).
func (p *openAI) parts(m Message, model string) ([]map[string]any, *retry.Error) {
	out := make([]map[string]any, 0, len(m.Parts)+1)
	for _, pt := range m.Parts {
		switch pt.Type {
		case PartDocument:
			if pt.Data == "" {
				return nil, p.badPart(model, "OpenAI Chat Completions takes a document as data, not a URL ("+redactURL(pt.URL)+
					"): give the document as a file path or a data: URL")
			}
			out = append(out, map[string]any{"type": "file",
				"file": map[string]any{"filename": cmp.Or(pt.Name, "document.pdf"), "file_data": pt.dataURL()}})
		default:
			out = append(out, map[string]any{"type": "image_url", "image_url": map[string]any{"url": pt.dataURL()}})
		}
	}
	if m.Content != "" {
		out = append(out, map[string]any{"type": "text", "text": m.Content})
	}
	return out, nil
}

// openAITools is Request.Tools as function tools.
func openAITools(tools []Tool) []map[string]any {
	out := make([]map[string]any, len(tools))
	for i, t := range tools {
		fn := map[string]any{"name": t.Name, "parameters": t.parameters()}
		if t.Description != "" {
			fn["description"] = t.Description
		}
		out[i] = map[string]any{"type": "function", "function": fn}
	}
	return out
}

// openAIToolChoice is Request.ToolChoice on the wire (nil: not sent).
func openAIToolChoice(choice string) any {
	switch choice {
	case "":
		return nil
	case ToolChoiceAuto, ToolChoiceNone, ToolChoiceRequired:
		return choice
	}
	return map[string]any{"type": "function", "function": map[string]any{"name": choice}}
}

func (p *openAI) body(req Request) (map[string]any, *retry.Error) {
	msgs, rerr := p.messages(req)
	if rerr != nil {
		return nil, rerr
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
	if len(req.Tools) > 0 {
		own["tools"] = openAITools(req.Tools)
	}
	if tc := openAIToolChoice(req.ToolChoice); tc != nil {
		own["tool_choice"] = tc
	}
	if _, set := req.Params["response_format"]; req.JSON && !set {
		if req.Schema != nil {
			js := map[string]any{"name": "response", "schema": req.Schema}
			if OpenAIStrict(req.Schema) {
				// Outside the strict subset, strict: true is a 400 for
				// every record; without it the schema still guides.
				js["strict"] = true
			}
			own["response_format"] = map[string]any{"type": "json_schema", "json_schema": js}
		} else {
			own["response_format"] = map[string]any{"type": "json_object"}
		}
	}
	params, _ := AdaptParams(KindOpenAI, req.Model, req.Params) // models.go
	return mergeParams(params, own), nil
}

// openAIChoice is a choice of a completion or of a stream chunk. Message
// and Delta stay raw so that a wrong shape is told from an absent one.
type openAIChoice struct {
	Message      json.RawMessage `json:"message"`
	Delta        json.RawMessage `json:"delta"`
	FinishReason *string         `json:"finish_reason"`
}

// openAIMessageOut is an assistant message (or a stream chunk's delta).
type openAIMessageOut struct {
	Content   json.RawMessage `json:"content"`
	Refusal   *string         `json:"refusal"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

type openAIUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

type openAIResponse struct {
	Model   string          `json:"model"`
	Choices []openAIChoice  `json:"choices"`
	Usage   *openAIUsage    `json:"usage"`
	Error   json.RawMessage `json:"error"`
}

func (r *openAIResponse) usage() Usage {
	if r.Usage == nil {
		return Usage{}
	}
	u := Usage{InputTokens: r.Usage.PromptTokens, OutputTokens: r.Usage.CompletionTokens}
	if d := r.Usage.PromptTokensDetails; d != nil {
		u.CachedInputTokens = d.CachedTokens
	}
	if d := r.Usage.CompletionTokensDetails; d != nil {
		u.ReasoningTokens = d.ReasoningTokens
	}
	return u
}

// openAIFinish normalises finish_reason.
func openAIFinish(r string) string {
	switch r {
	case "":
		return ""
	case "stop", "eos", "end_turn": // "eos": some vLLM and TGI builds
		return FinishStop
	case "length", "max_tokens":
		return FinishLength
	case "content_filter":
		return FinishContentFilter
	case "tool_calls", "function_call":
		return FinishToolCalls
	}
	return FinishOther
}

// Call implements Provider.
func (p *openAI) Call(ctx context.Context, req Request) (Response, error) {
	return timed(func() (Response, error) { return p.call(ctx, req) })
}

func (p *openAI) call(ctx context.Context, req Request) (Response, error) {
	key, kerr := p.key(req.Model)
	if kerr != nil {
		return Response{}, kerr
	}
	ctx, cancel := p.callContext(ctx, req.Stream) // idle.go
	defer cancel()
	hdr := http.Header{}
	if req.Stream {
		hdr.Set("Accept", "text/event-stream")
	}
	body, rerr := p.body(req)
	if rerr != nil {
		return Response{}, rerr
	}
	resp, rerr := p.send(ctx, http.MethodPost, p.endpoint("chat/completions", nil), body, req.Model, key, hdr)
	if rerr != nil {
		return Response{}, rerr
	}
	defer resp.Body.Close()
	return p.answer(ctx, resp, req, key, p.stream, p.decode)
}

// decode parses a chat.completion body. A body without choices, or whose
// first choice has no message or a message of the wrong shape (content
// 12345, say), is an InvalidResponseError: never an empty success.
func (p *openAI) decode(b []byte, model, key string) (Response, *retry.Error) {
	var r openAIResponse
	if rerr := p.decodeBody(b, &r, model, key); rerr != nil {
		return Response{}, rerr
	}
	if len(r.Error) > 0 && string(r.Error) != "null" && len(r.Choices) == 0 {
		return Response{}, p.inBandError(b, model, key)
	}
	if len(r.Choices) == 0 {
		return Response{}, p.invalidResponse(model, "response has no choices")
	}
	ch := r.Choices[0]
	if len(ch.Message) == 0 || string(ch.Message) == "null" {
		return Response{}, p.invalidResponse(model, "choices[0] has no message")
	}
	m, err := parseMessage(ch.Message)
	if err != nil {
		return Response{}, p.invalidResponse(model, "choices[0].message"+err.Error())
	}
	text, refused, err := m.text()
	if err != nil {
		return Response{}, p.invalidResponse(model, "choices[0].message"+err.Error())
	}
	calls, err := m.toolCalls()
	if err != nil {
		return Response{}, p.invalidResponse(model, "choices[0].message"+err.Error())
	}
	out := Response{Text: text, ToolCalls: calls, Usage: r.usage(), Model: cmp.Or(r.Model, model)}
	if ch.FinishReason != nil {
		out.FinishReasonRaw = *ch.FinishReason
		out.FinishReason = openAIFinish(*ch.FinishReason)
	}
	if refused {
		refusal(&out)
	}
	withCalls(&out)
	return out, nil
}

// FinishRawRefusal is FinishReasonRaw of an OpenAI answer that carried a
// refusal (message.refusal, or streamed delta.refusal) instead of content.
const FinishRawRefusal = "refusal"

// refusal marks an answer the model refused: OpenAI ends it with
// finish_reason stop, but its text is the refusal, not an answer, and the
// same request is refused again.
func refusal(out *Response) {
	out.FinishReason, out.FinishReasonRaw = FinishContentFilter, FinishRawRefusal
}

// stream reads an SSE stream of chat.completion.chunk objects up to data: [DONE].
func (p *openAI) stream(ctx context.Context, body io.Reader, req Request, key string) (Response, error) {
	w := p.watchIdle(ctx) // idle.go
	defer w.end()
	sr := newSSEReader(body)
	sr.idle = w
	var text strings.Builder
	var calls toolAcc
	refused := false
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
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// Whole JSON of the wrong shape: not a cut stream.
				return Response{}, p.invalidResponse(req.Model, "stream chunk: "+err.Error())
			}
			return Response{}, p.streamBroken(ctx, badEvent(ev.data, err), req.Model, key)
		}
		if ev.event == "error" || (len(chunk.Error) > 0 && string(chunk.Error) != "null") {
			return Response{}, p.inBandError(ev.data, req.Model, key)
		}
		if chunk.Model != "" {
			out.Model = chunk.Model
		}
		if chunk.Usage != nil {
			out.Usage = chunk.usage()
		}
		moved := false
		for _, ch := range chunk.Choices {
			d, r, err := messageText(ch.Delta)
			refused = refused || r
			if err != nil {
				return Response{}, p.invalidResponse(req.Model, "stream chunk: choices[].delta"+err.Error())
			}
			if d != "" {
				moved = true
				text.WriteString(d)
				if req.OnDelta != nil {
					req.OnDelta(d)
				}
			} else if !moved {
				moved = openAIDeltaMoves(ch.Delta) // idle.go
			}
			if err := calls.openAIDelta(ch.Delta); err != nil {
				return Response{}, p.invalidResponse(req.Model, "stream chunk: choices[].delta"+err.Error())
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				moved = true
				out.FinishReasonRaw = *ch.FinishReason
				out.FinishReason = openAIFinish(*ch.FinishReason)
			}
		}
		if moved {
			w.progress()
		} else {
			w.keepalive() // a role chunk, an empty delta, a usage chunk
		}
	}
	out.Text = text.String()
	out.ToolCalls = calls.done()
	if refused {
		refusal(&out)
	}
	withCalls(&out)
	return out, nil
}

// messageText is the text of a message or delta object: its content is a
// string, null, or (some compatible servers) a list of {"type":"text",
// "text":…} parts. Anything else is an error naming what was found
// (".content is a number, want a string or a list of parts"). A message
// whose content is null but that carries tool calls or a refusal is valid
// (its text is the refusal, or empty); refused reports a refusal that is
// not empty.
func messageText(raw json.RawMessage) (text string, refused bool, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil // a delta without content (a role chunk, the last chunk)
	}
	m, err := parseMessage(raw)
	if err != nil {
		return "", false, err
	}
	return m.text()
}

// parseMessage reads a message or a delta once; its text and its tool calls
// are read from what it holds (each a pass over the answer otherwise).
func parseMessage(raw json.RawMessage) (*openAIMessageOut, error) {
	var m openAIMessageOut
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf(" is %s, want an object", jsonKind(raw))
	}
	return &m, nil
}

// text is the message's content, or its refusal when it has no content.
func (m *openAIMessageOut) text() (text string, refused bool, err error) {
	refused = m.Refusal != nil && *m.Refusal != ""
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || string(c) == "null" {
		if refused {
			return *m.Refusal, true, nil
		}
		return "", false, nil
	}
	text, err = contentText(c)
	return text, refused, err
}

// contentText is a message's content that is not null: a string, or a
// list of {"type":"text","text":…} parts.
func contentText(c json.RawMessage) (string, error) {
	switch c[0] {
	case '"':
		var s string
		if err := json.Unmarshal(c, &s); err != nil {
			return "", fmt.Errorf(".content: %v", err)
		}
		return s, nil
	case '[':
		var parts []struct {
			Type string          `json:"type"`
			Text json.RawMessage `json:"text"`
		}
		if err := json.Unmarshal(c, &parts); err != nil {
			return "", fmt.Errorf(".content is a list, but not of {type, text} parts")
		}
		var b strings.Builder
		for i, part := range parts {
			if len(part.Text) == 0 || string(part.Text) == "null" {
				continue // an image or audio part
			}
			var s string
			if json.Unmarshal(part.Text, &s) != nil {
				return "", fmt.Errorf(".content[%d].text is %s, want a string", i, jsonKind(part.Text))
			}
			b.WriteString(s)
		}
		return b.String(), nil
	}
	return "", fmt.Errorf(".content is %s, want a string or a list of parts", jsonKind(c))
}

// Preflight lists the models (GET /models) and looks for model there. An
// endpoint without a listing (404/405), or with an empty one, gets a
// one-token call instead.
func (p *openAI) Preflight(ctx context.Context, model string) error {
	return p.preflight(ctx, model, p.probe)
}

// PreflightEmbed is Preflight for an embedding model: where there is no
// listing it embeds one word, since a chat call to an embedding model is
// refused whatever the key.
func (p *openAI) PreflightEmbed(ctx context.Context, model string) error {
	return p.preflight(ctx, model, p.probeEmbed)
}

func (p *openAI) preflight(ctx context.Context, model string, probe func(context.Context, string) error) error {
	key, kerr := p.key(model)
	if kerr != nil {
		return kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	resp, rerr := p.send(ctx, http.MethodGet, p.endpoint("models", nil), nil, model, key, nil)
	if rerr != nil {
		if rerr.Status == http.StatusNotFound || rerr.Status == http.StatusMethodNotAllowed {
			return probe(ctx, model)
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
		return probe(ctx, model)
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

// probeEmbed embeds one word.
func (p *openAI) probeEmbed(ctx context.Context, model string) error {
	if model == "" {
		return nil
	}
	_, err := p.Embed(ctx, EmbedRequest{Model: model, Inputs: []string{"ping"}})
	return err
}

// EmbedPreflighter is a Provider whose preflight of an embedding model
// differs from that of a chat model.
type EmbedPreflighter interface {
	PreflightEmbed(ctx context.Context, model string) error
}

// PreflightModel is p's preflight of model, for an embed action when embed
// is set.
func PreflightModel(ctx context.Context, p Provider, model string, embed bool) error {
	if ep, ok := p.(EmbedPreflighter); ok && embed {
		return ep.PreflightEmbed(ctx, model)
	}
	return p.Preflight(ctx, model)
}

// sameModel matches a listed id against a requested model: Gemini's
// compatible endpoint lists "models/x", Ollama lists "x:latest".
func sameModel(listed, model string) bool {
	return listed == model || strings.TrimPrefix(listed, "models/") == model ||
		listed == model+":latest"
}
