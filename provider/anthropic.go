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

// anthropicOutputTool is the tool whose input is the answer when the
// schema of structured output is sent as a tool (the Messages API's way to
// constrain an answer to a schema): a tool_use of it is the answer's text,
// not a tool call. workflow refuses tools named jetpool_….
const anthropicOutputTool = "jetpool_structured_output"

// ephemeral is the cache_control of a cacheable prefix's end.
var ephemeral = map[string]any{"type": "ephemeral"}

// anthropicTurn is a turn on the wire: Content is a string, or a list
// of blocks when the turn has parts or tool calls, or answers tool calls.
type anthropicTurn struct {
	Role    string `json:"role"`
	Content any    `json:"content"`
}

func (p *anthropic) messages(msgs []Message) []anthropicTurn {
	out := make([]anthropicTurn, 0, len(msgs))
	for i, m := range msgs {
		answers := answersTools(msgs, i)
		if len(m.Parts) == 0 && len(m.ToolCalls) == 0 && len(answers) == 0 {
			out = append(out, anthropicTurn{Role: m.Role, Content: m.Content})
			continue
		}
		var blocks []map[string]any
		for j, c := range answers { // tool results come first in a turn
			blocks = append(blocks, map[string]any{"type": "tool_result", "tool_use_id": callID(c.ID, j), "content": notRun, "is_error": true})
		}
		for _, pt := range m.Parts {
			blocks = append(blocks, anthropicPart(pt))
		}
		if m.Content != "" {
			blocks = append(blocks, map[string]any{"type": "text", "text": m.Content})
		}
		for j, c := range m.ToolCalls {
			args, _ := c.arguments()
			blocks = append(blocks, map[string]any{"type": "tool_use", "id": callID(c.ID, j), "name": c.Name, "input": args})
		}
		out = append(out, anthropicTurn{Role: m.Role, Content: blocks})
	}
	return out
}

// anthropicPart is an image or document block: from a URL or base64 data.
func anthropicPart(pt Part) map[string]any {
	src := map[string]any{"type": "url", "url": pt.URL}
	if pt.Data != "" {
		src = map[string]any{"type": "base64", "media_type": pt.mediaType(), "data": pt.Data}
	}
	b := map[string]any{"type": pt.Type, "source": src}
	if pt.Cache {
		b["cache_control"] = ephemeral
	}
	return b
}

// anthropicToolChoice is Request.ToolChoice on the wire (nil: not sent).
func anthropicToolChoice(choice string) any {
	switch choice {
	case "":
		return nil
	case ToolChoiceAuto, ToolChoiceNone:
		return map[string]any{"type": choice}
	case ToolChoiceRequired:
		return map[string]any{"type": "any"}
	}
	return map[string]any{"type": "tool", "name": choice}
}

// outputTool says whether req's schema goes as a forced tool: a JSON
// answer with an object schema, when the request has no tools of its own
// (the answer could not be forced to one tool while others are offered)
// and its params set no tools, tool_choice or thinking (which cannot be
// combined with a forced tool). Otherwise JSON mode is the instruction.
func outputTool(req Request, params map[string]any) bool {
	if !req.JSON || req.Schema == nil || req.Schema["type"] != "object" || len(req.Tools) > 0 {
		return false
	}
	for _, k := range []string{"tools", "tool_choice", "thinking"} {
		if _, set := params[k]; set {
			return false
		}
	}
	return true
}

func (p *anthropic) body(req Request) (map[string]any, *retry.Error) {
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
	own := map[string]any{"model": req.Model, "messages": p.messages(req.Messages)}
	system := req.System
	var tools []map[string]any
	for _, t := range req.Tools {
		tool := map[string]any{"name": t.Name, "input_schema": t.parameters()}
		if t.Description != "" {
			tool["description"] = t.Description
		}
		tools = append(tools, tool)
	}
	switch {
	case outputTool(req, params):
		tools = []map[string]any{{"name": anthropicOutputTool, "input_schema": req.Schema,
			"description": "Give your answer as this tool's input; it is the whole answer."}}
		own["tool_choice"] = map[string]any{"type": "tool", "name": anthropicOutputTool}
	case req.JSON:
		system = strings.TrimSpace(system + "\n\n" + anthropicJSONInstruction)
		if req.Schema != nil {
			if b, err := json.Marshal(req.Schema); err == nil {
				system += "\nThe object must satisfy this JSON Schema: " + string(b)
			}
		}
	}
	if len(tools) > 0 {
		if req.CacheTools {
			tools[len(tools)-1]["cache_control"] = ephemeral
		}
		own["tools"] = tools
	}
	if tc := anthropicToolChoice(req.ToolChoice); tc != nil && own["tool_choice"] == nil {
		own["tool_choice"] = tc
	}
	switch {
	case system != "" && req.CacheSystem:
		own["system"] = []map[string]any{{"type": "text", "text": system, "cache_control": ephemeral}}
	case system != "":
		own["system"] = system
	}
	if _, set := params["stream"]; set || req.Stream {
		own["stream"] = req.Stream // Request.Stream, not a param, decides
	}
	return mergeParams(params, own), nil
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
	Type  string          `json:"type"`
	Text  json.RawMessage `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// answer reads the message's content: its text blocks joined (or the input
// of the structured-output tool, which is the answer), and its tool calls.
// A missing content list, or a text block whose text is not a string, is an
// error naming what was found.
func (m *anthropicMessage) answer() (text string, calls []ToolCall, structured bool, err error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil, false, fmt.Errorf("message has no content")
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return "", nil, false, fmt.Errorf("content is %s, want a list of content blocks", jsonKind(m.Content))
	}
	var b strings.Builder
	for i, c := range blocks {
		switch c.Type {
		case "text":
			var s string
			if err := json.Unmarshal(c.Text, &s); err != nil {
				return "", nil, false, fmt.Errorf("content[%d].text is %s, want a string", i, jsonKind(c.Text))
			}
			b.WriteString(s)
		case "tool_use":
			if c.Name == anthropicOutputTool {
				structured = true
				b.Write(rawArgs(string(c.Input)))
				continue
			}
			if c.Name == "" {
				return "", nil, false, fmt.Errorf("content[%d] is a tool_use without a name", i)
			}
			calls = append(calls, ToolCall{ID: callID(c.ID, len(calls)), Name: c.Name, Arguments: rawArgs(string(c.Input))})
		}
		// thinking, redacted_thinking, server tools' blocks: not the answer
	}
	return b.String(), calls, structured, nil
}

// structuredEnd finishes an answer given as the structured-output tool's
// input as the plain answer it is: stop (the raw word stays tool_use), and
// the tool_use a conversation must answer is not kept as a call.
func structuredEnd(out *Response, structured bool) {
	if structured && out.FinishReason == FinishToolCalls && len(out.ToolCalls) == 0 {
		out.FinishReason = FinishStop
	}
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
	ctx, cancel := p.callContext(ctx, req.Stream) // idle.go
	defer cancel()
	hdr := p.headers()
	if req.Stream {
		hdr.Set("Accept", "text/event-stream")
	}
	body, rerr := p.body(req)
	if rerr != nil {
		return Response{}, rerr
	}
	resp, rerr := p.send(ctx, http.MethodPost, p.endpoint("messages", nil), body, req.Model, key, hdr)
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
	text, calls, structured, err := m.answer()
	if err != nil {
		return Response{}, p.invalidResponse(model, err.Error())
	}
	out := Response{Text: text, ToolCalls: calls, FinishReason: anthropicFinish(m.StopReason), FinishReasonRaw: m.StopReason,
		Model: cmp.Or(m.Model, model), Usage: m.Usage.usage()}
	structuredEnd(&out, structured)
	return out, nil
}

// anthropicStreamEvent is the data of any event of a Messages stream.
type anthropicStreamEvent struct {
	Type    string `json:"type"`
	Message struct {
		Model string         `json:"model"`
		Usage anthropicUsage `json:"usage"`
	} `json:"message"`
	Index        int `json:"index"`
	ContentBlock struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	Delta struct {
		Type        string          `json:"type"`
		Text        json.RawMessage `json:"text"`
		PartialJSON string          `json:"partial_json"`
		StopReason  string          `json:"stop_reason"`
		Thinking    string          `json:"thinking"`
		Signature   string          `json:"signature"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
}

// messageDelta takes a message_delta's stop reason and usage into out.
func (e *anthropicStreamEvent) messageDelta(out *Response) {
	if e.Delta.StopReason != "" {
		out.FinishReasonRaw = e.Delta.StopReason
		out.FinishReason = anthropicFinish(e.Delta.StopReason)
	}
	if u := e.Usage; u != nil {
		// Cumulative counts; input appears here only on newer API versions.
		out.Usage.OutputTokens = u.OutputTokens
		if in := u.input(); in > 0 {
			out.Usage.InputTokens = in
			out.Usage.CachedInputTokens = u.CacheReadInputTokens
			out.Usage.CacheWriteTokens = u.CacheCreationInputTokens
		}
	}
}

// stream reads message_start, content_block_delta…, message_delta and
// message_stop. An error event (overloaded_error after a 200, typically)
// is normalised like an HTTP error; an end before message_stop is a broken stream.
func (p *anthropic) stream(ctx context.Context, body io.Reader, req Request, key string) (Response, error) {
	w := p.watchIdle(ctx) // idle.go
	defer w.end()
	sr := newSSEReader(body)
	sr.idle = w
	var text strings.Builder
	var calls toolAcc
	structured := map[int]bool{} // content blocks of the structured-output tool
	out := Response{Model: req.Model}
	emit := func(d string) {
		if d != "" {
			text.WriteString(d)
			if req.OnDelta != nil {
				req.OnDelta(d)
			}
		}
	}
	for {
		ev, err := sr.next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // no message_stop
			}
			return Response{}, p.streamBroken(ctx, err, req.Model, key)
		}
		var data anthropicStreamEvent
		if err := json.Unmarshal(ev.data, &data); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				// Whole JSON of the wrong shape: not a cut stream.
				return Response{}, p.invalidResponse(req.Model, "stream event: "+err.Error())
			}
			return Response{}, p.streamBroken(ctx, badEvent(ev.data, err), req.Model, key)
		}
		kind := cmp.Or(ev.event, data.Type)
		if anthropicMoves(kind, data.Delta.Text, data.Delta.PartialJSON, data.Delta.Thinking, data.Delta.Signature) { // idle.go
			w.progress()
		} else {
			w.keepalive() // ping, message_start, a block's start or stop, an empty delta
		}
		switch kind {
		case "message_start":
			out.Model = cmp.Or(data.Message.Model, out.Model)
			out.Usage = data.Message.Usage.usage()
		case "content_block_start":
			if cb := data.ContentBlock; cb.Type == "tool_use" {
				if cb.Name == anthropicOutputTool {
					structured[data.Index] = true
					continue
				}
				c := calls.at(data.Index)
				c.id, c.name = cb.ID, cb.Name
			}
		case "content_block_delta":
			switch data.Delta.Type {
			case "input_json_delta":
				if structured[data.Index] {
					emit(data.Delta.PartialJSON) // the answer itself, as it arrives
				} else {
					calls.at(data.Index).args.WriteString(data.Delta.PartialJSON)
				}
				continue
			case "text_delta":
			default:
				continue
			}
			var d string
			if err := json.Unmarshal(data.Delta.Text, &d); err != nil {
				return Response{}, p.invalidResponse(req.Model, "stream event: delta.text is "+jsonKind(data.Delta.Text)+", want a string")
			}
			emit(d)
		case "message_delta":
			data.messageDelta(&out)
		case "message_stop":
			out.Text = text.String()
			out.ToolCalls = calls.done()
			structuredEnd(&out, len(structured) > 0)
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
