package provider_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// routes answers by "METHOD /path"; anything else is a 404 in OpenAI's shape.
type routes map[string]http.Handler

func (rs routes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h, ok := rs[r.Method+" "+r.URL.Path]; ok {
		h.ServeHTTP(w, r)
		return
	}
	providertest.Reply{Status: 404, Body: `{"detail":"Not Found"}`}.ServeHTTP(w, r)
}

func TestPreflight(t *testing.T) {
	t.Parallel()
	ok := func(body string) http.Handler { return providertest.Reply{Status: 200, Body: body} }
	tests := []struct {
		name   string
		kind   string
		keyEnv string
		model  string
		embed  bool // preflight for an embed action
		serve  http.Handler
		want   *wantErr // nil: preflight passes
		// calls are the requests the preflight must have made.
		calls []string
	}{{
		name: "openai model listed", kind: provider.KindOpenAI, model: "gpt-4o-mini",
		serve: routes{"GET /v1/models": ok(providertest.OpenAIModels("gpt-4o", "gpt-4o-mini"))},
		calls: []string{"GET /v1/models"},
	}, {
		name: "openai unknown model", kind: provider.KindOpenAI, model: "gpt-9",
		serve: routes{"GET /v1/models": ok(providertest.OpenAIModels("gpt-4o", "gpt-4o-mini"))},
		want:  &wantErr{class: retry.ClassInvalidRequest, typeName: "NotFoundError", msg: `model "gpt-9" is not in the provider's model list`},
		calls: []string{"GET /v1/models"},
	}, {
		name: "openai rejected key", kind: provider.KindOpenAI, model: "gpt-4o-mini",
		serve: routes{"GET /v1/models": providertest.Reply{Status: 401, Body: providertest.OpenAIError(
			"Incorrect API key provided: sk-abc***xyz. You can find your API key at https://platform.openai.com/account/api-keys.", "invalid_request_error", "invalid_api_key")}},
		want:  &wantErr{class: retry.ClassAuth, status: 401, pcode: "invalid_api_key", msg: "Incorrect API key provided"},
		calls: []string{"GET /v1/models"},
	}, {
		name: "openai missing key variable", kind: provider.KindOpenAI, keyEnv: unsetEnv, model: "gpt-4o-mini",
		serve: routes{},
		want:  &wantErr{class: retry.ClassAuth, typeName: "AuthError", msg: "environment variable " + unsetEnv + " is not set"},
	}, {
		name: "openai-compatible without a listing: one-token call", kind: provider.KindOpenAI, model: "local-model",
		serve: routes{"POST /v1/chat/completions": ok(providertest.OpenAIChat("local-model", "p", 1, 1))},
		calls: []string{"GET /v1/models", "POST /v1/chat/completions"},
	}, {
		// A chat call to an embedding model is refused whatever the key.
		name: "openai-compatible without a listing, embed action: one embedding", kind: provider.KindOpenAI, model: "local-embed", embed: true,
		serve: routes{"POST /v1/embeddings": ok(providertest.OpenAIEmbeddings("local-embed", [][]float32{{0.1, 0.2}}, 1)),
			"POST /v1/chat/completions": providertest.Reply{Status: 400, Body: providertest.OpenAIError(
				"local-embed does not support chat", "invalid_request_error", "")}},
		calls: []string{"GET /v1/models", "POST /v1/embeddings"},
	}, {
		name: "openai embed action, model listed: no call", kind: provider.KindOpenAI, model: "text-embedding-3-small", embed: true,
		serve: routes{"GET /v1/models": ok(providertest.OpenAIModels("text-embedding-3-small"))},
		calls: []string{"GET /v1/models"},
	}, {
		name: "openai one-token call: model_not_found", kind: provider.KindOpenAI, model: "nope",
		serve: routes{"POST /v1/chat/completions": providertest.Reply{Status: 404, Body: providertest.OpenAIError(
			"The model `nope` does not exist or you do not have access to it.", "invalid_request_error", "model_not_found")}},
		want:  &wantErr{class: retry.ClassInvalidRequest, typeName: "NotFoundError", status: 404, pcode: "model_not_found", msg: "does not exist"},
		calls: []string{"GET /v1/models", "POST /v1/chat/completions"},
	}, {
		name: "anthropic model found (alias accepted)", kind: provider.KindAnthropic, model: "claude-sonnet-4-5",
		serve: routes{"GET /v1/models/claude-sonnet-4-5": ok(providertest.AnthropicModel("claude-sonnet-4-5-20250929"))},
		calls: []string{"GET /v1/models/claude-sonnet-4-5"},
	}, {
		name: "anthropic unknown model", kind: provider.KindAnthropic, model: "claude-9",
		serve: routes{"GET /v1/models/claude-9": providertest.Reply{Status: 404, Body: providertest.AnthropicError("not_found_error", "model: claude-9")}},
		want:  &wantErr{class: retry.ClassInvalidRequest, typeName: "NotFoundError", status: 404, ptype: "not_found_error", msg: "model: claude-9"},
		calls: []string{"GET /v1/models/claude-9"},
	}, {
		name: "anthropic rejected key", kind: provider.KindAnthropic, model: "claude-sonnet-4-5",
		serve: routes{"GET /v1/models/claude-sonnet-4-5": providertest.Reply{Status: 401, Body: providertest.AnthropicError("authentication_error", "invalid x-api-key")}},
		want:  &wantErr{class: retry.ClassAuth, status: 401, ptype: "authentication_error", msg: "invalid x-api-key"},
		calls: []string{"GET /v1/models/claude-sonnet-4-5"},
	}, {
		name: "anthropic missing key variable", kind: provider.KindAnthropic, keyEnv: unsetEnv, model: "claude-sonnet-4-5",
		serve: routes{},
		want:  &wantErr{class: retry.ClassAuth, msg: unsetEnv},
	}, {
		name: "gemini model found", kind: provider.KindGemini, model: "gemini-2.5-flash",
		serve: routes{"GET /v1beta/models/gemini-2.5-flash": ok(providertest.GeminiModel("gemini-2.5-flash"))},
		calls: []string{"GET /v1beta/models/gemini-2.5-flash"},
	}, {
		name: "gemini unknown model", kind: provider.KindGemini, model: "gemini-9",
		serve: routes{"GET /v1beta/models/gemini-9": providertest.Reply{Status: 404, Body: providertest.GeminiError(404, "NOT_FOUND",
			"models/gemini-9 is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.")}},
		want:  &wantErr{class: retry.ClassInvalidRequest, status: 404, ptype: "NOT_FOUND", msg: "models/gemini-9 is not found"},
		calls: []string{"GET /v1beta/models/gemini-9"},
	}, {
		name: "gemini invalid key", kind: provider.KindGemini, model: "gemini-2.5-flash",
		serve: routes{"GET /v1beta/models/gemini-2.5-flash": providertest.Reply{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT",
			"API key not valid. Please pass a valid API key.", providertest.GeminiErrorInfo("API_KEY_INVALID"))}},
		want:  &wantErr{class: retry.ClassAuth, status: 400, pcode: "API_KEY_INVALID", msg: "API key not valid"},
		calls: []string{"GET /v1beta/models/gemini-2.5-flash"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := providertest.NewServer(t, tc.serve)
			cfg := providertest.Config(tc.kind, srv)
			cfg.APIKeyEnv = cmpOr(tc.keyEnv, keyEnv)
			p := providertest.New(t, cfg)
			err := provider.PreflightModel(context.Background(), p, tc.model, tc.embed)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				requireError(t, err, *tc.want, cfg.Name, tc.model)
			}
			var calls []string
			for _, r := range srv.Requests() {
				calls = append(calls, r.Method+" "+r.Path)
			}
			require.Equal(t, tc.calls, calls)
		})
	}
}

// TestPreflightOllamaNeedsNoKey: the ollama preset has no key variable and
// sends no Authorization header.
func TestPreflightOllamaNeedsNoKey(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, routes{"GET /v1/models": providertest.Reply{Status: 200,
		Body: providertest.OpenAIModels("llama3.2:latest", "qwen2.5:7b")}})
	cfg, ok := provider.Preset("ollama")
	require.True(t, ok)
	require.Empty(t, cfg.APIKeyEnv)
	cfg.BaseURL = srv.URL + "/v1"
	p := providertest.New(t, cfg)
	require.NoError(t, p.Preflight(context.Background(), "llama3.2"))
	require.Empty(t, srv.Requests()[0].Header.Get("Authorization"))
}
