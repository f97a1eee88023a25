package provider

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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

type anthropicMessage struct {
	Model   string `json:"model"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StopReason string         `json:"stop_reason"`
	Usage      anthropicUsage `json:"usage"`
}

// anthropicFinish normalises stop_reason.
func anthropicFinish(r string) string {
	switch r {
	case "end_turn", "stop_sequence":
		return "stop"
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "refusal":
		return "content_filter"
	}
	return r
}

// Call implements Provider.
func (p *anthropic) Call(ctx context.Context, req Request) (res Response, err error) {
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
	defer p.noteRateLimit(resp.Header, &res, &err) // http.go
	if req.Stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return p.stream(ctx, resp.Body, req, key)
	}
	b, rerr := p.readBody(ctx, resp, req.Model, key)
	if rerr != nil {
		return Response{}, rerr
	}
	var m anthropicMessage
	if rerr := p.decodeBody(b, &m, req.Model, key); rerr != nil {
		return Response{}, rerr
	}
	var text strings.Builder
	for _, c := range m.Content {
		if c.Type == "text" {
			text.WriteString(c.Text)
		}
	}
	if req.Stream && req.OnDelta != nil && text.Len() > 0 {
		req.OnDelta(text.String())
	}
	return Response{Text: text.String(), FinishReason: anthropicFinish(m.StopReason), Model: cmp.Or(m.Model, req.Model),
		Usage: Usage{InputTokens: m.Usage.input(), OutputTokens: m.Usage.OutputTokens}}, nil
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
			Type    string           `json:"type"`
			Message anthropicMessage `json:"message"`
			Delta   struct {
				Type       string `json:"type"`
				Text       string `json:"text"`
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
			Usage *anthropicUsage `json:"usage"`
		}
		if err := json.Unmarshal(ev.data, &data); err != nil {
			return Response{}, p.streamBroken(ctx, fmt.Errorf("bad stream event: %w", err), req.Model, key)
		}
		switch cmp.Or(ev.event, data.Type) {
		case "message_start":
			out.Model = cmp.Or(data.Message.Model, out.Model)
			out.Usage = Usage{InputTokens: data.Message.Usage.input(), OutputTokens: data.Message.Usage.OutputTokens}
		case "content_block_delta":
			if data.Delta.Type == "text_delta" && data.Delta.Text != "" {
				text.WriteString(data.Delta.Text)
				if req.OnDelta != nil {
					req.OnDelta(data.Delta.Text)
				}
			}
		case "message_delta":
			if data.Delta.StopReason != "" {
				out.FinishReason = anthropicFinish(data.Delta.StopReason)
			}
			if u := data.Usage; u != nil {
				// Cumulative counts; input appears here only on newer API versions.
				out.Usage.OutputTokens = u.OutputTokens
				if in := u.input(); in > 0 {
					out.Usage.InputTokens = in
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
