package provider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// weather is the tool of the suite's tool cases.
var weather = provider.Tool{Name: "get_weather", Description: "The weather in a city.",
	Parameters: map[string]any{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}},
		"required": []any{"city"}}}

var paris = []providertest.ToolCall{{ID: "call_abc", Name: "get_weather", Args: `{"city":"Paris"}`}}

func withTools(r *provider.Request) {
	r.Tools, r.ToolChoice = []provider.Tool{weather}, provider.ToolChoiceAuto
}

// toolCases are the suite's cases of answers that call tools,
// streamed or not, with cached input tokens in the streamed usage.
func toolCases() []suiteCase {
	call := func(id, sig string) []provider.ToolCall {
		return []provider.ToolCall{{ID: id, Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`), Signature: sig}}
	}
	const sig = "CiQB0e2Kb3dRh+BYdbZvmulSN2Pwwc75DfQOwUAd"
	simCall := []provider.ToolCall{{ID: "call_sim_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Say hello."}`)}}
	return []suiteCase{{
		name: "tool calls",
		edit: withTools,
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIToolCalls("gpt-4o-mini", paris, 12, 5)},
				want: want{noText: true, finish: "tool_calls", finishRaw: "tool_calls", toolCalls: call("call_abc", "")}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: providertest.AnthropicToolUse("claude-sonnet-4-5", "", paris, 12, 5)},
				want: want{noText: true, finish: "tool_calls", finishRaw: "tool_use", toolCalls: call("call_abc", "")}},
			// Gemini says STOP when the model calls a tool, gives no id, and
			// signs the first call of a thinking model.
			"gemini": {serve: providertest.Reply{Status: 200, Body: providertest.GeminiFunctionCalls("gemini-2.5-flash", paris, 12, 5)},
				want: want{noText: true, finish: "tool_calls", finishRaw: "STOP", toolCalls: call("call_0", sig)}},
			// The sim calls the tool with arguments that fit its schema.
			"sim": {want: want{noText: true, finish: "tool_calls", finishRaw: "tool_calls", toolCalls: simCall,
				usage: provider.Usage{InputTokens: 5, OutputTokens: 6}}},
		},
	}, {
		name:   "tool calls, streaming, with cached tokens",
		stream: true,
		edit:   withTools,
		cells: map[string]cell{
			"openai": {serve: providertest.SSE{Events: providertest.OpenAIToolCallStream("gpt-4o-mini", paris, 12, 8, 5)},
				want: want{noText: true, finish: "tool_calls", finishRaw: "tool_calls", toolCalls: call("call_abc", ""),
					usage: provider.Usage{InputTokens: 12, OutputTokens: 5, CachedInputTokens: 8}}},
			"anthropic": {serve: providertest.SSE{Events: providertest.AnthropicToolUseStream("claude-sonnet-4-5", paris, 2, 6, 4, 5)},
				want: want{noText: true, finish: "tool_calls", finishRaw: "tool_use", toolCalls: call("call_abc", ""),
					usage: provider.Usage{InputTokens: 12, OutputTokens: 5, CachedInputTokens: 6, CacheWriteTokens: 4}}},
			"gemini": {serve: providertest.SSE{Events: providertest.GeminiFunctionCallStream("gemini-2.5-flash", paris, 12, 8, 5)},
				want: want{noText: true, finish: "tool_calls", finishRaw: "STOP", toolCalls: call("call_0", ""),
					usage: provider.Usage{InputTokens: 12, OutputTokens: 5, CachedInputTokens: 8}}},
			"sim": {want: want{noText: true, finish: "tool_calls", finishRaw: "tool_calls", toolCalls: simCall,
				usage: provider.Usage{InputTokens: 5, OutputTokens: 6}}},
		},
	}, {
		name: "tool_choice none",
		edit: func(r *provider.Request) { r.Tools, r.ToolChoice = []provider.Tool{weather}, provider.ToolChoiceNone },
		cells: map[string]cell{
			"openai":    {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", answer, 12, 5)}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("claude-sonnet-4-5", answer, 12, 5)}},
			"gemini":    {serve: providertest.Reply{Status: 200, Body: providertest.GeminiResponse("gemini-2.5-flash", answer, 12, 5)}},
			"sim":       {sim: &provider.SimConfig{Reply: answer}, want: want{usage: provider.Usage{InputTokens: 5, OutputTokens: 5}}},
		},
	}, {
		name: "a broken tool call",
		edit: withTools,
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 200, Body: `{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":{"id":"x"}},"finish_reason":"tool_calls"}]}`},
				want: want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "choices[0].message.tool_calls is an object, want a list"}}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: `{"type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"tool_use","id":"toolu_1","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":12,"output_tokens":5}}`},
				want: want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "content[0] is a tool_use without a name"}}},
			"gemini": {serve: providertest.Reply{Status: 200, Body: `{"candidates":[{"content":{"parts":[{"functionCall":{"args":{}}}],"role":"model"},"finishReason":"STOP"}],"modelVersion":"gemini-2.5-flash"}`},
				want: want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "parts[0].functionCall has no name"}}},
			"sim": wireOnlyCell,
		},
	}}
}

// sentBody calls kind's fake with req (answering reply) and returns the
// body the adapter sent.
func sentBody(t *testing.T, kind string, reply http.Handler, req provider.Request) (map[string]any, provider.Response) {
	t.Helper()
	srv := providertest.NewServer(t, reply)
	cfg := providertest.Config(kind, srv)
	cfg.APIKeyEnv = keyEnv
	p := providertest.New(t, cfg)
	req.Model = "m"
	resp, err := p.Call(context.Background(), req)
	require.NoError(t, err)
	var body map[string]any
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	return body, resp
}

// decodeJSON parses a JSON literal of a test's expectation.
func decodeJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v), s)
	return v
}

const (
	pngData = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
	pdfData = "JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK"
)

// partsTurn is a user turn with an image at a URL, an image and a PDF as data.
var partsTurn = provider.Message{Role: "user", Content: "Describe them.", Parts: []provider.Part{
	{Type: provider.PartImage, URL: "https://example.com/cat.png"},
	{Type: provider.PartImage, MediaType: "image/png", Data: pngData},
	{Type: provider.PartDocument, MediaType: "application/pdf", Data: pdfData, Name: "report.pdf", Cache: true},
}}

// TestRequestParts: images and documents, as each wire format carries them.
func TestRequestParts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind  string
		reply http.Handler
		want  string // the user turn as sent
	}{{
		kind:  provider.KindOpenAI,
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "ok", 1, 1)},
		want: `{"role":"user","content":[` +
			`{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}},` +
			`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + pngData + `"}},` +
			`{"type":"file","file":{"filename":"report.pdf","file_data":"data:application/pdf;base64,` + pdfData + `"}},` +
			`{"type":"text","text":"Describe them."}]}`,
	}, {
		kind:  provider.KindAnthropic,
		reply: providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("m", "ok", 1, 1)},
		want: `{"role":"user","content":[` +
			`{"type":"image","source":{"type":"url","url":"https://example.com/cat.png"}},` +
			`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"` + pngData + `"}},` +
			`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"` + pdfData + `"},"cache_control":{"type":"ephemeral"}},` +
			`{"type":"text","text":"Describe them."}]}`,
	}, {
		kind:  provider.KindGemini,
		reply: providertest.Reply{Status: 200, Body: providertest.GeminiResponse("m", "ok", 1, 1)},
		want: `{"role":"user","parts":[` +
			`{"fileData":{"mimeType":"image/png","fileUri":"https://example.com/cat.png"}},` +
			`{"inlineData":{"mimeType":"image/png","data":"` + pngData + `"}},` +
			`{"inlineData":{"mimeType":"application/pdf","data":"` + pdfData + `"}},` +
			`{"text":"Describe them."}]}`,
	}}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			body, resp := sentBody(t, tc.kind, tc.reply, provider.Request{Messages: []provider.Message{partsTurn}})
			require.Equal(t, "ok", resp.Text)
			turns := body["messages"]
			if tc.kind == provider.KindGemini {
				turns = body["contents"]
			}
			require.Equal(t, decodeJSON(t, tc.want), turns.([]any)[0])
		})
	}
}

// A document at a URL cannot go to Chat Completions: a permanent error,
// and nothing is sent (a call would only be refused).
func TestOpenAIDocumentURL(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "ok", 1, 1)})
	cfg := providertest.Config(provider.KindOpenAI, srv)
	p := providertest.New(t, cfg)
	_, err := p.Call(context.Background(), provider.Request{Model: "m", Messages: []provider.Message{{Role: "user", Content: "q",
		Parts: []provider.Part{{Type: provider.PartDocument, URL: "https://example.com/a.pdf?sig=secret"}}}}})
	e := retry.AsError(err)
	require.Equal(t, retry.ClassInvalidRequest, e.Class)
	require.Contains(t, e.Message, "takes a document as data, not a URL (https://example.com/a.pdf?sig=REDACTED)")
	require.Empty(t, srv.Requests())
}

// TestRequestTools: tool definitions, tool_choice and a conversation that
// answers a turn's tool calls (a repair after a call), in each wire format.
func TestRequestTools(t *testing.T) {
	t.Parallel()
	history := []provider.Message{
		{Role: "user", Content: "Weather in Paris?"},
		{Role: "assistant", ToolCalls: []provider.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: json.RawMessage(`{"city":"Paris"}`), Signature: "sig1"}}},
		{Role: "user", Content: "The output does not match: fix it."},
	}
	params := `{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`
	tests := []struct {
		kind   string
		choice string
		reply  http.Handler
		want   map[string]string // top-level fields of the body, as JSON
	}{{
		kind: provider.KindOpenAI, choice: "get_weather",
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIToolCalls("m", paris, 1, 1)},
		want: map[string]string{
			"tools":       `[{"type":"function","function":{"name":"get_weather","description":"The weather in a city.","parameters":` + params + `}}]`,
			"tool_choice": `{"type":"function","function":{"name":"get_weather"}}`,
			"messages": `[{"role":"user","content":"Weather in Paris?"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},` +
				`{"role":"tool","tool_call_id":"call_1","content":"not run: jetpool does not run tools; see the next message"},` +
				`{"role":"user","content":"The output does not match: fix it."}]`,
		},
	}, {
		kind: provider.KindOpenAI, choice: provider.ToolChoiceRequired,
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIToolCalls("m", paris, 1, 1)},
		want:  map[string]string{"tool_choice": `"required"`},
	}, {
		kind: provider.KindAnthropic, choice: provider.ToolChoiceRequired,
		reply: providertest.Reply{Status: 200, Body: providertest.AnthropicToolUse("m", "", paris, 1, 1)},
		want: map[string]string{
			"tools":       `[{"name":"get_weather","description":"The weather in a city.","input_schema":` + params + `}]`,
			"tool_choice": `{"type":"any"}`,
			"messages": `[{"role":"user","content":"Weather in Paris?"},` +
				`{"role":"assistant","content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}}]},` +
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","content":"not run: jetpool does not run tools; see the next message","is_error":true},` +
				`{"type":"text","text":"The output does not match: fix it."}]}]`,
		},
	}, {
		kind: provider.KindAnthropic, choice: "get_weather",
		reply: providertest.Reply{Status: 200, Body: providertest.AnthropicToolUse("m", "", paris, 1, 1)},
		want:  map[string]string{"tool_choice": `{"type":"tool","name":"get_weather"}`},
	}, {
		kind: provider.KindGemini, choice: "get_weather",
		reply: providertest.Reply{Status: 200, Body: providertest.GeminiFunctionCalls("m", paris, 1, 1)},
		want: map[string]string{
			"tools":      `[{"functionDeclarations":[{"name":"get_weather","description":"The weather in a city.","parametersJsonSchema":` + params + `}]}]`,
			"toolConfig": `{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}}`,
			"contents": `[{"role":"user","parts":[{"text":"Weather in Paris?"}]},` +
				`{"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}},"thoughtSignature":"sig1"}]},` +
				`{"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"error":"not run: jetpool does not run tools; see the next message"}}},` +
				`{"text":"The output does not match: fix it."}]}]`,
		},
	}, {
		kind: provider.KindGemini, choice: provider.ToolChoiceAuto,
		reply: providertest.Reply{Status: 200, Body: providertest.GeminiFunctionCalls("m", paris, 1, 1)},
		want:  map[string]string{"toolConfig": `{"functionCallingConfig":{"mode":"AUTO"}}`},
	}}
	for _, tc := range tests {
		t.Run(tc.kind+"/"+tc.choice, func(t *testing.T) {
			t.Parallel()
			body, resp := sentBody(t, tc.kind, tc.reply, provider.Request{Messages: history,
				Tools: []provider.Tool{weather}, ToolChoice: tc.choice})
			for k, v := range tc.want {
				require.Equal(t, decodeJSON(t, v), body[k], k)
			}
			require.Len(t, resp.ToolCalls, 1)
			require.JSONEq(t, `{"city":"Paris"}`, string(resp.ToolCalls[0].Arguments))
			require.Equal(t, provider.FinishToolCalls, resp.FinishReason)
		})
	}
}

// TestStructuredOutput: expect.schema as each provider's structured
// output — OpenAI json_schema (strict only inside its strict subset),
// Gemini responseJsonSchema, Anthropic a forced tool whose input is the
// answer — and the instruction where a wire format has no such mode; what
// the params set wins.
func TestStructuredOutput(t *testing.T) {
	t.Parallel()
	strict := map[string]any{"type": "object", "additionalProperties": false, "required": []any{"title"},
		"properties": map[string]any{"title": map[string]any{"type": "string"}}}
	loose := map[string]any{"type": "object", "required": []any{"title"}}
	list := map[string]any{"type": "array", "items": map[string]any{"type": "string"}}
	strictJSON, _ := json.Marshal(strict)
	tests := []struct {
		name   string
		kind   string
		schema map[string]any
		params map[string]any
		reply  http.Handler
		want   map[string]string // top-level fields of the body, as JSON ("": absent)
		text   string            // the answer's text
	}{{
		name: "openai strict", kind: provider.KindOpenAI, schema: strict,
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", `{"title":"T"}`, 1, 1)},
		want:  map[string]string{"response_format": `{"type":"json_schema","json_schema":{"name":"response","strict":true,"schema":` + string(strictJSON) + `}}`},
		text:  `{"title":"T"}`,
	}, {
		name: "openai outside the strict subset", kind: provider.KindOpenAI, schema: loose,
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", `{"title":"T"}`, 1, 1)},
		want:  map[string]string{"response_format": `{"type":"json_schema","json_schema":{"name":"response","schema":{"type":"object","required":["title"]}}}`},
		text:  `{"title":"T"}`,
	}, {
		name: "openai params win", kind: provider.KindOpenAI, schema: strict, params: map[string]any{"response_format": map[string]any{"type": "json_object"}},
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", `{"title":"T"}`, 1, 1)},
		want:  map[string]string{"response_format": `{"type":"json_object"}`},
		text:  `{"title":"T"}`,
	}, {
		name: "anthropic forced tool", kind: provider.KindAnthropic, schema: strict,
		reply: providertest.Reply{Status: 200, Body: providertest.AnthropicToolUse("m", "", []providertest.ToolCall{{ID: "toolu_1", Name: "jetpool_structured_output", Args: `{"title":"T"}`}}, 1, 1)},
		want: map[string]string{
			"tools":       `[{"name":"jetpool_structured_output","description":"Give your answer as this tool's input; it is the whole answer.","input_schema":` + string(strictJSON) + `}]`,
			"tool_choice": `{"type":"tool","name":"jetpool_structured_output"}`,
			"system":      `"Be brief."`,
		},
		text: `{"title":"T"}`,
	}, {
		name: "anthropic non-object schema: the instruction", kind: provider.KindAnthropic, schema: list,
		reply: providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("m", `["a"]`, 1, 1)},
		want: map[string]string{"tools": "", "tool_choice": "",
			"system": `"Be brief.\n\nRespond with a single JSON object and nothing else: no prose, no code fences.\nThe object must satisfy this JSON Schema: {\"items\":{\"type\":\"string\"},\"type\":\"array\"}"`},
		text: `["a"]`,
	}, {
		name: "anthropic with thinking: the instruction", kind: provider.KindAnthropic, schema: strict,
		params: map[string]any{"thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}},
		reply:  providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("m", `{"title":"T"}`, 1, 1)},
		want:   map[string]string{"tools": ""},
		text:   `{"title":"T"}`,
	}, {
		name: "gemini", kind: provider.KindGemini, schema: strict,
		reply: providertest.Reply{Status: 200, Body: providertest.GeminiResponse("m", `{"title":"T"}`, 1, 1)},
		want:  map[string]string{"generationConfig": `{"responseMimeType":"application/json","responseJsonSchema":` + string(strictJSON) + `}`},
		text:  `{"title":"T"}`,
	}, {
		name: "gemini params win", kind: provider.KindGemini, schema: strict,
		params: map[string]any{"response_mime_type": "text/x.enum", "response_schema": map[string]any{"type": "STRING", "enum": []any{"a", "b"}}},
		reply:  providertest.Reply{Status: 200, Body: providertest.GeminiResponse("m", `a`, 1, 1)},
		want:   map[string]string{"generationConfig": `{"responseMimeType":"text/x.enum","responseSchema":{"type":"STRING","enum":["a","b"]}}`},
		text:   `a`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body, resp := sentBody(t, tc.kind, tc.reply, provider.Request{System: "Be brief.", JSON: true, Schema: tc.schema, Params: tc.params,
				Messages: []provider.Message{{Role: "user", Content: "q"}}})
			for k, v := range tc.want {
				if v == "" {
					require.NotContains(t, body, k)
					continue
				}
				require.Equal(t, decodeJSON(t, v), body[k], k)
			}
			require.Equal(t, tc.text, resp.Text)
			require.Equal(t, provider.FinishStop, resp.FinishReason, "an answer, not a tool call")
			require.Empty(t, resp.ToolCalls)
		})
	}
}

// The Anthropic answer given as the forced tool's input, streamed: its JSON
// arrives as the answer's text.
func TestAnthropicStructuredStream(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.SSE{Events: providertest.AnthropicToolUseStream("m",
		[]providertest.ToolCall{{ID: "toolu_1", Name: "jetpool_structured_output", Args: `{"title":"T"}`}}, 12, 0, 0, 5)})
	cfg := providertest.Config(provider.KindAnthropic, srv)
	p := providertest.New(t, cfg)
	var deltas string
	resp, err := p.Call(context.Background(), provider.Request{Model: "m", Stream: true, JSON: true,
		Schema:   map[string]any{"type": "object"},
		Messages: []provider.Message{{Role: "user", Content: "q"}}, OnDelta: func(s string) { deltas += s }})
	require.NoError(t, err)
	require.Equal(t, `{"title":"T"}`, resp.Text)
	require.Equal(t, resp.Text, deltas)
	require.Equal(t, provider.FinishStop, resp.FinishReason)
	require.Equal(t, "tool_use", resp.FinishReasonRaw)
}

// TestRequestCache: cache_control on Anthropic's system prompt, last tool
// and a marked part; the other wire formats cache by themselves and send
// nothing for it.
func TestRequestCache(t *testing.T) {
	t.Parallel()
	req := provider.Request{System: "You are a careful reader.", CacheSystem: true, CacheTools: true,
		Tools: []provider.Tool{weather}, Messages: []provider.Message{partsTurn}}
	body, _ := sentBody(t, provider.KindAnthropic, providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("m", "ok", 1, 1)}, req)
	require.Equal(t, decodeJSON(t, `[{"type":"text","text":"You are a careful reader.","cache_control":{"type":"ephemeral"}}]`), body["system"])
	require.Equal(t, map[string]any{"type": "ephemeral"}, body["tools"].([]any)[0].(map[string]any)["cache_control"])
	parts := body["messages"].([]any)[0].(map[string]any)["content"].([]any)
	require.Equal(t, map[string]any{"type": "ephemeral"}, parts[2].(map[string]any)["cache_control"], "the marked document")
	require.NotContains(t, parts[1], "cache_control")

	for _, kind := range []string{provider.KindOpenAI, provider.KindGemini} {
		reply := providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "ok", 1, 1)}
		if kind == provider.KindGemini {
			reply.Body = providertest.GeminiResponse("m", "ok", 1, 1)
		}
		srv := providertest.NewServer(t, reply)
		p := providertest.New(t, providertest.Config(kind, srv))
		r := req
		r.Model = "m"
		_, err := p.Call(context.Background(), r)
		require.NoError(t, err)
		require.NotContains(t, string(srv.Requests()[0].Body), "cache_control", kind)
	}
}

// The sim as a provider of everything above: it takes images (and refuses
// data that is no image, as a provider does), reports cache writes then
// reads, and answers a schema with JSON that satisfies it.
func TestSimMultimodal(t *testing.T) {
	t.Parallel()
	p := providertest.New(t, provider.Config{Name: "sim", Kind: provider.KindSim, Sim: &provider.SimConfig{Reply: "{{.Images}} images, {{.Documents}} documents"}})
	req := provider.Request{System: "A system prompt long enough to be cached.", CacheSystem: true, RecordID: "r1",
		Messages: []provider.Message{partsTurn}}
	resp, err := p.Call(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "2 images, 1 documents", resp.Text)
	require.Equal(t, 10, resp.Usage.CacheWriteTokens)
	require.Zero(t, resp.Usage.CachedInputTokens)
	resp, err = p.Call(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, 10, resp.Usage.CachedInputTokens, "the second call reads the cache")

	bad := partsTurn
	bad.Parts = []provider.Part{{Type: provider.PartImage, MediaType: "image/png", Data: "not base64!"}}
	_, err = p.Call(context.Background(), provider.Request{RecordID: "r2", Messages: []provider.Message{bad}})
	e := retry.AsError(err)
	require.Equal(t, retry.ClassInvalidRequest, e.Class)
	require.Contains(t, e.Message, "invalid image")

	plain := providertest.New(t, provider.Config{Name: "sim2", Kind: provider.KindSim})
	resp, err = plain.Call(context.Background(), provider.Request{JSON: true, Schema: map[string]any{"type": "object",
		"required": []any{"title", "year"}, "properties": map[string]any{"title": map[string]any{"type": "string"},
			"year": map[string]any{"type": "integer", "minimum": 1900.0}, "tags": map[string]any{"type": "array", "items": map[string]any{"enum": []any{"x"}}}}},
		Messages: []provider.Message{{Role: "user", Content: "The Go Programming Language, 2015"}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"title":"The Go Programming Language, 2015","year":1900,"tags":["x"]}`, resp.Text)
}
