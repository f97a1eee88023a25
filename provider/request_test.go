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

// TestRequestBody: params, JSON mode and system prompts reach each wire format.
func TestRequestBody(t *testing.T) {
	t.Parallel()
	schema := map[string]any{"type": "object", "required": []any{"title"}}
	tests := []struct {
		name  string
		kind  string
		model string // "m" when empty
		reply http.Handler
		req   provider.Request
		want  map[string]any // top-level fields of the sent body
	}{{
		name:  "openai params and json_object",
		kind:  provider.KindOpenAI,
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "{}", 1, 1)},
		req: provider.Request{JSON: true, Params: map[string]any{"temperature": 0.2, "max_tokens": 50, "seed": 7, "stop": []any{"END"},
			"model": "params-cannot-override-this"}},
		want: map[string]any{"temperature": 0.2, "max_tokens": 50.0, "seed": 7.0, "stop": []any{"END"}, "model": "m",
			"response_format": map[string]any{"type": "json_object"}},
	}, {
		// As the official SDKs send a reasoning model's call: the token
		// cap as max_completion_tokens, no sampling but the defaults.
		name:  "openai reasoning model: max_completion_tokens, temperature dropped",
		kind:  provider.KindOpenAI,
		model: "gpt-5-mini",
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-5-mini", "{}", 1, 1)},
		req:   provider.Request{Params: map[string]any{"temperature": 0.2, "top_p": 1.0, "max_tokens": 50, "seed": 7}},
		want:  map[string]any{"max_completion_tokens": 50.0, "max_tokens": nil, "temperature": nil, "top_p": 1.0, "seed": 7.0},
	}, {
		name:  "openai o-series: max_completion_tokens as set, max_tokens dropped",
		kind:  provider.KindOpenAI,
		model: "o4-mini",
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("o4-mini", "{}", 1, 1)},
		req:   provider.Request{Params: map[string]any{"max_tokens": 50, "max_completion_tokens": 80, "temperature": 1.0}},
		want:  map[string]any{"max_completion_tokens": 80.0, "max_tokens": nil, "temperature": 1.0},
	}, {
		name:  "openai gpt-5 chat model keeps its params",
		kind:  provider.KindOpenAI,
		model: "gpt-5-chat-latest",
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-5-chat-latest", "{}", 1, 1)},
		req:   provider.Request{Params: map[string]any{"temperature": 0.2, "max_tokens": 50}},
		want:  map[string]any{"max_tokens": 50.0, "temperature": 0.2, "max_completion_tokens": nil},
	}, {
		name:  "openai json_schema",
		kind:  provider.KindOpenAI,
		reply: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "{}", 1, 1)},
		req:   provider.Request{JSON: true, Schema: schema},
		want: map[string]any{"response_format": map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "response", "schema": schema}}},
	}, {
		name:  "anthropic max_tokens from params, stop mapped",
		kind:  provider.KindAnthropic,
		reply: providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("m", "{}", 1, 1)},
		req:   provider.Request{System: "sys", Params: map[string]any{"max_tokens": 10, "temperature": 0.5, "stop": "END"}},
		want:  map[string]any{"max_tokens": 10.0, "temperature": 0.5, "stop_sequences": []any{"END"}, "system": "sys"},
	}, {
		name:  "gemini generationConfig and JSON mode",
		kind:  provider.KindGemini,
		reply: providertest.Reply{Status: 200, Body: providertest.GeminiResponse("m", "{}", 1, 1)},
		req:   provider.Request{JSON: true, Schema: schema, Params: map[string]any{"max_tokens": 64, "temperature": 0.1, "top_p": 0.9}},
		want: map[string]any{"generationConfig": map[string]any{"maxOutputTokens": 64.0, "temperature": 0.1, "topP": 0.9,
			"responseMimeType": "application/json", "responseJsonSchema": schema}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := providertest.NewServer(t, tc.reply)
			cfg := providertest.Config(tc.kind, srv)
			cfg.APIKeyEnv = keyEnv
			p := providertest.New(t, cfg)
			req := tc.req
			req.Model = cmpOr(tc.model, "m")
			req.Messages = []provider.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "a"}, {Role: "user", Content: "q2"}}
			resp, err := p.Call(context.Background(), req)
			require.NoError(t, err)
			require.Equal(t, "{}", resp.Text)
			var body map[string]any
			require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
			for k, v := range tc.want {
				require.Equal(t, v, body[k], k)
			}
			if tc.kind == provider.KindGemini {
				require.Equal(t, "model", body["contents"].([]any)[1].(map[string]any)["role"], "assistant is model in Gemini")
			}
		})
	}
}

// TestMissingKey: a call without its key fails as auth, naming the variable,
// before anything is sent.
func TestMissingKey(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := providertest.NewServer(t, providertest.Reply{Status: 500})
			cfg := providertest.Config(kind, srv)
			cfg.APIKeyEnv = unsetEnv
			p := providertest.New(t, cfg)
			_, err := p.Call(context.Background(), provider.Request{Model: "m", Messages: []provider.Message{{Role: "user", Content: "q"}}})
			require.ErrorIs(t, err, provider.ErrMissingKey)
			require.ErrorContains(t, err, unsetEnv)
			require.Equal(t, retry.ClassAuth, retry.AsError(err).Class)
			require.Empty(t, srv.Requests())
		})
	}
}
