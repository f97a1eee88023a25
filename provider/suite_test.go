package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// The key every test provider reads. No error text may ever contain it.
const (
	keyEnv      = "JETPOOL_PROVIDER_TEST_KEY"
	sentinelKey = "sk-SENTINEL-7f3a9c2e-do-not-print"
	unsetEnv    = "JETPOOL_PROVIDER_TEST_UNSET_KEY"
)

func TestMain(m *testing.M) {
	// Set once here rather than with t.Setenv, which forbids t.Parallel.
	os.Setenv(keyEnv, sentinelKey)
	os.Unsetenv(unsetEnv)
	goleak.VerifyTestMain(m)
}

// kinds are the adapters the behaviour suite runs against.
var kinds = []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini, provider.KindSim}

// models is the model each adapter is asked for.
var models = map[string]string{
	provider.KindOpenAI:    "gpt-4o-mini",
	provider.KindAnthropic: "claude-sonnet-4-5",
	provider.KindGemini:    "gemini-2.5-flash",
	provider.KindSim:       "sim-1",
}

const (
	answer = "Hello from the fake"
	prompt = "Say hello."
)

var deltas = []string{"Hello", " from", " the fake"}

// cell is one suite case for one adapter: how the fake server (or the sim)
// behaves, and what the call must return.
type cell struct {
	serve http.Handler        // wire adapters: the fake endpoint
	sim   *provider.SimConfig // sim: its fault knobs
	skip  string              // why the case does not apply to this adapter
	// params are the request's (the sim stops at max_tokens as a model does).
	params map[string]any
	want   want
}

type want struct {
	// success ("" text: answer; "" finish: stop, raw as each wire says it)
	text      string
	usage     provider.Usage
	finish    string
	finishRaw string
	noText    bool // the answer is empty
	// error (nil: the call succeeds)
	err *wantErr
	// deltas, when set, is what OnDelta must have received, in order, joined.
	deltas *string
	// bounded, when set, counts what the server wrote: it must stay near MaxBodyBytes.
	bounded *atomic.Int64
	// toolCalls, when set, are the calls the answer must carry.
	toolCalls []provider.ToolCall
}

type wantErr struct {
	class        retry.Class
	typeName     string // "" : any non-empty name
	status       int
	ptype, pcode string
	msg          string // substring of the message
	emptyMsg     bool   // the message must be empty (a dropped stream)
	retryAfter   time.Duration
	reset        time.Duration // compared within resetSlack
}

// resetSlack absorbs the second-granularity of RFC 3339 reset times.
const resetSlack = 2 * time.Second

func ptr[T any](v T) *T { return &v }

// suiteCase is one behaviour, with a cell per adapter (each must be present).
type suiteCase struct {
	name    string
	stream  bool
	timeout time.Duration // Config.Timeout; 5 s when 0
	idle    time.Duration // Config.StreamIdleTimeout
	cells   map[string]cell
	// edit, when set, changes the request (tools, say).
	edit func(r *provider.Request)
}

func suiteCases() []suiteCase {
	oaiHuge, antHuge, gemHuge := new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	oaiHugeS, antHugeS, gemHugeS := new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	wireOnly := cell{skip: "wire-only: the sim has no HTTP layer"}
	h := providertest.Header

	return append([]suiteCase{{
		name: "success",
		cells: map[string]cell{
			"openai":    {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini-2024-07-18", answer, 12, 5)}},
			"anthropic": {serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("claude-sonnet-4-5-20250929", answer, 12, 5)}},
			"gemini":    {serve: providertest.Reply{Status: 200, Body: providertest.GeminiResponse("gemini-2.5-flash", answer, 12, 5)}},
			"sim":       {sim: &provider.SimConfig{Reply: answer}, want: want{usage: provider.Usage{InputTokens: 5, OutputTokens: 5}}},
		},
	}, {
		name:   "streaming",
		stream: true,
		cells: map[string]cell{
			"openai":    {serve: providertest.SSE{Events: providertest.OpenAIStream("gpt-4o-mini-2024-07-18", deltas, 12, 5)}},
			"anthropic": {serve: providertest.SSE{Events: providertest.AnthropicStream("claude-sonnet-4-5-20250929", deltas, 12, 5)}},
			"gemini":    {serve: providertest.SSE{Events: providertest.GeminiStream("gemini-2.5-flash", deltas, 12, 5)}},
			"sim":       {sim: &provider.SimConfig{Reply: answer}, want: want{usage: provider.Usage{InputTokens: 5, OutputTokens: 5}}},
		},
	}, {
		name: "rate limit",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 429,
				Header: h("Retry-After", "2", "X-Ratelimit-Limit-Requests", "500", "X-Ratelimit-Remaining-Requests", "0",
					"X-Ratelimit-Reset-Requests", "1s", "X-Ratelimit-Reset-Tokens", "6m0s", "X-Request-Id", "req_123"),
				Body: providertest.OpenAIError("Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): "+
					"Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/rate-limits to learn more.",
					"requests", "rate_limit_exceeded")},
				want: want{err: &wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", status: 429, ptype: "requests",
					pcode: "rate_limit_exceeded", msg: "Rate limit reached", retryAfter: 2 * time.Second, reset: 6 * time.Minute}}},
			"anthropic": {serve: anthropicRateLimit(),
				want: want{err: &wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", status: 429, ptype: "rate_limit_error",
					msg: "exceed the rate limit", retryAfter: 7 * time.Second, reset: 45 * time.Second}}},
			"gemini": {serve: providertest.Reply{Status: 429, Body: providertest.GeminiError(429, "RESOURCE_EXHAUSTED",
				"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.",
				providertest.GeminiQuotaFailure("generativelanguage.googleapis.com/generate_content_free_tier_requests"),
				providertest.GeminiRetryInfo("13s"))},
				want: want{err: &wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", status: 429, ptype: "RESOURCE_EXHAUSTED",
					msg: "exceeded your current quota", retryAfter: 13 * time.Second}}},
			"sim": {sim: &provider.SimConfig{FailFirst: 1, FailClass: "rate_limit", RetryAfter: 3 * time.Second},
				want: want{err: &wantErr{class: retry.ClassRateLimit, status: 429, ptype: "rate_limit_error", retryAfter: 3 * time.Second}}},
		},
	}, {
		name: "server 500",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 500, Body: providertest.OpenAIError(
				"The server had an error while processing your request. Sorry about that!", "server_error", "")},
				want: want{err: &wantErr{class: retry.ClassServer, typeName: "ServerError", status: 500, ptype: "server_error", msg: "Sorry about that"}}},
			"anthropic": {serve: providertest.Reply{Status: 500, Body: providertest.AnthropicError("api_error", "Internal server error")},
				want: want{err: &wantErr{class: retry.ClassServer, typeName: "ServerError", status: 500, ptype: "api_error", msg: "Internal server error"}}},
			"gemini": {serve: providertest.Reply{Status: 500, Body: providertest.GeminiError(500, "INTERNAL",
				"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting")},
				want: want{err: &wantErr{class: retry.ClassServer, typeName: "ServerError", status: 500, ptype: "INTERNAL", msg: "internal error"}}},
			"sim": {skip: "the sim's one server fault is a 503: see server 503"},
		},
	}, {
		name: "server 503",
		cells: map[string]cell{
			// Envoy in front of a compatible server: plain text, not JSON.
			"openai": {serve: providertest.Reply{Status: 503, Header: h("Content-Type", "text/plain"),
				Body: "upstream connect error or disconnect/reset before headers. reset reason: connection termination"},
				want: want{err: &wantErr{class: retry.ClassServer, status: 503, msg: "upstream connect error"}}},
			// Cloudflare's HTML page.
			"anthropic": {serve: providertest.Reply{Status: 503, Header: h("Content-Type", "text/html"),
				Body: "<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n<center><h1>503 Service Temporarily Unavailable</h1></center>\r\n</body>\r\n</html>\r\n"},
				want: want{err: &wantErr{class: retry.ClassServer, status: 503, msg: "<title>503 Service Temporarily Unavailable</title>"}}},
			"gemini": {serve: providertest.Reply{Status: 503, Body: providertest.GeminiError(503, "UNAVAILABLE", "The model is overloaded. Please try again later.")},
				want: want{err: &wantErr{class: retry.ClassServer, status: 503, ptype: "UNAVAILABLE", msg: "overloaded"}}},
			"sim": {sim: &provider.SimConfig{FailFirst: 1, FailClass: "server"},
				want: want{err: &wantErr{class: retry.ClassServer, status: 503}}},
		},
	}, {
		name: "overloaded 529 without a reason phrase",
		cells: map[string]cell{
			"openai": {serve: providertest.Raw("HTTP/1.1 529 \r\nContent-Length: 0\r\n\r\n"),
				want: want{err: &wantErr{class: retry.ClassServer, typeName: "OverloadedError", status: 529, msg: "529 status code (no body)"}}},
			"anthropic": {serve: rawJSON("HTTP/1.1 529 ", providertest.AnthropicError("overloaded_error", "Overloaded")),
				want: want{err: &wantErr{class: retry.ClassServer, typeName: "OverloadedError", status: 529, ptype: "overloaded_error", msg: "Overloaded"}}},
			"gemini": {serve: providertest.Raw("HTTP/1.1 529 \r\nContent-Length: 0\r\n\r\n"),
				want: want{err: &wantErr{class: retry.ClassServer, status: 529, msg: "529 status code (no body)"}}},
			"sim": wireOnly,
		},
	}, {
		name: "auth",
		cells: map[string]cell{
			// The fake echoes the key (OpenAI masks it; a proxy might not): it must come back redacted.
			"openai": {serve: echoKey(401, "Authorization", func(k string) string {
				return providertest.OpenAIError("Incorrect API key provided: "+k+". You can find your API key at https://platform.openai.com/account/api-keys.",
					"invalid_request_error", "invalid_api_key")
			}),
				want: want{err: &wantErr{class: retry.ClassAuth, typeName: "AuthError", status: 401, ptype: "invalid_request_error",
					pcode: "invalid_api_key", msg: "Incorrect API key provided: Bearer [REDACTED]"}}},
			"anthropic": {serve: providertest.Reply{Status: 401, Body: providertest.AnthropicError("authentication_error", "invalid x-api-key")},
				want: want{err: &wantErr{class: retry.ClassAuth, typeName: "AuthError", status: 401, ptype: "authentication_error", msg: "invalid x-api-key"}}},
			// Gemini says a bad key with a 400 INVALID_ARGUMENT: auth, not invalid_request.
			"gemini": {serve: providertest.Reply{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT",
				"API key not valid. Please pass a valid API key.", providertest.GeminiErrorInfo("API_KEY_INVALID"))},
				want: want{err: &wantErr{class: retry.ClassAuth, typeName: "AuthError", status: 400, ptype: "INVALID_ARGUMENT",
					pcode: "API_KEY_INVALID", msg: "API key not valid"}}},
			"sim": {sim: &provider.SimConfig{FailFirst: 1, FailClass: "auth"},
				want: want{err: &wantErr{class: retry.ClassAuth, status: 401, msg: "invalid api key"}}},
		},
	}, {
		name: "invalid request",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 400, Body: `{"error":{"message":"Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 5 instead.",` +
				`"type":"invalid_request_error","param":"temperature","code":"decimal_above_max_value"}}`},
				want: want{err: &wantErr{class: retry.ClassInvalidRequest, typeName: "InvalidRequestError", status: 400,
					ptype: "invalid_request_error", pcode: "decimal_above_max_value", msg: "Invalid 'temperature'"}}},
			"anthropic": {serve: providertest.Reply{Status: 400, Body: providertest.AnthropicError("invalid_request_error",
				`messages: roles must alternate between "user" and "assistant", but found multiple "user" roles in a row`)},
				want: want{err: &wantErr{class: retry.ClassInvalidRequest, status: 400, ptype: "invalid_request_error", msg: "roles must alternate"}}},
			"gemini": {serve: providertest.Reply{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT",
				"* GenerateContentRequest.generation_config.temperature: must be between 0 and 2\n")},
				want: want{err: &wantErr{class: retry.ClassInvalidRequest, status: 400, ptype: "INVALID_ARGUMENT", msg: "temperature: must be between"}}},
			"sim": {sim: &provider.SimConfig{FailFirst: 1, FailClass: "invalid_request"},
				want: want{err: &wantErr{class: retry.ClassInvalidRequest, status: 400}}},
		},
	}, {
		name: "context overflow",
		cells: map[string]cell{
			"openai": {serve: providertest.Reply{Status: 400, Body: providertest.OpenAIError("This model's maximum context length is 128000 tokens. "+
				"However, your messages resulted in 130412 tokens. Please reduce the length of the messages.", "invalid_request_error", "context_length_exceeded")},
				want: want{err: &wantErr{class: retry.ClassContextOverflow, typeName: "ContextOverflowError", status: 400, pcode: "context_length_exceeded", msg: "maximum context length"}}},
			"anthropic": {serve: providertest.Reply{Status: 400, Body: providertest.AnthropicError("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")},
				want: want{err: &wantErr{class: retry.ClassContextOverflow, status: 400, msg: "prompt is too long"}}},
			"gemini": {serve: providertest.Reply{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT",
				"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).")},
				want: want{err: &wantErr{class: retry.ClassContextOverflow, status: 400, msg: "input token count"}}},
			"sim": {sim: &provider.SimConfig{FailFirst: 1, FailClass: "context_overflow"},
				want: want{err: &wantErr{class: retry.ClassContextOverflow, status: 400}}},
		},
	}, {
		name: "connection reset before headers",
		cells: map[string]cell{
			"openai":    {serve: providertest.ResetBeforeHeaders, want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "APIConnectionError", msg: "/v1/chat/completions"}}},
			"anthropic": {serve: providertest.ResetBeforeHeaders, want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "APIConnectionError", msg: "/v1/messages"}}},
			"gemini":    {serve: providertest.ResetBeforeHeaders, want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "APIConnectionError", msg: ":generateContent"}}},
			// The sim's network fault is the nearest: a failure before any answer.
			"sim": {sim: &provider.SimConfig{FailFirst: 1, FailClass: "network"}, want: want{err: &wantErr{class: retry.ClassNetwork, emptyMsg: true}}},
		},
	}, {
		name:   "stream dropped mid-flight",
		stream: true,
		cells: map[string]cell{
			"openai": {serve: providertest.SSE{Events: providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:3], Drop: true},
				want: want{deltas: ptr("Hello from"), err: &wantErr{class: retry.ClassNetwork, typeName: "NetworkError", emptyMsg: true}}},
			"anthropic": {serve: providertest.SSE{Events: providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:5], Drop: true},
				want: want{deltas: ptr("Hello from"), err: &wantErr{class: retry.ClassNetwork, typeName: "NetworkError", emptyMsg: true}}},
			"gemini": {serve: providertest.SSE{Events: providertest.GeminiStream("gemini-2.5-flash", deltas, 12, 5)[:2], Drop: true},
				want: want{deltas: ptr("Hello from"), err: &wantErr{class: retry.ClassNetwork, typeName: "NetworkError", emptyMsg: true}}},
			"sim": {sim: &provider.SimConfig{Faults: provider.SimFaults{Drop: 1}},
				want: want{deltas: ptr("partial answ"), err: &wantErr{class: retry.ClassNetwork, emptyMsg: true}}},
		},
	}, {
		name:    "hung server vs timeout",
		timeout: 100 * time.Millisecond,
		cells: map[string]cell{
			"openai":    {serve: providertest.Hang, want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "APITimeoutError", msg: "timed out after 100ms"}}},
			"anthropic": {serve: providertest.Hang, want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "APITimeoutError", msg: "timed out after 100ms"}}},
			"gemini":    {serve: providertest.Hang, want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "APITimeoutError", msg: "timed out after 100ms"}}},
			"sim":       {sim: &provider.SimConfig{Latency: time.Hour}, want: want{err: &wantErr{class: retry.ClassNetwork, msg: "deadline exceeded"}}},
		},
	}, {
		// Errors inside a 200 stream often carry only words (a gateway's, an
		// SDK wrapper's): they are classified and retried like their
		// structured forms (retry.Classify, step 8).
		name: "rate limit in words inside a 200 stream", stream: true,
		cells: inWords(retry.ClassRateLimit, "Error 429", "Too many tokens, please wait before trying again.", "error code 429"),
	}, {
		name: "server error in words inside a 200 stream", stream: true,
		cells: inWords(retry.ClassServer, "upstream returned 5xx", "error code 500", "500 status code (no body)"),
	}, {
		name: "network error in words inside a 200 stream", stream: true,
		cells: inWords(retry.ClassNetwork, "The socket connection was closed unexpectedly", "request cancelled",
			"peer closed connection without sending complete message body (incomplete chunked read)"),
	}, {
		name: "invalid api key in words beats a status in words", stream: true,
		cells: inWords(retry.ClassAuth, "Error 500: invalid api key", "Error 500: invalid api key", "Error 500: invalid api key"),
	}, {
		// SSE garbage says what was wrong, with the first bytes quoted, and
		// is classified by its words (provider.badStream).
		name:   "a 200 stream that is an HTML page, not SSE",
		stream: true,
		cells: sameWire(providertest.SSE{Events: []string{"<html><head><title>502 Bad Gateway</title></head>\n<body>502 Bad Gateway</body></html>\n"}},
			want{err: &wantErr{class: retry.ClassServer, typeName: "ServerError", msg: `response is not an SSE stream: "<html><head><title>502 Bad Gateway`}}),
	}, {
		name:   "a 200 stream that is a JSON error, not SSE",
		stream: true,
		cells: sameWire(providertest.SSE{Events: []string{`{"error":{"message":"Rate limit exceeded: free-models-per-min","code":429}}`}},
			want{err: &wantErr{class: retry.ClassRateLimit, typeName: "RateLimitError", status: 429, msg: "Rate limit exceeded"}}),
	}, {
		name:   "a 200 stream of words that say nothing known",
		stream: true,
		cells: sameWire(providertest.SSE{Events: []string{"Hello! The service you asked for lives elsewhere now.\n"}},
			want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: `response is not an SSE stream: "Hello! The service`}}),
	}, {
		name:   "an event that does not decode",
		stream: true,
		cells: map[string]cell{
			"openai": {serve: providertest.SSE{Events: append(providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2], "data: {oops\n\n")},
				want: want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: `stream event does not decode: invalid character 'o'`}}},
			"anthropic": {serve: providertest.SSE{Events: append(providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:3], "event: content_block_delta\ndata: {oops\n\n")},
				want: want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: `stream event does not decode: invalid character 'o'`}}},
			"gemini": {serve: providertest.SSE{Events: append(providertest.GeminiStream("gemini-2.5-flash", deltas, 12, 5)[:1], "data: {oops\r\n\r\n")},
				want: want{err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: `stream event does not decode: invalid character 'o'`}}},
			"sim": wireOnly,
		},
	}, {
		name:   "an event cut by the end of the stream",
		stream: true,
		cells: map[string]cell{
			"openai": {serve: providertest.SSE{Events: append(providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2], `data: {"id":"chatcmpl-abc123","object":"chat.co`)},
				want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: `stream ended inside an event: "{\"id\":\"chatcmpl-abc123\"`}}},
			"anthropic": {serve: providertest.SSE{Events: append(providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:3], "event: content_block_delta\ndata: {\"type\":\"content_bl")},
				want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: `stream ended inside an event: "{\"type\":\"content_bl"`}}},
			"gemini": {serve: providertest.SSE{Events: append(providertest.GeminiStream("gemini-2.5-flash", deltas, 12, 5)[:1], `data: {"candidates":[{"content":`)},
				want: want{err: &wantErr{class: retry.ClassNetwork, typeName: "NetworkError", msg: `stream ended inside an event: "{\"candidates\"`}}},
			"sim": wireOnly,
		},
	}, {
		name:    "huge body",
		timeout: time.Minute, // 32 MiB under -race, several at once
		cells: map[string]cell{
			"openai": {serve: providertest.Huge{Prefix: `{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"`, Written: oaiHuge},
				want: want{bounded: oaiHuge, err: &wantErr{class: retry.ClassInvalidRequest, typeName: "ResponseTooLargeError", msg: "exceeds 32 MiB"}}},
			"anthropic": {serve: providertest.Huge{Prefix: `{"type":"message","content":[{"type":"text","text":"`, Written: antHuge},
				want: want{bounded: antHuge, err: &wantErr{class: retry.ClassInvalidRequest, typeName: "ResponseTooLargeError", msg: "exceeds 32 MiB"}}},
			"gemini": {serve: providertest.Huge{Prefix: `{"candidates":[{"content":{"parts":[{"text":"`, Written: gemHuge},
				want: want{bounded: gemHuge, err: &wantErr{class: retry.ClassInvalidRequest, typeName: "ResponseTooLargeError", msg: "exceeds 32 MiB"}}},
			"sim": wireOnly,
		},
	}, {
		name:    "huge stream event",
		stream:  true,
		timeout: time.Minute,
		cells: map[string]cell{
			"openai": {serve: providertest.Huge{ContentType: "text/event-stream", Prefix: `data: {"choices":[{"index":0,"delta":{"content":"`, Written: oaiHugeS},
				want: want{bounded: oaiHugeS, err: &wantErr{class: retry.ClassInvalidRequest, typeName: "ResponseTooLargeError", msg: "exceeds 32 MiB"}}},
			"anthropic": {serve: providertest.Huge{ContentType: "text/event-stream", Prefix: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"", Written: antHugeS},
				want: want{bounded: antHugeS, err: &wantErr{class: retry.ClassInvalidRequest, typeName: "ResponseTooLargeError", msg: "exceeds 32 MiB"}}},
			"gemini": {serve: providertest.Huge{ContentType: "text/event-stream", Prefix: `data: {"candidates":[{"content":{"parts":[{"text":"`, Written: gemHugeS},
				want: want{bounded: gemHugeS, err: &wantErr{class: retry.ClassInvalidRequest, typeName: "ResponseTooLargeError", msg: "exceeds 32 MiB"}}},
			"sim": wireOnly,
		},
	}}, append(append(finishCases(), toolCases()...), idleCases()...)...) // finish_test.go, multimodal_test.go, idle_test.go
}

// textInStream is a 200 stream of kind's wire format that starts an answer
// and then carries an error event whose only content is msg: no status, no
// type, as a gateway passes an upstream error on.
func textInStream(kind, msg string) providertest.SSE {
	q, _ := json.Marshal(msg)
	switch kind {
	case provider.KindAnthropic:
		return providertest.SSE{Events: append(providertest.AnthropicStream("claude-sonnet-4-5", deltas, 12, 5)[:4],
			fmt.Sprintf("event: error\ndata: {\"type\":\"error\",\"error\":{\"message\":%s}}\n\n", q))}
	case provider.KindGemini:
		return providertest.SSE{Events: append(providertest.GeminiStream("gemini-2.5-flash", deltas, 12, 5)[:1],
			fmt.Sprintf("data: {\"error\":{\"message\":%s}}\r\n\r\n", q))}
	}
	return providertest.SSE{Events: append(providertest.OpenAIStream("gpt-4o-mini", deltas, 12, 5)[:2],
		fmt.Sprintf("data: {\"error\":{\"message\":%s}}\n\n", q))}
}

// inWords are the cells of a case whose 200 stream carries an error event
// of words alone, one text per wire format, that must come back as class c.
func inWords(c retry.Class, openai, anthropic, gemini string) map[string]cell {
	cells := map[string]cell{"sim": {skip: "wire-only: the sim's faults are structured, it has no stream to carry words"}}
	for kind, msg := range map[string]string{provider.KindOpenAI: openai, provider.KindAnthropic: anthropic, provider.KindGemini: gemini} {
		cells[kind] = cell{serve: textInStream(kind, msg), want: want{err: &wantErr{class: c, typeName: c.TypeName(), msg: msg}}}
	}
	return cells
}

// sameWire is a case that every wire adapter serves the same way.
func sameWire(serve http.Handler, w want) map[string]cell {
	c := cell{serve: serve, want: w}
	return map[string]cell{"openai": c, "anthropic": c, "gemini": c,
		"sim": {skip: "wire-only: the sim has no HTTP layer"}}
}

// anthropicRateLimit is Anthropic's 429 with its rate-limit headers, reset
// times computed when the request arrives.
func anthropicRateLimit() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		now := time.Now().UTC()
		h := providertest.Header("Retry-After", "7",
			"Anthropic-Ratelimit-Requests-Limit", "50", "Anthropic-Ratelimit-Requests-Remaining", "0",
			"Anthropic-Ratelimit-Requests-Reset", now.Add(30*time.Second).Format(time.RFC3339),
			"Anthropic-Ratelimit-Input-Tokens-Reset", now.Add(45*time.Second).Format(time.RFC3339),
			"Anthropic-Ratelimit-Output-Tokens-Reset", now.Add(2*time.Second).Format(time.RFC3339),
			"Request-Id", "req_011CSHoEeqs5C35K2UUqR7Fy")
		providertest.Reply{Status: 429, Header: h, Body: providertest.AnthropicError("rate_limit_error",
			"This request would exceed the rate limit for your organization (8d5a8b2e) of 50 requests per minute. "+
				"For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. "+
				"Please reduce the prompt length or the maximum tokens requested, or try again later.")}.ServeHTTP(w, r)
	}
}

// rawJSON writes status line and a JSON body by hand (no reason phrase).
func rawJSON(statusLine, body string) providertest.Raw {
	return providertest.Raw(fmt.Sprintf("%s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", statusLine, len(body), body))
}

// echoKey answers status with a body that quotes the request's credential header.
func echoKey(status int, header string, body func(key string) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		providertest.Reply{Status: status, Body: body(r.Header.Get(header))}.ServeHTTP(w, r)
	}
}

// wireChecks are what every successful call must have put on the wire.
var wireChecks = map[string]func(t *testing.T, r providertest.Request, stream bool){
	provider.KindOpenAI: func(t *testing.T, r providertest.Request, stream bool) {
		require.Equal(t, "/v1/chat/completions", r.Path)
		require.Equal(t, "Bearer "+sentinelKey, r.Header.Get("Authorization"))
		require.Contains(t, string(r.Body), `"model":"gpt-4o-mini"`)
		require.Contains(t, string(r.Body), `{"role":"system","content":"Be brief."}`)
		if stream {
			require.Contains(t, string(r.Body), `"stream_options":{"include_usage":true}`)
		}
	},
	provider.KindAnthropic: func(t *testing.T, r providertest.Request, stream bool) {
		require.Equal(t, "/v1/messages", r.Path)
		require.Equal(t, sentinelKey, r.Header.Get("X-Api-Key"))
		require.Equal(t, "2023-06-01", r.Header.Get("Anthropic-Version"))
		require.Contains(t, string(r.Body), `"system":"Be brief."`)
		require.Contains(t, string(r.Body), `"max_tokens":1024`)
		require.Equal(t, stream, strings.Contains(string(r.Body), `"stream":true`))
	},
	provider.KindGemini: func(t *testing.T, r providertest.Request, stream bool) {
		require.Equal(t, sentinelKey, r.Header.Get("X-Goog-Api-Key"))
		require.NotContains(t, r.Query, "key=", "the key travels in a header, never in the URL")
		require.Contains(t, string(r.Body), `"systemInstruction":{"parts":[{"text":"Be brief."}]}`)
		if stream {
			require.Equal(t, "/v1beta/models/gemini-2.5-flash:streamGenerateContent", r.Path)
			require.Equal(t, "alt=sse", r.Query)
		} else {
			require.Equal(t, "/v1beta/models/gemini-2.5-flash:generateContent", r.Path)
		}
	},
}

// TestSuite runs every behaviour against every adapter (STYLE.md §10).
func TestSuite(t *testing.T) {
	t.Parallel()
	for _, tc := range suiteCases() {
		for _, kind := range kinds {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				c, ok := tc.cells[kind]
				require.True(t, ok, "case %q has no cell for %s: add one, or a skip with its reason", tc.name, kind)
				if c.skip != "" {
					t.Skip(c.skip)
				}
				cfg := provider.Config{Name: "fake-" + kind, Kind: kind, Timeout: cmpOr(tc.timeout, 5*time.Second),
					StreamIdleTimeout: tc.idle, APIKeyEnv: keyEnv, Sim: c.sim, Headers: map[string]string{"X-Jetpool-Test": tc.name}}
				var srv *providertest.Server
				if kind != provider.KindSim {
					srv = providertest.NewServer(t, c.serve)
					base := providertest.Config(kind, srv)
					cfg.BaseURL = base.BaseURL
				}
				p := providertest.New(t, cfg)
				require.Equal(t, kind, p.Kind())
				require.Equal(t, cfg.Name, p.Name())

				var (
					mu  sync.Mutex
					got strings.Builder
				)
				req := provider.Request{Model: models[kind], System: "Be brief.", Stream: tc.stream, RecordID: "rec-1", Params: c.params,
					Messages: []provider.Message{{Role: "user", Content: prompt}},
					OnDelta: func(s string) {
						mu.Lock()
						defer mu.Unlock()
						got.WriteString(s)
					}}
				if tc.edit != nil {
					tc.edit(&req)
				}
				start := time.Now()
				resp, err := p.Call(context.Background(), req)
				elapsed := time.Since(start)

				if c.want.deltas != nil {
					require.Equal(t, *c.want.deltas, got.String(), "OnDelta")
				}
				if c.want.bounded != nil {
					// The client stopped reading at the cap: what the server got
					// out is the cap plus socket buffers, not the gigabyte it offered.
					require.Less(t, c.want.bounded.Load(), int64(provider.MaxBodyBytes+16<<20))
				}
				if tc.timeout > 0 {
					require.Less(t, elapsed, tc.timeout+5*time.Second, "the timeout must end the call")
				}
				if c.want.err == nil {
					require.NoError(t, err)
					text := cmpOr(c.want.text, answer)
					if c.want.noText {
						text = ""
					}
					require.Equal(t, text, resp.Text)
					require.Equal(t, cmpOr(c.want.finish, "stop"), resp.FinishReason)
					require.Equal(t, cmpOr(c.want.finishRaw, rawStop[kind]), resp.FinishReasonRaw, "the provider's own word")
					require.NotEmpty(t, resp.Model)
					require.Positive(t, resp.Latency, "the call's latency")
					wantUsage := cmpOr(c.want.usage, provider.Usage{InputTokens: 12, OutputTokens: 5})
					require.Equal(t, wantUsage, resp.Usage)
					if c.want.toolCalls != nil {
						require.Equal(t, c.want.toolCalls, resp.ToolCalls)
					}
					if tc.stream {
						require.Equal(t, text, got.String(), "OnDelta must see the whole text")
					}
					if srv != nil {
						reqs := srv.Requests()
						require.Len(t, reqs, 1)
						require.Equal(t, tc.name, reqs[0].Header.Get("X-Jetpool-Test"), "cfg.Headers go on every request")
						wireChecks[kind](t, reqs[0], tc.stream)
					}
					return
				}
				requireError(t, err, *c.want.err, cfg.Name, models[kind])
			})
		}
	}
}

// requireError checks a returned error against w, and that it is a complete,
// key-free *retry.Error.
func requireError(t *testing.T, err error, w wantErr, name, model string) {
	t.Helper()
	require.Error(t, err)
	requireNoKey(t, err)
	var e *retry.Error
	require.True(t, errors.As(err, &e), "want a *retry.Error, got %T: %v", err, err)
	require.Equal(t, w.class, e.Class, "class of %v", err)
	require.NotEmpty(t, e.TypeName)
	if w.typeName != "" {
		require.Equal(t, w.typeName, e.TypeName)
	}
	require.Equal(t, name, e.Provider)
	require.Equal(t, model, e.Model)
	require.Equal(t, w.status, e.Status, "status")
	if w.ptype != "" {
		require.Equal(t, w.ptype, e.ProviderType)
	}
	if w.pcode != "" {
		require.Equal(t, w.pcode, e.ProviderCode)
	}
	if w.emptyMsg {
		require.Empty(t, e.Message, "a dropped stream has an empty message (docs/design.md §3)")
		require.Equal(t, e.TypeName, err.Error())
	} else {
		require.NotEmpty(t, e.Message)
		require.Equal(t, e.TypeName+": "+e.Message, err.Error())
		require.LessOrEqual(t, len(e.Message), 2*provider.MaxMessageLen)
	}
	require.Contains(t, e.Message, w.msg)
	// What the layers do with it: the session layer retries the transient
	// classes only; neither layer retries a permanent one (a body over the
	// cap is never downloaded again).
	require.Equal(t, e.Class.Transient(), retry.Retryable(e), "session retry of %s", e.Class)
	if e.Class.Permanent() {
		d := retry.Policy{Enabled: true}.Decide(retry.Outcome{Err: e}, 1)
		require.Equal(t, retry.VerdictDeadLetter, d.Verdict, "a permanent class is dead-lettered at once")
	}
	require.Equal(t, w.retryAfter, e.RetryAfter, "RetryAfter")
	require.InDelta(t, w.reset, e.Reset, float64(resetSlack), "Reset")
	// What the retry layers will see.
	require.Equal(t, e, retry.AsError(err))
}

// requireNoKey fails if the sentinel key appears in err, its wrapped errors or
// any field of it.
func requireNoKey(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	require.NotContains(t, err.Error(), sentinelKey)
	require.NotContains(t, fmt.Sprintf("%+v %#v", err, err), sentinelKey)
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		requireNoKey(t, u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			requireNoKey(t, e)
		}
	}
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
