package provider_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// trap is a provider failure that a naive classifier gets wrong.
type trap struct {
	name   string
	kind   string
	stream bool
	serve  http.Handler
	want   wantErr
}

func TestTraps(t *testing.T) {
	t.Parallel()
	h := providertest.Header
	hugeErr := new(atomic.Int64)
	traps := []trap{{
		name:  "llama.cpp context overflow reported as 500",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 500, Body: `{"error":{"code":500,"message":"the request exceeds the available context size, try increasing it","type":"server_error"}}`},
		want:  wantErr{class: retry.ClassContextOverflow, status: 500, ptype: "server_error", msg: "exceeds the available context size"},
	}, {
		name: "llama.cpp exceed_context_size_error: its counts join the message",
		kind: provider.KindOpenAI,
		serve: providertest.Reply{Status: 400, Body: `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it",` +
			`"type":"exceed_context_size_error","n_prompt_tokens":4390,"n_ctx":4096}}`},
		want: wantErr{class: retry.ClassContextOverflow, status: 400, ptype: "exceed_context_size_error",
			msg: "try increasing it (n_prompt_tokens 4390, n_ctx 4096)"},
	}, {
		name:  "Ollama context overflow reported as 500",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 500, Body: `{"error":{"message":"input length exceeds the context length","type":"api_error","param":null,"code":null}}`},
		want:  wantErr{class: retry.ClassContextOverflow, status: 500, ptype: "api_error", msg: "exceeds the context length"},
	}, {
		name:  "vLLM context overflow, top-level error object",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 400, Body: `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}`},
		want:  wantErr{class: retry.ClassContextOverflow, status: 400, ptype: "BadRequestError", msg: "maximum context length is 4096"},
	}, {
		name: "OpenAI 400 whose code merely contains server_error",
		kind: provider.KindOpenAI,
		serve: providertest.Reply{Status: 400, Body: providertest.OpenAIError("Invalid MCP server configuration: url must use https.",
			"invalid_request_error", "invalid_mcp_server_error_config")},
		want: wantErr{class: retry.ClassInvalidRequest, status: 400, pcode: "invalid_mcp_server_error_config", msg: "Invalid MCP server"},
	}, {
		name: "429 whose type says invalid_request_error",
		kind: provider.KindOpenAI,
		serve: providertest.Reply{Status: 429, Header: h("Retry-After", "1"), Body: providertest.OpenAIError(
			"Too many requests, please slow down.", "invalid_request_error", "")},
		want: wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", status: 429, ptype: "invalid_request_error",
			msg: "Too many requests", retryAfter: time.Second},
	}, {
		name: "OpenAI insufficient_quota 429 is a billing problem: permanent",
		kind: provider.KindOpenAI,
		serve: providertest.Reply{Status: 429, Header: h("X-Ratelimit-Reset-Requests", "20ms"), Body: providertest.OpenAIError(
			"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.",
			"insufficient_quota", "insufficient_quota")},
		want: wantErr{class: retry.ClassAuth, typeName: "InsufficientQuotaError", status: 429, ptype: "insufficient_quota",
			pcode: "insufficient_quota", msg: "check your plan and billing details"},
	}, {
		name: "OpenAI 429 request larger than the TPM limit: no wait helps (adapter override)",
		kind: provider.KindOpenAI,
		serve: providertest.Reply{Status: 429, Body: providertest.OpenAIError(
			"Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more.",
			"tokens", "rate_limit_exceeded")},
		want: wantErr{class: retry.ClassInvalidRequest, status: 429, ptype: "tokens", pcode: "rate_limit_exceeded", msg: "Request too large"},
	}, {
		name: "Groq 498 flex tier capacity exceeded",
		kind: provider.KindOpenAI,
		serve: providertest.Reply{Status: 498, Header: h("Retry-After-Ms", "1500"), Body: providertest.OpenAIError(
			"Flex tier capacity exceeded. This is a known issue and we are working on it. Please try again later.", "capacity_exceeded", "capacity_exceeded")},
		want: wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", status: 498, ptype: "capacity_exceeded",
			msg: "capacity exceeded", retryAfter: 1500 * time.Millisecond},
	}, {
		name:  "unlisted 5xx: Cloudflare 520 with an empty body",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 520},
		want:  wantErr{class: retry.ClassServer, typeName: "ServerError", status: 520, msg: "520 status code (no body)"},
	}, {
		name:  "truncated 200 body: unexpected end of JSON input",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", answer, 12, 5)[:60]},
		want:  wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: "unexpected end of JSON input"},
	}, {
		name:  "body cut mid-flight (Content-Length not reached)",
		kind:  provider.KindOpenAI,
		serve: providertest.CutBody{Body: providertest.OpenAIChat("gpt-4o-mini", answer, 12, 5), N: 80},
		want:  wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: "reading response body"},
	}, {
		name:   "stream that ends cleanly before [DONE] and before a finish_reason",
		kind:   provider.KindOpenAI,
		stream: true,
		serve:  providertest.SSE{Events: providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2]},
		want:   wantErr{class: retry.ClassNetwork, typeName: "NetworkError", emptyMsg: true},
	}, {
		name:   "OpenAI server_error inside a 200 stream",
		kind:   provider.KindOpenAI,
		stream: true,
		serve: providertest.SSE{Events: append(providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2],
			"data: "+providertest.OpenAIError("The server had an error while processing your request. Sorry about that!", "server_error", "")+"\n\n")},
		want: wantErr{class: retry.ClassServer, ptype: "server_error", msg: "Sorry about that"},
	}, {
		name:   "OpenRouter upstream error inside a 200 stream",
		kind:   provider.KindOpenAI,
		stream: true,
		serve: providertest.SSE{Events: []string{": OPENROUTER PROCESSING\n\n",
			`data: {"id":"gen-1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}],"error":{"code":502,"message":"Provider returned error"}}` + "\n\n"}},
		want: wantErr{class: retry.ClassServer, status: 502, msg: "Provider returned error"},
	}, {
		name:   "llama.cpp error: line inside a 200 stream",
		kind:   provider.KindOpenAI,
		stream: true,
		serve: providertest.SSE{Events: append(providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2],
			`error: {"code":500,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}`+"\n\n")},
		want: wantErr{class: retry.ClassContextOverflow, status: 500, ptype: "exceed_context_size_error", msg: "exceeds the available context size"},
	}, {
		name:   "an event: error a compatible server sends after a 200",
		kind:   provider.KindOpenAI,
		stream: true,
		serve: providertest.SSE{Events: append(providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2],
			"event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"The model crashed mid-answer\"}\n\n")},
		want: wantErr{class: retry.ClassServer, pcode: "server_error", msg: "The model crashed mid-answer"},
	}, {
		name:   "OpenAI Batch's enqueued token limit as an in-band error is a rate limit",
		kind:   provider.KindOpenAI,
		stream: true,
		serve: providertest.SSE{Events: []string{"data: " + providertest.OpenAIError(
			"Enqueued token limit reached for gpt-4o in organization org-abc. Limit: 90,000 enqueued tokens. Please try again once some in_progress batches have been completed.",
			"invalid_request_error", "token_limit_exceeded") + "\n\n"}},
		want: wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", pcode: "token_limit_exceeded", msg: "Enqueued token limit"},
	}, {
		name:   "a stream that opens with a BOM is still SSE",
		kind:   provider.KindOpenAI,
		stream: true,
		serve: providertest.SSE{Events: append([]string{"\ufeff: keep-alive\n\n"},
			"data: "+providertest.OpenAIError("Slow down", "rate_limit_error", "")+"\n\n")},
		want: wantErr{class: retry.ClassRateLimit, ptype: "rate_limit_error", msg: "Slow down"},
	}, {
		name:  "a LiteLLM proxy's numeric code as a string",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 200, Body: `{"error":{"message":"No deployments available for selected model, Try again in 60 seconds. Passed model=gpt-4o","type":"None","param":"None","code":"429"}}`},
		want:  wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", pcode: "429", msg: "No deployments available"},
	}, {
		name:  "Gemini OpenAI-compatible endpoint: bad key as an array body",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 400, Body: `[{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT"}}]`},
		want:  wantErr{class: retry.ClassAuth, status: 400, ptype: "INVALID_ARGUMENT", msg: "API key not valid"},
	}, {
		name:  "Ollama unknown model",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 404, Body: `{"error":{"message":"model \"llama9\" not found, try pulling it first","type":"api_error","param":null,"code":null}}`},
		want:  wantErr{class: retry.ClassInvalidRequest, typeName: "NotFoundError", status: 404, msg: "not found, try pulling it first"},
	}, {
		name:  "a proxy's HTML page with a 200",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 200, Header: h("Content-Type", "text/html"), Body: "<!DOCTYPE html><html><body>Please log in to the captive portal</body></html>"},
		want:  wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "captive portal"},
	}, {
		name:  "huge error body: read capped, message trimmed",
		kind:  provider.KindOpenAI,
		serve: providertest.Huge{Status: 502, ContentType: "text/html", Prefix: "<html><body>Bad Gateway ", Written: hugeErr},
		want:  wantErr{class: retry.ClassServer, status: 502, msg: "Bad Gateway aaaa"},
	}, {
		name: "Anthropic max_tokens: 10000 > 4096 is a parameter error, not an overflow",
		kind: provider.KindAnthropic,
		serve: providertest.Reply{Status: 400, Body: providertest.AnthropicError("invalid_request_error",
			"max_tokens: 10000 > 4096, which is the maximum allowed number of output tokens for claude-3-haiku-20240307")},
		want: wantErr{class: retry.ClassInvalidRequest, status: 400, ptype: "invalid_request_error", msg: "max_tokens: 10000 > 4096"},
	}, {
		name: "Anthropic input plus max_tokens over the context limit is an overflow",
		kind: provider.KindAnthropic,
		serve: providertest.Reply{Status: 400, Body: providertest.AnthropicError("invalid_request_error",
			"input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000, decrease input length or `max_tokens` and try again")},
		want: wantErr{class: retry.ClassContextOverflow, status: 400, msg: "exceed context limit"},
	}, {
		name:   "Anthropic overloaded_error SSE event after a 200",
		kind:   provider.KindAnthropic,
		stream: true,
		serve: providertest.SSE{Events: append(providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:4],
			providertest.AnthropicErrorEvent("overloaded_error", "Overloaded"))},
		want: wantErr{class: retry.ClassServer, typeName: "OverloadedError", ptype: "overloaded_error", msg: "Overloaded"},
	}, {
		name:   "Anthropic stream that ends without message_stop",
		kind:   provider.KindAnthropic,
		stream: true,
		serve:  providertest.SSE{Events: providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:6]},
		want:   wantErr{class: retry.ClassNetwork, typeName: "NetworkError", emptyMsg: true},
	}, {
		name:   "Anthropic error event whose data is words, not JSON",
		kind:   provider.KindAnthropic,
		stream: true,
		serve: providertest.SSE{Events: append(providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:4],
			"event: error\ndata: Error 429\n\n")},
		want: wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", msg: `stream event does not decode: invalid character 'E' looking for beginning of value: "Error 429"`},
	}, {
		name:  "Anthropic credit balance too low",
		kind:  provider.KindAnthropic,
		serve: providertest.Reply{Status: 400, Body: providertest.AnthropicError("invalid_request_error", "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")},
		want:  wantErr{class: retry.ClassAuth, status: 400, msg: "credit balance is too low"},
	}, {
		name:  "Anthropic truncated 200 body",
		kind:  provider.KindAnthropic,
		serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("claude-sonnet-4-5", answer, 12, 5)[:90]},
		want:  wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: "unexpected end of JSON input"},
	}, {
		name: "Gemini FAILED_PRECONDITION",
		kind: provider.KindGemini,
		serve: providertest.Reply{Status: 400, Body: providertest.GeminiError(400, "FAILED_PRECONDITION",
			"User location is not supported for the API use.")},
		want: wantErr{class: retry.ClassInvalidRequest, status: 400, ptype: "FAILED_PRECONDITION", msg: "User location"},
	}, {
		name:  "Gemini 403 PERMISSION_DENIED",
		kind:  provider.KindGemini,
		serve: providertest.Reply{Status: 403, Body: providertest.GeminiError(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.")},
		want:  wantErr{class: retry.ClassAuth, status: 403, ptype: "PERMISSION_DENIED", msg: "unregistered callers"},
	}, {
		// An OpenAI-compatible endpoint that filters the prompt itself
		// answers no completion, only this 400: the content filter's class,
		// never retried, not a malformed request.
		name:  "Azure OpenAI prompt content filter",
		kind:  provider.KindOpenAI,
		serve: providertest.Reply{Status: 400, Body: providertest.AzureContentFilterError()},
		want:  wantErr{class: retry.ClassContentFilter, status: 400, pcode: "content_filter", msg: "content management policy"},
	}, {
		name:  "Gemini truncated 200 body",
		kind:  provider.KindGemini,
		serve: providertest.Reply{Status: 200, Body: providertest.GeminiResponse("gemini-2.5-flash", answer, 12, 5)[:70]},
		want:  wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: "unexpected end of JSON input"},
	}, {
		name:   "Gemini stream without a finishReason",
		kind:   provider.KindGemini,
		stream: true,
		serve:  providertest.SSE{Events: providertest.GeminiStream("gemini-2.5-flash", deltas, 12, 5)[:2]},
		want:   wantErr{class: retry.ClassNetwork, typeName: "NetworkError", emptyMsg: true},
	}}
	for _, tc := range traps {
		t.Run(tc.kind+"/"+tc.name, func(t *testing.T) {
			t.Parallel()
			srv := providertest.NewServer(t, tc.serve)
			cfg := providertest.Config(tc.kind, srv)
			cfg.APIKeyEnv = keyEnv
			p := providertest.New(t, cfg)
			_, err := p.Call(context.Background(), provider.Request{Model: models[tc.kind], Stream: tc.stream,
				Messages: []provider.Message{{Role: "user", Content: prompt}}})
			requireError(t, err, tc.want, cfg.Name, models[tc.kind])
		})
	}
	require.Less(t, hugeErr.Load(), int64(provider.MaxErrorBodyBytes+16<<20))
}

// TestKeyNeverInURLErrors: a key in the base URL's query (as a proxy or
// ?key= style endpoint may want) is redacted from Go's url.Error text.
func TestKeyNeverInURLErrors(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now: connection refused

	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			cfg := provider.Config{Name: "refused", Kind: kind, APIKeyEnv: keyEnv, Timeout: 5 * time.Second,
				BaseURL: "http://" + addr + "/v1?key=" + sentinelKey + "&api-version=2024-06-01"}
			p := providertest.New(t, cfg)
			_, err := p.Call(context.Background(), provider.Request{Model: models[kind],
				Messages: []provider.Message{{Role: "user", Content: prompt}}})
			requireError(t, err, wantErr{class: retry.ClassNetwork, typeName: "APIConnectionError", msg: "key=REDACTED&api-version=2024-06-01"},
				cfg.Name, models[kind])
			require.Contains(t, err.Error(), "connection refused")
			require.ErrorContains(t, retry.AsError(err).Err, "key=REDACTED")

			// Preflight goes the same way.
			err = p.Preflight(context.Background(), models[kind])
			requireNoKey(t, err)
			require.Equal(t, retry.ClassNetwork, retry.AsError(err).Class)
		})
	}
}

// TestCallerCancellation: the caller's cancellation is a network error that
// still matches context.Canceled.
func TestCallerCancellation(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.Hang)
	cfg := providertest.Config(provider.KindOpenAI, srv)
	p := providertest.New(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	srv.SetHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel() // the request has arrived: give up on it
		providertest.Hang(w, r)
	}))
	_, err := p.Call(ctx, provider.Request{Model: "m", Messages: []provider.Message{{Role: "user", Content: prompt}}})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, retry.ClassNetwork, retry.AsError(err).Class)
}
