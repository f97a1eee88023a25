package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// timeoutError is what net/http returns for "timeout awaiting response
// headers" and Client.Timeout: a net.Error whose Timeout() is true.
type timeoutError struct{ msg string }

func (e timeoutError) Error() string   { return e.msg }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// urlErr wraps err as net/http's client does.
func urlErr(err error) error {
	return &url.Error{Op: "Post", URL: "https://api.openai.com/v1/chat/completions", Err: err}
}

func truncatedJSON() error {
	var v map[string]any
	return json.Unmarshal([]byte(`{"error": {"message": "Rate`), &v)
}

// classifyCases are real error shapes, as the providers send them.
var classifyCases = []struct {
	name string
	err  *Error
	want Class
}{
	// --- OpenAI ---
	{"openai 429 RPM", &Error{Status: 429, ProviderType: "requests", ProviderCode: "rate_limit_exceeded",
		Message: "Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/rate-limits to learn more."}, ClassRateLimit},
	{"openai 429 TPM", &Error{Status: 429, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 1.2s."}, ClassRateLimit},
	{"openai 429 insufficient_quota is permanent", &Error{Status: 429, ProviderType: "insufficient_quota", ProviderCode: "insufficient_quota",
		Message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."}, ClassAuth},
	{"openai 429 code insufficient_quota, type invalid_request_error", &Error{Status: 429, ProviderType: "invalid_request_error", ProviderCode: "insufficient_quota",
		Message: "You exceeded your current quota."}, ClassAuth},
	{"openai 401 invalid_api_key", &Error{Status: 401, ProviderType: "invalid_request_error", ProviderCode: "invalid_api_key",
		Message: "Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys."}, ClassAuth},
	{"openai 403 region", &Error{Status: 403, ProviderType: "request_forbidden", ProviderCode: "unsupported_country_region_territory",
		Message: "Country, region, or territory not supported"}, ClassAuth},
	{"openai 400 context_length_exceeded", &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "context_length_exceeded",
		Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130517 tokens. Please reduce the length of the messages."}, ClassContextOverflow},
	{"openai responses context window", &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "context_length_exceeded",
		Message: "Your input exceeds the context window of this model. Please adjust your input and try again."}, ClassContextOverflow},
	{"openai max_tokens too large is a parameter error", &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000."}, ClassInvalidRequest},
	{"openai 404 model_not_found", &Error{Status: 404, ProviderType: "invalid_request_error", ProviderCode: "model_not_found",
		Message: "The model `gpt-5-turbo` does not exist or you do not have access to it."}, ClassInvalidRequest},
	{"openai 500 server_error", &Error{Status: 500, ProviderType: "server_error",
		Message: "The server had an error while processing your request. Sorry about that!"}, ClassServer},
	{"openai 503 engine overloaded", &Error{Status: 503, ProviderType: "server_error",
		Message: "The engine is currently overloaded, please try again later"}, ClassServer},
	{"openai 400 with code server_error is not server", &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "server_error",
		Message: "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760."}, ClassInvalidRequest},
	{"openai 400 with code containing server_error", &Error{Status: 400, ProviderCode: "upstream_server_error_in_params",
		Message: "Invalid value for 'tool_choice'."}, ClassInvalidRequest},
	{"openai 400 unsupported image", &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "invalid_image_format",
		Message: "You uploaded an unsupported image. Please make sure your image has of one the following formats: ['png', 'jpeg', 'gif', 'webp']."}, ClassInvalidRequest},
	{"openai 500 invalid image: marker beats 5xx", &Error{Status: 500, ProviderType: "server_error",
		Message: "Invalid image data."}, ClassInvalidRequest},
	{"openai 409 conflict", &Error{Status: 409, Message: "Conflict"}, ClassServer},

	// --- Anthropic ---
	{"anthropic 429 rate_limit_error", &Error{Status: 429, ProviderType: "rate_limit_error",
		Message: "Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}, ClassRateLimit},
	{"anthropic 429 typed invalid_request_error is still rate_limit", &Error{Status: 429, ProviderType: "invalid_request_error",
		Message: "Too many requests"}, ClassRateLimit},
	{"anthropic 529 overloaded", &Error{Status: 529, ProviderType: "overloaded_error", Message: "Overloaded"}, ClassServer},
	{"anthropic overloaded inside a 200 stream", &Error{ProviderType: "overloaded_error", Message: "Overloaded"}, ClassServer},
	{"anthropic api_error inside a stream", &Error{ProviderType: "api_error", Message: "Internal server error"}, ClassServer},
	{"anthropic 500 api_error", &Error{Status: 500, ProviderType: "api_error", Message: "Internal server error"}, ClassServer},
	{"anthropic 401", &Error{Status: 401, ProviderType: "authentication_error", Message: "invalid x-api-key"}, ClassAuth},
	{"anthropic authentication_error without status", &Error{ProviderType: "authentication_error", Message: "invalid x-api-key"}, ClassAuth},
	{"anthropic 403", &Error{Status: 403, ProviderType: "permission_error",
		Message: "Your API key does not have permission to use the specified resource."}, ClassAuth},
	{"anthropic prompt is too long", &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "prompt is too long: 208432 tokens > 200000 maximum"}, ClassContextOverflow},
	{"anthropic max_tokens > limit is a parameter error", &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "max_tokens: 10000 > 4096, which is the maximum allowed number of output tokens for claude-3-haiku-20240307"}, ClassInvalidRequest},
	{"anthropic input + max_tokens exceed context limit", &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}, ClassContextOverflow},
	{"anthropic credit balance", &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}, ClassAuth},
	{"anthropic 404 model", &Error{Status: 404, ProviderType: "not_found_error", Message: "model: claude-3-opus-2024"}, ClassInvalidRequest},
	{"anthropic 413", &Error{Status: 413, ProviderType: "request_too_large",
		Message: "Request exceeds the maximum allowed number of bytes."}, ClassInvalidRequest},
	{"anthropic image data", &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "messages.0.content.1.image.source.base64: The image data is not valid base64."}, ClassInvalidRequest},

	// --- Gemini ---
	{"gemini 429 quota (same words as OpenAI billing) is a rate limit", &Error{Status: 429, ProviderType: "RESOURCE_EXHAUSTED",
		Message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."}, ClassRateLimit},
	{"gemini 429 resource exhausted", &Error{Status: 429, ProviderType: "RESOURCE_EXHAUSTED",
		Message: "Resource has been exhausted (e.g. check quota)."}, ClassRateLimit},
	{"gemini 503 overloaded", &Error{Status: 503, ProviderType: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."}, ClassServer},
	{"gemini 500 internal", &Error{Status: 500, ProviderType: "INTERNAL",
		Message: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"}, ClassServer},
	{"gemini 504 deadline", &Error{Status: 504, ProviderType: "DEADLINE_EXCEEDED",
		Message: "Deadline expired before operation could complete."}, ClassServer},
	{"gemini 400 API_KEY_INVALID", &Error{Status: 400, ProviderType: "INVALID_ARGUMENT", ProviderCode: "API_KEY_INVALID",
		Message: "API key not valid. Please pass a valid API key."}, ClassAuth},
	{"gemini 403 PERMISSION_DENIED", &Error{Status: 403, ProviderType: "PERMISSION_DENIED",
		Message: "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."}, ClassAuth},
	{"gemini 401 UNAUTHENTICATED", &Error{Status: 401, ProviderType: "UNAUTHENTICATED",
		Message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."}, ClassAuth},
	{"gemini input token count", &Error{Status: 400, ProviderType: "INVALID_ARGUMENT",
		Message: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}, ClassContextOverflow},
	{"gemini 400 FAILED_PRECONDITION", &Error{Status: 400, ProviderType: "FAILED_PRECONDITION",
		Message: "User location is not supported for the API use."}, ClassInvalidRequest},
	{"gemini 400 INVALID_ARGUMENT", &Error{Status: 400, ProviderType: "INVALID_ARGUMENT",
		Message: "Invalid JSON payload received. Unknown name \"temprature\" at 'generation_config': Cannot find field."}, ClassInvalidRequest},
	{"gemini 404 NOT_FOUND", &Error{Status: 404, ProviderType: "NOT_FOUND",
		Message: "models/gemini-9-pro is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."}, ClassInvalidRequest},
	{"gemini UNAVAILABLE in a stream", &Error{ProviderType: "UNAVAILABLE", Message: "The service is currently unavailable."}, ClassServer},
	{"gemini RESOURCE_EXHAUSTED in a stream", &Error{ProviderType: "RESOURCE_EXHAUSTED", Message: "Quota exceeded for quota metric 'Generate Content API requests per minute'"}, ClassRateLimit},
	{"gemini DEADLINE_EXCEEDED in a stream", &Error{ProviderType: "DEADLINE_EXCEEDED", Message: "Deadline expired before operation could complete."}, ClassServer},
	{"gemini INTERNAL in a stream", &Error{ProviderType: "INTERNAL", Message: "Internal error encountered."}, ClassServer},

	// --- Groq ---
	{"groq 498 flex capacity", &Error{Status: 498, ProviderCode: "capacity_exceeded", Message: "Flex tier capacity exceeded. This is a known issue and we are working on it."}, ClassRateLimit},
	{"groq 429 TPM", &Error{Status: 429, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 11500, Requested 900. Please try again in 2s."}, ClassRateLimit},
	{"groq 413 request larger than the TPM limit", &Error{Status: 413, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Request too large for model `llama3-70b-8192` in organization `org_01` on tokens per minute (TPM): Limit 6000, Requested 7000, please reduce your message size and try again."}, ClassInvalidRequest},
	{"groq context_length_exceeded", &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "context_length_exceeded",
		Message: "Please reduce the length of the messages or completion."}, ClassContextOverflow},
	{"groq 401", &Error{Status: 401, ProviderType: "invalid_request_error", ProviderCode: "invalid_api_key", Message: "Invalid API Key"}, ClassAuth},
	{"groq 503", &Error{Status: 503, Message: "Service Unavailable"}, ClassServer},

	// --- Ollama, llama.cpp, vLLM, Mistral, Cohere, OpenRouter, proxies ---
	{"ollama 404 model", &Error{Status: 404, Message: `model "llama9" not found, try pulling it first`}, ClassInvalidRequest},
	{"ollama 500 context length wins over 500", &Error{Status: 500, Message: "input length exceeds the context length"}, ClassContextOverflow},
	{"ollama 500 runner died", &Error{Status: 500, Message: "llama runner process has terminated: signal: killed"}, ClassServer},
	{"llama.cpp 500 context size", &Error{Status: 500, ProviderType: "server_error", Message: "Context size has been exceeded."}, ClassContextOverflow},
	{"llama.cpp exceed_context_size_error", &Error{Status: 400, ProviderType: "exceed_context_size_error",
		Message: "the request exceeds the available context size. try increasing the context size or enable context shift"}, ClassContextOverflow},
	{"llama.cpp exceed_context_size_error as 500", &Error{Status: 500, ProviderType: "exceed_context_size_error",
		Message: "request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it"}, ClassContextOverflow},
	{"llama.cpp 503 loading", &Error{Status: 503, ProviderType: "unavailable_error", Message: "Loading model"}, ClassServer},
	{"llama-cpp-python context window", &Error{Status: 400, Message: "Requested tokens (2285) exceed context window of 2048"}, ClassContextOverflow},
	{"vllm maximum context length", &Error{Status: 400, ProviderType: "BadRequestError",
		Message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."}, ClassContextOverflow},
	{"vllm max_tokens too large is a parameter error", &Error{Status: 400, ProviderType: "BadRequestError",
		Message: "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096 tokens and your request has 100 input tokens (5000 > 4096 - 100)."}, ClassInvalidRequest},
	{"vllm 404 model", &Error{Status: 404, ProviderType: "NotFoundError", Message: "The model `foo` does not exist."}, ClassInvalidRequest},
	{"mistral context", &Error{Status: 400, ProviderType: "invalid_request_message_order",
		Message: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"}, ClassContextOverflow},
	{"cohere too many tokens in the prompt", &Error{Status: 400,
		Message: "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 4500. Try using a shorter prompt, or enabling prompt truncating."}, ClassContextOverflow},
	{"bedrock input is too long", &Error{Status: 400, TypeName: "ValidationException", Message: "Input is too long for requested model."}, ClassContextOverflow},
	{"openrouter 402 credits", &Error{Status: 402,
		Message: "This request requires more credits, or fewer max_tokens. You requested up to 4096 tokens, but can only afford 1000."}, ClassAuth},
	{"cloudflare 520", &Error{Status: 520, Message: "error code: 520"}, ClassServer},
	{"nginx 502 html", &Error{Status: 502, Message: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"}, ClassServer},
	{"408", &Error{Status: 408, Message: "Request Timeout"}, ClassNetwork},

	// --- Go: net/http, net, syscall, io, tls, x509, http2 ---
	{"dial refused", &Error{Err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscallErr("connect", syscall.ECONNREFUSED)}),
		Message: `Post "https://api.openai.com/v1/chat/completions": dial tcp 127.0.0.1:443: connect: connection refused`}, ClassNetwork},
	{"dns no such host", &Error{Err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.opnai.com", IsNotFound: true}})}, ClassNetwork},
	{"connection reset", &Error{Err: fmt.Errorf("read tcp 10.0.0.2:51234->104.18.6.192:443: %w", syscall.ECONNRESET)}, ClassNetwork},
	{"broken pipe", &Error{Err: fmt.Errorf("write: %w", syscall.EPIPE)}, ClassNetwork},
	{"unexpected EOF", &Error{Err: io.ErrUnexpectedEOF, Message: "unexpected EOF"}, ClassNetwork},
	{"EOF", &Error{Err: urlErr(io.EOF), Message: `Post "https://api.openai.com/v1/chat/completions": EOF`}, ClassNetwork},
	{"client deadline", &Error{Err: urlErr(context.DeadlineExceeded)}, ClassNetwork},
	{"context canceled", &Error{Err: context.Canceled}, ClassNetwork},
	{"timeout awaiting headers", &Error{Err: urlErr(timeoutError{"net/http: timeout awaiting response headers"})}, ClassNetwork},
	{"tls record header", &Error{Err: urlErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})}, ClassNetwork},
	{"x509 unknown authority", &Error{Err: urlErr(x509.UnknownAuthorityError{})}, ClassNetwork},
	{"x509 hostname", &Error{Err: urlErr(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "api.openai.com"})}, ClassNetwork},
	{"http2 GOAWAY", &Error{Err: errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=1999, ErrCode=NO_ERROR, debug=""`)}, ClassNetwork},
	{"http2 stream error", &Error{Err: errors.New("stream error: stream ID 3; INTERNAL_ERROR; received from peer")}, ClassNetwork},
	{"server closed idle connection", &Error{Err: urlErr(errors.New("http: server closed idle connection"))}, ClassNetwork},
	{"truncated JSON body", &Error{Status: 200, Err: truncatedJSON(), Message: truncatedJSON().Error()}, ClassNetwork},
	{"wrapped *Error keeps its class", &Error{Err: fmt.Errorf("call: %w", &Error{Class: ClassAuth, Message: "x"}), Message: "call: x"}, ClassAuth},

	// --- message only (SDKs, Node, proxies) ---
	{"empty message is a dropped stream", &Error{}, ClassNetwork},
	{"empty message with a type name", &Error{TypeName: "StreamError"}, ClassNetwork},
	{"unknown message", &Error{Message: "the simulated model said something odd"}, ClassUnknown},
	{"fetch failed", &Error{TypeName: "TypeError", Message: "fetch failed"}, ClassNetwork},
	{"other side closed", &Error{TypeName: "SocketError", Message: "other side closed"}, ClassNetwork},
	{"terminated", &Error{TypeName: "TypeError", Message: "terminated"}, ClassNetwork},
	{"envoy reset before headers", &Error{Message: "upstream connect error or disconnect/reset before headers. reset reason: connection termination"}, ClassNetwork},
	{"too many requests text", &Error{Message: "429 Too Many Requests"}, ClassRateLimit},
	{"service unavailable text", &Error{Message: "Service Unavailable"}, ClassServer},
	{"connection reset text", &Error{Message: "read: connection reset by peer"}, ClassNetwork},
	{"unexpected end of JSON input text", &Error{Message: "unexpected end of JSON input"}, ClassNetwork},
	{"SDK type name RateLimitError", &Error{TypeName: "RateLimitError", Message: "Error code: 429"}, ClassRateLimit},
	{"SDK type name APIConnectionError", &Error{TypeName: "APIConnectionError", Message: "Connection error."}, ClassNetwork},
	{"login expired", &Error{Message: "Login expired, please sign in again"}, ClassAuth},
	{"login failed", &Error{Message: "login failed for user 'svc'"}, ClassAuth},
	{"re-auth", &Error{Message: "token revoked; re-authenticate with `jetpool login`"}, ClassAuth},
	{"unauthorized text", &Error{Message: "Unauthorized"}, ClassAuth},
	{"invalid api key text", &Error{Message: "Invalid API key"}, ClassAuth},
	{"not a valid image", &Error{Message: "The file is not a valid image"}, ClassInvalidRequest},
	{"marker beats a transient pattern", &Error{Message: "connection closed: unauthorized"}, ClassAuth},
	{"unknown model text", &Error{Message: "unknown model 'gpt-9'"}, ClassInvalidRequest},
	{"too many tokens per minute is a rate limit, not overflow", &Error{Message: "Too many tokens per minute, please slow down"}, ClassRateLimit},
	{"prompt has too many tokens", &Error{Message: "Your prompt has too many tokens for this model"}, ClassContextOverflow},
	{"insufficient_quota as text", &Error{Message: "insufficient_quota"}, ClassAuth},
	{"accurate limits is not a rate limit", &Error{Message: "could not compute accurate limits"}, ClassUnknown},
	{"azure token rate limit", &Error{Message: "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 7 seconds."}, ClassRateLimit},
}

func TestClassify(t *testing.T) {
	t.Parallel()
	require.GreaterOrEqual(t, len(classifyCases), 60)
	for _, tc := range classifyCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Classify(tc.err), "%s", tc.err.Error())
		})
	}
}

func TestClassifyNil(t *testing.T) {
	t.Parallel()
	require.Equal(t, ClassNone, Classify(nil))
}

func TestAsError(t *testing.T) {
	t.Parallel()

	require.Nil(t, AsError(nil))

	e := AsError(urlErr(context.DeadlineExceeded))
	require.Equal(t, ClassNetwork, e.Class)
	require.Equal(t, "TimeoutError", e.TypeName)
	require.Equal(t, `TimeoutError: Post "https://api.openai.com/v1/chat/completions": context deadline exceeded`, e.Error())
	require.ErrorIs(t, e, context.DeadlineExceeded)

	require.Equal(t, "DNSError", AsError(&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}).TypeName)
	require.Equal(t, "TLSError", AsError(urlErr(x509.UnknownAuthorityError{})).TypeName)
	require.Equal(t, "CanceledError", AsError(context.Canceled).TypeName)
	require.Equal(t, "NetworkError", AsError(fmt.Errorf("read: %w", syscall.ECONNRESET)).TypeName)
	require.Equal(t, "Error", AsError(errors.New("something odd")).TypeName)
	require.Equal(t, ClassUnknown, AsError(errors.New("something odd")).Class)

	// An *Error without a class is classified on a copy; the original stays untouched.
	orig := &Error{Status: 429}
	got := AsError(fmt.Errorf("wrapped: %w", orig))
	require.Equal(t, ClassRateLimit, got.Class)
	require.Equal(t, ClassNone, orig.Class)

	// An *Error with a class is returned as it is.
	set := &Error{Class: ClassServer}
	require.Same(t, set, AsError(set))
}

func TestRedact(t *testing.T) {
	t.Parallel()
	e := AsError(urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscallErr("connect", syscall.ECONNREFUSED)}))
	e2 := AsError(&url.Error{Op: "Post", URL: "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent?alt=sse&key=AIzaSyA1234567890abcdefghijklmnopqrstuv", Err: io.EOF})
	require.NotContains(t, e2.Message, "AIza")
	require.Equal(t, `NetworkError: Post "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent?alt=sse&key=REDACTED": EOF`, e2.Error())
	require.Contains(t, e.Message, "connection refused")
	require.Equal(t, "Authorization: Bearer REDACTED", Redact("Authorization: Bearer sk-abcdefghijklmnop"))
	require.Equal(t, "key REDACTED leaked", Redact("key sk-proj-abcdefghijklmnopqrstuvwxyz leaked"))
	require.Equal(t, "Incorrect API key provided: sk-proj-****abcd.", Redact("Incorrect API key provided: sk-proj-****abcd."))
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{" 2 ", 2 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{"-5", 0, true},
		{"Sat, 01 Mar 2025 12:01:30 GMT", 90 * time.Second, true},
		{"Saturday, 01-Mar-25 12:00:10 GMT", 10 * time.Second, true},
		{"Sat Mar  1 12:00:05 2025", 5 * time.Second, true},
		{"Sat, 01 Mar 2025 11:59:00 GMT", 0, true}, // in the past
		{"9999999999", 24 * time.Hour, true},       // clamped
		{"", 0, false},
		{"soon", 0, false},
	} {
		d, ok := ParseRetryAfter(tc.in, now)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, d, tc.in)
	}
}

func TestParseRetryAfterMS(t *testing.T) {
	t.Parallel()
	d, ok := ParseRetryAfterMS("1500")
	require.True(t, ok)
	require.Equal(t, 1500*time.Millisecond, d)
	d, ok = ParseRetryAfterMS("20.5")
	require.True(t, ok)
	require.Equal(t, 20500*time.Microsecond, d)
	d, ok = ParseRetryAfterMS("-1")
	require.True(t, ok)
	require.Zero(t, d)
	_, ok = ParseRetryAfterMS("")
	require.False(t, ok)
}

func TestParseReset(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1s", time.Second, true},             // x-ratelimit-reset-requests
		{"6m0s", 6 * time.Minute, true},       // x-ratelimit-reset-tokens
		{"20ms", 20 * time.Millisecond, true}, // OpenAI
		{"1m30.5s", 90*time.Second + 500*time.Millisecond, true},
		{"2m59.56s", 2*time.Minute + 59560*time.Millisecond, true}, // Groq
		{"2025-03-01T12:00:42Z", 42 * time.Second, true},           // anthropic-ratelimit-tokens-reset
		{"2025-03-01T13:00:00.5+01:00", 500 * time.Millisecond, true},
		{"2025-03-01T11:00:00Z", 0, true}, // in the past
		{"7", 7 * time.Second, true},
		{"1740830460", time.Minute, true}, // Unix time
		{"", 0, false},
		{"tomorrow", 0, false},
	} {
		d, ok := ParseReset(tc.in, now)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, d, tc.in)
	}
}

// syscallErr builds what the net package wraps a failed syscall in.
func syscallErr(call string, err error) error { return fmt.Errorf("%s: %w", call, err) }
