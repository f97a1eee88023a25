package provider

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/jetpool/jetpool/retry"
)

// Defaults of the anthropic adapter.
const (
	AnthropicBaseURLDefault = "https://api.anthropic.com/v1"
	// AnthropicVersion is sent as anthropic-version (Config.Headers may override it).
	AnthropicVersion = "2023-06-01"
	// AnthropicMaxTokensDefault is max_tokens when the params set none: the
	// Messages API requires it.
	AnthropicMaxTokensDefault = 1024
)

// anthropicJSONInstruction is appended to the system prompt in JSON mode: the
// Messages API has no JSON switch, and assistant prefill ("{") is refused by
// some models.
const anthropicJSONInstruction = "Respond with a single JSON object and nothing else: no prose, no code fences."

// anthropic speaks the Messages API.
type anthropic struct{ *client }

func newAnthropic(cfg Config) (Provider, error) {
	c, err := newClient(cfg, AnthropicBaseURLDefault)
	if err != nil {
		return nil, err
	}
	c.auth = func(h http.Header, key string) { h.Set("X-Api-Key", key) }
	return &anthropic{c}, nil
}

func (p *anthropic) Kind() string { return KindAnthropic }

func (p *anthropic) headers() http.Header {
	return http.Header{"Anthropic-Version": {AnthropicVersion}}
}

func (p *anthropic) body(req Request) map[string]any {
	params := make(map[string]any, len(req.Params))
	for k, v := range req.Params {
		switch k {
		case "stop": // OpenAI's name
			if s, ok := v.(string); ok {
				v = []string{s}
			}
			k = "stop_sequences"
		case "max_completion_tokens", "max_output_tokens":
			k = "max_tokens"
		}
		params[k] = v
	}
	if _, ok := params["max_tokens"]; !ok {
		params["max_tokens"] = AnthropicMaxTokensDefault
	}
	own := map[string]any{"model": req.Model, "messages": req.Messages}
	system := req.System
	if req.JSON {
		system = strings.TrimSpace(system + "\n\n" + anthropicJSONInstruction)
		if req.Schema != nil {
			if b, err := json.Marshal(req.Schema); err == nil {
				system += "\nThe object must satisfy this JSON Schema: " + string(b)
			}
		}
	}
	if system != "" {
		own["system"] = system
	}
	if _, set := params["stream"]; set || req.Stream {
		own["stream"] = req.Stream // Request.Stream, not a param, decides
	}
	return mergeParams(params, own)
}

type anthropicUsage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// input counts cached prompt tokens too, as OpenAI's prompt_tokens does.
func (u anthropicUsage) input() int {
	return u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
}

// usage is the Usage of these counts.
func (u anthropicUsage) usage() Usage {
	return Usage{InputTokens: u.input(), OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CacheReadInputTokens, CacheWriteTokens: u.CacheCreationInputTokens}
}

type anthropicMessage struct {
	Type  string `json:"type"`
	Model string `json:"model"`
	// Content stays raw so that a missing list is told from an empty one.
	Content    json.RawMessage `json:"content"`
	StopReason string          `json:"stop_reason"`
	Usage      anthropicUsage  `json:"usage"`
}

// anthropicBlock is a content block; Text stays raw to name a wrong type.
type anthropicBlock struct {
	Type string          `json:"type"`
	Text json.RawMessage `json:"text"`
}

// text joins the message's text blocks; a missing content list, or a text
// block whose text is not a string, is an error naming what was found.
func (m *anthropicMessage) text() (string, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", fmt.Errorf("message has no content")
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return "", fmt.Errorf("content is %s, want a list of content blocks", jsonKind(m.Content))
	}
	var b strings.Builder
	for i, c := range blocks {
		if c.Type != "text" {
			continue // tool_use, thinking, …
		}
		var s string
		if err := json.Unmarshal(c.Text, &s); err != nil {
			return "", fmt.Errorf("content[%d].text is %s, want a string", i, jsonKind(c.Text))
		}
		b.WriteString(s)
	}
	return b.String(), nil
}

// anthropicFinish normalises stop_reason.
func anthropicFinish(r string) string {
	switch r {
	case "":
		return ""
	case "end_turn", "stop_sequence":
		return FinishStop
	case "max_tokens", "model_context_window_exceeded":
		return FinishLength
	case "refusal":
		return FinishContentFilter
	case "tool_use":
		return FinishToolCalls
	}
	return FinishOther // pause_turn, …
}

// Call implements Provider.
func (p *anthropic) Call(ctx context.Context, req Request) (Response, error) {
	return timed(func() (Response, error) { return p.call(ctx, req) })
}

func (p *anthropic) call(ctx context.Context, req Request) (Response, error) {
	key, kerr := p.key(req.Model)
	if kerr != nil {
		return Response{}, kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	hdr := p.headers()
	if req.Stream {
		hdr.Set("Accept", "text/event-stream")
	}
	resp, rerr := p.send(ctx, http.MethodPost, p.endpoint("messages", nil), p.body(req), req.Model, key, hdr)
	if rerr != nil {
		return Response{}, rerr
	}
	defer resp.Body.Close()
	return p.answer(ctx, resp, req, key, p.stream, p.decode)
}

// decode parses a Messages API response body: an error envelope after a
// 200 is normalised like an HTTP error, a message of the wrong shape is an
// InvalidResponseError.
func (p *anthropic) decode(b []byte, model, key string) (Response, *retry.Error) {
	var m anthropicMessage
	if rerr := p.decodeBody(b, &m, model, key); rerr != nil {
		return Response{}, rerr
	}
	if m.Type == "error" {
		return Response{}, p.inBandError(b, model, key)
	}
	text, err := m.text()
	if err != nil {
		return Response{}, p.invalidResponse(model, err.Error())
	}
	return Response{Text: text, FinishReason: anthropicFinish(m.StopReason), FinishReasonRaw: m.StopReason,
		Model: cmp.Or(m.Model, model), Usage: m.Usage.usage()}, nil
}

// stream reads message_start, content_block_delta…, message_delta and
// message_stop. An error event (overloaded_error after a 200, typically)
// is normalised like an HTTP error; an end before message_stop is a broken stream.
func (p *anthropic) stream(ctx context.Context, body io.Reader, req Request, key string) (Response, error) {
	sr := newSSEReader(body)
	var text strings.Builder
	out := Response{Model: req.Model}
	for {
		ev, err := sr.next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // no message_stop
			}
			return Response{}, p.streamBroken(ctx, err, req.Model, key)
		}
		var data struct {
			Type    string `json:"type"`
			Message struct {
				Model string         `json:"model"`
				Usage anthropicUsage `json:"usage"`
			} `json:"message"`
			Delta struct {
				Type       string          `json:"type"`
				Text       json.RawMessage `json:"text"`
				StopReason string          `json:"stop_reason"`
			} `json:"delta"`
			Usage *anthropicUsage `json:"usage"`
		}
		if err := json.Unmarshal(ev.data, &data); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// Whole JSON of the wrong shape: not a cut stream.
				return Response{}, p.invalidResponse(req.Model, "stream event: "+err.Error())
			}
			return Response{}, p.streamBroken(ctx, badEvent(ev.data, err), req.Model, key)
		}
		switch cmp.Or(ev.event, data.Type) {
		case "message_start":
			out.Model = cmp.Or(data.Message.Model, out.Model)
			out.Usage = data.Message.Usage.usage()
		case "content_block_delta":
			if data.Delta.Type != "text_delta" {
				continue
			}
			var d string
			if err := json.Unmarshal(data.Delta.Text, &d); err != nil {
				return Response{}, p.invalidResponse(req.Model, "stream event: delta.text is "+jsonKind(data.Delta.Text)+", want a string")
			}
			if d != "" {
				text.WriteString(d)
				if req.OnDelta != nil {
					req.OnDelta(d)
				}
			}
		case "message_delta":
			if data.Delta.StopReason != "" {
				out.FinishReasonRaw = data.Delta.StopReason
				out.FinishReason = anthropicFinish(data.Delta.StopReason)
			}
			if u := data.Usage; u != nil {
				// Cumulative counts; input appears here only on newer API versions.
				out.Usage.OutputTokens = u.OutputTokens
				if in := u.input(); in > 0 {
					out.Usage.InputTokens = in
					out.Usage.CachedInputTokens = u.CacheReadInputTokens
					out.Usage.CacheWriteTokens = u.CacheCreationInputTokens
				}
			}
		case "message_stop":
			out.Text = text.String()
			return out, nil
		case "error":
			return Response{}, p.inBandError(ev.data, req.Model, key)
		}
	}
}

// Preflight asks for the model (GET /models/{model}: aliases are accepted),
// or lists one model when none is given.
func (p *anthropic) Preflight(ctx context.Context, model string) error {
	key, kerr := p.key(model)
	if kerr != nil {
		return kerr
	}
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	target := p.endpoint("models", url.Values{"limit": {"1"}})
	if model != "" {
		target = p.endpoint("models/"+url.PathEscape(model), nil)
	}
	resp, rerr := p.send(ctx, http.MethodGet, target, nil, model, key, p.headers())
	if rerr != nil {
		return rerr
	}
	resp.Body.Close()
	return nil
}
