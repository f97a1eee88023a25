package retry

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// corpusCase is one real error: the structured error an adapter builds from
// it (status, provider type and code, message, the Go error; a class when
// the adapter sets one), the class the retry layers act on (classOf), and the class its message alone must get when it reaches us as
// bare text — an error event inside a 200 stream, a gateway or an SDK
// wrapper that passed the provider's error on as a string.
type corpusCase struct {
	src  string // who sends it; "rule" marks a synthetic case that pins a precedence rule
	name string
	err  *Error
	want Class
	// text is the class of the message alone when it is not want; why says
	// why the words cannot tell what the structure does.
	text Class
	why  string
}

// bare is e as a gateway would pass it on: the message (or the Go error's
// text) and nothing else.
func bare(e *Error) *Error {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = Redact(e.Err.Error())
	}
	return &Error{Message: msg}
}

// corpus: real bodies and texts, from the providers' docs and SDKs, and from
// issues where users quoted what they got. docs/retry.md reports on it
// (go test ./retry -run TestCorpus -v).
var corpus = []corpusCase{
	// --- OpenAI ---
	{src: "openai", name: "429 RPM", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "requests", ProviderCode: "rate_limit_exceeded",
		Message: "Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 120ms. Visit https://platform.openai.com/account/rate-limits to learn more."}},
	{src: "openai", name: "429 TPM", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29000, Requested 1500. Please try again in 1.2s."}},
	{src: "openai", name: "429 insufficient_quota is billing: permanent", want: ClassAuth, err: &Error{Status: 429, ProviderType: "insufficient_quota", ProviderCode: "insufficient_quota",
		Message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors."},
		text: ClassRateLimit, why: "the words are Gemini's per-minute quota 429's; only the code says billing"},
	{src: "openai", name: "429 code insufficient_quota, type invalid_request_error", want: ClassAuth, err: &Error{Status: 429, ProviderType: "invalid_request_error", ProviderCode: "insufficient_quota",
		Message: "You exceeded your current quota."},
		text: ClassRateLimit, why: "as above"},
	// The openai adapter classes this one itself (provider.openAIKnown).
	{src: "openai", name: "429 request larger than the TPM limit", want: ClassInvalidRequest, err: &Error{Class: ClassInvalidRequest, Status: 429, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Request too large for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Requested 50000. The input or output tokens must be reduced in order to run successfully. Visit https://platform.openai.com/account/rate-limits to learn more."}},
	{src: "openai", name: "401 invalid_api_key", want: ClassAuth, err: &Error{Status: 401, ProviderType: "invalid_request_error", ProviderCode: "invalid_api_key",
		Message: "Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys."}},
	{src: "openai", name: "401 no key", want: ClassAuth, err: &Error{Status: 401, ProviderType: "invalid_request_error",
		Message: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or as the password field (with blank username) if you're accessing the API from your browser and are prompted for a username and password. You can obtain an API key from https://platform.openai.com/account/api-keys."}},
	{src: "openai", name: "403 region", want: ClassAuth, err: &Error{Status: 403, ProviderType: "request_forbidden", ProviderCode: "unsupported_country_region_territory",
		Message: "Country, region, or territory not supported"}},
	{src: "openai", name: "400 context_length_exceeded", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "context_length_exceeded",
		Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130517 tokens. Please reduce the length of the messages."}},
	{src: "openai", name: "responses context window", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "context_length_exceeded",
		Message: "Your input exceeds the context window of this model. Please adjust your input and try again."}},
	{src: "openai", name: "max_tokens too large is a parameter error", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "max_tokens is too large: 100000. This model supports at most 16384 completion tokens, whereas you provided 100000."}},
	{src: "openai", name: "404 model_not_found", want: ClassInvalidRequest, err: &Error{Status: 404, ProviderType: "invalid_request_error", ProviderCode: "model_not_found",
		Message: "The model `gpt-5-turbo` does not exist or you do not have access to it."}},
	{src: "openai", name: "400 temperature", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "decimal_above_max_value",
		Message: "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 5 instead."}},
	{src: "openai", name: "500 server_error", want: ClassServer, err: &Error{Status: 500, ProviderType: "server_error",
		Message: "The server had an error while processing your request. Sorry about that!"}},
	{src: "openai", name: "503 engine overloaded", want: ClassServer, err: &Error{Status: 503, ProviderType: "server_error",
		Message: "The engine is currently overloaded, please try again later"}},
	{src: "openai", name: "503 model overloaded", want: ClassServer, err: &Error{Status: 503, ProviderType: "server_error",
		Message: "That model is currently overloaded with other requests. You can retry your request, or contact us through our help center at help.openai.com if the error persists. (Please include the request ID req_abc in your message.)"}},
	{src: "openai", name: "server_error inside a 200 stream", want: ClassServer, err: &Error{ProviderType: "server_error",
		Message: "The server had an error processing your request. Sorry about that! You can retry your request, or contact us through our help center at help.openai.com if you keep seeing this error."}},
	{src: "openai", name: "400 whose code is server_error is not server", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "server_error",
		Message: "Invalid 'messages[1].content': string too long. Expected a string with maximum length 10485760."}},
	{src: "openai", name: "400 whose code contains server_error", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderCode: "upstream_server_error_in_params",
		Message: "Invalid value for 'tool_choice'."}},
	{src: "openai", name: "400 unsupported image", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "invalid_image_format",
		Message: "You uploaded an unsupported image. Please make sure your image has of one the following formats: ['png', 'jpeg', 'gif', 'webp']."}},
	{src: "openai", name: "500 invalid image: the marker beats 5xx", want: ClassInvalidRequest, err: &Error{Status: 500, ProviderType: "server_error",
		Message: "Invalid image data."}},
	{src: "openai", name: "409 conflict", want: ClassServer, err: &Error{Status: 409, Message: "Conflict"},
		text: ClassUnknown, why: "one word; the status alone says what to do"},
	{src: "openai", name: "batch enqueued token limit", want: ClassRateLimit, err: &Error{ProviderCode: "token_limit_exceeded",
		Message: "Enqueued token limit reached for gpt-4o in organization org-abc. Limit: 90,000 enqueued tokens. Please try again once some in_progress batches have been completed."}},
	{src: "openai", name: "python SDK str(e) of a 429", want: ClassRateLimit, err: &Error{
		Message: "Error code: 429 - {'error': {'message': 'Rate limit reached for gpt-4o in organization org-abc on requests per min (RPM): Limit 500, Used 500, Requested 1.', 'type': 'requests', 'param': None, 'code': 'rate_limit_exceeded'}}"}},
	{src: "openai", name: "python SDK str(e) of a 400 overflow", want: ClassContextOverflow, err: &Error{
		Message: "Error code: 400 - {'error': {'message': \"This model's maximum context length is 8192 tokens. However, your messages resulted in 9013 tokens. Please reduce the length of the messages.\", 'type': 'invalid_request_error', 'param': 'messages', 'code': 'context_length_exceeded'}}"}},
	{src: "openai", name: "node SDK: a status and no body", want: ClassServer, err: &Error{Status: 500, Message: "500 status code (no body)"}},
	{src: "openai", name: "node SDK: 429 with message", want: ClassRateLimit, err: &Error{
		Message: "429 Rate limit reached for gpt-4o-mini in organization org-abc on requests per min (RPM): Limit 3, Used 3, Requested 1."}},
	{src: "openai", name: "node SDK: 400 overflow, a count after the status", want: ClassContextOverflow, err: &Error{
		Message: "400 This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens. Please reduce the length of the messages."}},
	{src: "openai", name: "node SDK: connection error", want: ClassNetwork, err: &Error{TypeName: "APIConnectionError", Message: "Connection error."}},
	{src: "openai", name: "node SDK: timeout", want: ClassNetwork, err: &Error{TypeName: "APIConnectionTimeoutError", Message: "Request timed out."}},
	{src: "openai", name: "node SDK: aborted", want: ClassNetwork, err: &Error{TypeName: "APIUserAbortError", Message: "Request was aborted."}},

	// --- Anthropic ---
	{src: "anthropic", name: "429 rate_limit_error", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "rate_limit_error",
		Message: "Number of request tokens has exceeded your per-minute rate limit (https://docs.anthropic.com/en/api/rate-limits); see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later."}},
	{src: "anthropic", name: "429 typed invalid_request_error is still rate_limit", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "invalid_request_error",
		Message: "Too many requests"}},
	{src: "anthropic", name: "529 overloaded", want: ClassServer, err: &Error{Status: 529, ProviderType: "overloaded_error", Message: "Overloaded"}},
	{src: "anthropic", name: "overloaded inside a 200 stream", want: ClassServer, err: &Error{ProviderType: "overloaded_error", Message: "Overloaded"}},
	{src: "anthropic", name: "api_error inside a stream", want: ClassServer, err: &Error{ProviderType: "api_error", Message: "Internal server error"}},
	{src: "anthropic", name: "500 api_error", want: ClassServer, err: &Error{Status: 500, ProviderType: "api_error", Message: "Internal server error"}},
	{src: "anthropic", name: "401", want: ClassAuth, err: &Error{Status: 401, ProviderType: "authentication_error", Message: "invalid x-api-key"}},
	{src: "anthropic", name: "authentication_error without status", want: ClassAuth, err: &Error{ProviderType: "authentication_error", Message: "invalid x-api-key"}},
	{src: "anthropic", name: "403", want: ClassAuth, err: &Error{Status: 403, ProviderType: "permission_error",
		Message: "Your API key does not have permission to use the specified resource."}},
	{src: "anthropic", name: "prompt is too long", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "prompt is too long: 208432 tokens > 200000 maximum"}},
	{src: "anthropic", name: "max_tokens > limit is a parameter error", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "max_tokens: 10000 > 4096, which is the maximum allowed number of output tokens for claude-3-haiku-20240307"}},
	{src: "anthropic", name: "input + max_tokens exceed context limit", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}},
	{src: "anthropic", name: "credit balance", want: ClassAuth, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}},
	{src: "anthropic", name: "spend limit until a date", want: ClassAuth, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "You have reached your specified API usage limits. You will regain access on 2026-09-01 at 00:00 UTC."}},
	{src: "anthropic", name: "roles must alternate", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: `messages: roles must alternate between "user" and "assistant", but found multiple "user" roles in a row`}},
	{src: "anthropic", name: "404 model", want: ClassInvalidRequest, err: &Error{Status: 404, ProviderType: "not_found_error", Message: "model: claude-3-opus-2024"},
		text: ClassUnknown, why: "the message only names the model"},
	{src: "anthropic", name: "413", want: ClassInvalidRequest, err: &Error{Status: 413, ProviderType: "request_too_large",
		Message: "Request exceeds the maximum allowed number of bytes."}},
	{src: "anthropic", name: "image data", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error",
		Message: "messages.0.content.1.image.source.base64: The image data is not valid base64."}},
	{src: "anthropic", name: "python SDK str(e) of a 529", want: ClassServer, err: &Error{
		Message: "Error code: 529 - {'type': 'error', 'error': {'type': 'overloaded_error', 'message': 'Overloaded'}}"}},
	{src: "anthropic", name: "TypeScript SDK message of a 529", want: ClassServer, err: &Error{
		Message: `529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`}},
	{src: "anthropic", name: "a Go client's stream error", want: ClassServer, err: &Error{
		Message: `anthropic streaming error: POST "https://api.anthropic.com/v1/messages": 500 Internal Server Error`}},

	// --- Gemini ---
	{src: "gemini", name: "429 quota (OpenAI's billing words) is a rate limit", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "RESOURCE_EXHAUSTED",
		Message: "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."}},
	{src: "gemini", name: "429 resource exhausted", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "RESOURCE_EXHAUSTED",
		Message: "Resource has been exhausted (e.g. check quota)."}},
	{src: "gemini", name: "503 overloaded", want: ClassServer, err: &Error{Status: 503, ProviderType: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."}},
	{src: "gemini", name: "500 internal", want: ClassServer, err: &Error{Status: 500, ProviderType: "INTERNAL",
		Message: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"}},
	{src: "gemini", name: "504 deadline", want: ClassServer, err: &Error{Status: 504, ProviderType: "DEADLINE_EXCEEDED",
		Message: "Deadline expired before operation could complete."}},
	{src: "gemini", name: "400 API_KEY_INVALID", want: ClassAuth, err: &Error{Status: 400, ProviderType: "INVALID_ARGUMENT", ProviderCode: "API_KEY_INVALID",
		Message: "API key not valid. Please pass a valid API key."}},
	{src: "gemini", name: "400 expired key", want: ClassAuth, err: &Error{Status: 400, ProviderType: "INVALID_ARGUMENT", ProviderCode: "API_KEY_INVALID",
		Message: "API key expired. Please renew the API key."}},
	{src: "gemini", name: "403 PERMISSION_DENIED", want: ClassAuth, err: &Error{Status: 403, ProviderType: "PERMISSION_DENIED",
		Message: "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API."}},
	{src: "gemini", name: "401 UNAUTHENTICATED", want: ClassAuth, err: &Error{Status: 401, ProviderType: "UNAUTHENTICATED",
		Message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential."}},
	{src: "gemini", name: "input token count", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "INVALID_ARGUMENT",
		Message: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}},
	{src: "gemini", name: "400 FAILED_PRECONDITION", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "FAILED_PRECONDITION",
		Message: "User location is not supported for the API use."}},
	{src: "gemini", name: "400 INVALID_ARGUMENT", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "INVALID_ARGUMENT",
		Message: "Invalid JSON payload received. Unknown name \"temprature\" at 'generation_config': Cannot find field."}},
	{src: "gemini", name: "400 temperature out of range", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "INVALID_ARGUMENT",
		Message: "* GenerateContentRequest.generation_config.temperature: must be between 0 and 2\n"}},
	{src: "gemini", name: "404 NOT_FOUND", want: ClassInvalidRequest, err: &Error{Status: 404, ProviderType: "NOT_FOUND",
		Message: "models/gemini-9-pro is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods."}},
	{src: "gemini", name: "UNAVAILABLE in a stream", want: ClassServer, err: &Error{ProviderType: "UNAVAILABLE", Message: "The service is currently unavailable."}},
	{src: "gemini", name: "RESOURCE_EXHAUSTED in a stream", want: ClassRateLimit, err: &Error{ProviderType: "RESOURCE_EXHAUSTED", Message: "Quota exceeded for quota metric 'Generate Content API requests per minute'"}},
	{src: "gemini", name: "DEADLINE_EXCEEDED in a stream", want: ClassServer, err: &Error{ProviderType: "DEADLINE_EXCEEDED", Message: "Deadline expired before operation could complete."}},
	{src: "gemini", name: "INTERNAL in a stream", want: ClassServer, err: &Error{ProviderType: "INTERNAL", Message: "Internal error encountered."}},
	{src: "gemini", name: "google-genai SDK str(e) of a 503", want: ClassServer, err: &Error{
		Message: "503 UNAVAILABLE. {'error': {'code': 503, 'message': 'The model is overloaded. Please try again later.', 'status': 'UNAVAILABLE'}}"}},
	{src: "gemini", name: "google-genai SDK str(e) of a 429", want: ClassRateLimit, err: &Error{
		Message: "429 RESOURCE_EXHAUSTED. {'error': {'code': 429, 'message': 'Resource has been exhausted (e.g. check quota).', 'status': 'RESOURCE_EXHAUSTED'}}"}},

	// --- Groq ---
	{src: "groq", name: "498 flex capacity", want: ClassRateLimit, err: &Error{Status: 498, ProviderCode: "capacity_exceeded",
		Message: "Flex tier capacity exceeded. This is a known issue and we are working on it. Please try again later."}},
	{src: "groq", name: "429 TPM", want: ClassRateLimit, err: &Error{Status: 429, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Rate limit reached for model `llama-3.3-70b-versatile` in organization `org_01` service tier `on_demand` on tokens per minute (TPM): Limit 12000, Used 11500, Requested 900. Please try again in 2s."}},
	{src: "groq", name: "413 request larger than the TPM limit", want: ClassInvalidRequest, err: &Error{Status: 413, ProviderType: "tokens", ProviderCode: "rate_limit_exceeded",
		Message: "Request too large for model `llama3-70b-8192` in organization `org_01` on tokens per minute (TPM): Limit 6000, Requested 7000, please reduce your message size and try again."}},
	{src: "groq", name: "400 decommissioned model", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "invalid_request_error", ProviderCode: "model_decommissioned",
		Message: "The model `llama3-70b-8192` has been decommissioned and is no longer supported. Please refer to https://console.groq.com/docs/deprecations for a recommendation on which model to use instead."}},
	{src: "groq", name: "401 invalid_api_key", want: ClassAuth, err: &Error{Status: 401, ProviderType: "invalid_request_error", ProviderCode: "invalid_api_key",
		Message: "Invalid API Key"}},
	{src: "groq", name: "503", want: ClassServer, err: &Error{Status: 503, Message: "Service Unavailable"}},

	// --- vLLM ---
	{src: "vllm", name: "maximum context length", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "BadRequestError",
		Message: "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."}},
	{src: "vllm", name: "max_tokens too large is a parameter error", want: ClassInvalidRequest, err: &Error{Status: 400, ProviderType: "BadRequestError",
		Message: "'max_tokens' or 'max_completion_tokens' is too large: 5000. This model's maximum context length is 4096 tokens and your request has 100 input tokens (5000 > 4096 - 100)."}},
	{src: "vllm", name: "404 model", want: ClassInvalidRequest, err: &Error{Status: 404, ProviderType: "NotFoundError", Message: "The model `foo` does not exist."}},
	{src: "vllm", name: "500 engine dead", want: ClassServer, err: &Error{Status: 500, ProviderType: "InternalServerError",
		Message: "EngineCore encountered an issue. See stack trace (above) for the root cause."}},

	// --- Ollama ---
	{src: "ollama", name: "404 unknown model", want: ClassInvalidRequest, err: &Error{Status: 404, ProviderType: "api_error",
		Message: `model "llama9" not found, try pulling it first`}},
	{src: "ollama", name: "context overflow as a 500", want: ClassContextOverflow, err: &Error{Status: 500, ProviderType: "api_error",
		Message: "input length exceeds the context length"}},
	{src: "ollama", name: "503 queue full", want: ClassServer, err: &Error{Status: 503,
		Message: "server busy, please try again.  maximum pending requests exceeded"}},
	{src: "ollama", name: "499 request canceled", want: ClassNetwork, err: &Error{Status: 499, Message: "request canceled"}},
	{src: "ollama", name: "500 runner crashed", want: ClassServer, err: &Error{Status: 500,
		Message: "llama runner process has terminated: signal: killed"},
		text: ClassNetwork, why: "\"terminated\" reads as a dropped connection; both are transient"},
	{src: "ollama", name: "error inside a 200 stream", want: ClassNetwork, err: &Error{
		Message: "an error was encountered while running the model: unexpected EOF"}},

	// --- llama.cpp ---
	{src: "llama.cpp", name: "exceed_context_size_error", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "exceed_context_size_error",
		Message: "the request exceeds the available context size. try increasing the context size or enable context shift"}},
	{src: "llama.cpp", name: "exceed_context_size_error as 500", want: ClassContextOverflow, err: &Error{Status: 500, ProviderType: "exceed_context_size_error",
		Message: "request (4390 tokens) exceeds the available context size (4096 tokens), try increasing it"}},
	{src: "llama.cpp", name: "503 loading", want: ClassServer, err: &Error{Status: 503, ProviderType: "unavailable_error", Message: "Loading model"}},
	{src: "llama.cpp", name: "llama-cpp-python context window", want: ClassContextOverflow, err: &Error{Status: 400,
		Message: "Requested tokens (2285) exceed context window of 2048"}},

	// --- LiteLLM (SDK exceptions as text, and its proxy's error bodies) ---
	{src: "litellm", name: "RateLimitError", want: ClassRateLimit, err: &Error{
		Message: "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for gpt-4o in organization org-abc on tokens per min (TPM): Limit 30000, Used 29500, Requested 900. Please try again in 600ms."}},
	{src: "litellm", name: "InternalServerError from Anthropic", want: ClassServer, err: &Error{
		Message: "litellm.InternalServerError: AnthropicException - Overloaded. Handle with `litellm.InternalServerError`."}},
	{src: "litellm", name: "Timeout", want: ClassNetwork, err: &Error{Message: "litellm.Timeout: Connection timed out after 600.0 seconds."}},
	{src: "litellm", name: "APIConnectionError", want: ClassNetwork, err: &Error{
		Message: "litellm.APIConnectionError: OllamaException - [Errno 111] Connection refused"}},
	{src: "litellm", name: "ContextWindowExceededError", want: ClassContextOverflow, err: &Error{
		Message: "litellm.ContextWindowExceededError: litellm.BadRequestError: ContextWindowExceededError: OpenAIException - Error code: 400 - {'error': {'message': 'Input is too long.'}}"}},
	{src: "litellm", name: "AuthenticationError", want: ClassAuth, err: &Error{
		Message: "litellm.AuthenticationError: AuthenticationError: OpenAIException - Incorrect API key provided: sk-****. You can find your API key at https://platform.openai.com/account/api-keys."}},
	{src: "litellm", name: "proxy: Anthropic's spend limit as a BadRequestError, code \"400\"", want: ClassAuth, err: &Error{ProviderCode: "400",
		Message: `litellm.BadRequestError: AnthropicException - b'{"type":"error","error":{"type":"invalid_request_error","message":"You have reached your specified API usage limits. You will regain access on 2026-09-01 at 00:00 UTC."}}'. Received Model Group=claude-haiku-4-5`}},
	{src: "litellm", name: "proxy: router cooldown, code \"429\"", want: ClassRateLimit, err: &Error{ProviderType: "None", ProviderCode: "429",
		Message: "No deployments available for selected model, Try again in 60 seconds. Passed model=gpt-4o. pre-call-checks=False, cooldown_list=['f0264a4f']"}},
	{src: "litellm", name: "proxy: budget", want: ClassAuth, err: &Error{Status: 400, ProviderType: "budget_exceeded",
		Message: "Budget has been exceeded! Current cost: 10.0212, Max budget: 10.0"}},

	// --- OpenRouter ---
	{src: "openrouter", name: "402 credits", want: ClassAuth, err: &Error{Status: 402,
		Message: "This request requires more credits, or fewer max_tokens. You requested up to 4096 tokens, but can only afford 1000."}},
	{src: "openrouter", name: "402 insufficient credits", want: ClassAuth, err: &Error{Status: 402,
		Message: "Insufficient credits. Add more using https://openrouter.ai/settings/credits"}},
	{src: "openrouter", name: "429 free-model limit", want: ClassRateLimit, err: &Error{Status: 429,
		Message: "Rate limit exceeded: limit_rpd/google/gemini-2.0-flash-thinking-exp-01-21/54276bca-abd7-4aa6-a6b5-1b8f898f1395"}},
	{src: "openrouter", name: "upstream error inside a 200 stream", want: ClassServer, err: &Error{Status: 502, Message: "Provider returned error"},
		text: ClassUnknown, why: "the words are OpenRouter's for any upstream error; only the code says which"},
	{src: "openrouter", name: "404 no endpoint for the data policy", want: ClassInvalidRequest, err: &Error{Status: 404,
		Message: "No endpoints found matching your data policy (Free model publication). Configure: https://openrouter.ai/settings/privacy"}},
	{src: "openrouter", name: "Cloudflare's rate limit passed on raw", want: ClassRateLimit, err: &Error{Status: 429, Message: "error code: 1015"}},

	// --- AWS Bedrock (through its SDKs and wrappers) ---
	{src: "bedrock", name: "ThrottlingException, tokens", want: ClassRateLimit, err: &Error{Status: 429, TypeName: "ThrottlingException",
		Message: "Too many tokens, please wait before trying again."}},
	{src: "bedrock", name: "ThrottlingException, tokens per day", want: ClassRateLimit, err: &Error{
		Message: "An error occurred (ThrottlingException) when calling the Converse operation (reached max retries: 4): Too many tokens per day, please wait before trying again."}},
	{src: "bedrock", name: "ThrottlingException in a stream", want: ClassRateLimit, err: &Error{
		Message: "An error occurred (throttlingException) when calling the InvokeModelWithResponseStream operation: Too many requests, please wait before trying again. You have sent too many requests.  Wait before trying again."}},
	{src: "bedrock", name: "input is too long", want: ClassContextOverflow, err: &Error{Status: 400, TypeName: "ValidationException", Message: "Input is too long for requested model."}},
	{src: "bedrock", name: "on-demand throughput not supported", want: ClassInvalidRequest, err: &Error{Status: 400, TypeName: "ValidationException",
		Message: "Invocation of model ID anthropic.claude-sonnet-4-20250514-v1:0 with on-demand throughput isn’t supported. Retry your request with the ID or ARN of an inference profile that contains this model."},
		text: ClassUnknown, why: "the words name no class; the exception name does"},
	{src: "bedrock", name: "ServiceUnavailableException", want: ClassServer, err: &Error{Status: 503, TypeName: "ServiceUnavailableException",
		Message: "Bedrock is unable to process your request."}},

	// --- Mistral, Cohere, Azure ---
	{src: "mistral", name: "context", want: ClassContextOverflow, err: &Error{Status: 400, ProviderType: "invalid_request_message_order",
		Message: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"}},
	{src: "mistral", name: "service tier capacity", want: ClassRateLimit, err: &Error{Status: 429, Message: "Service tier capacity exceeded for this model."}},
	{src: "cohere", name: "too many tokens in the prompt", want: ClassContextOverflow, err: &Error{Status: 400,
		Message: "too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 4500. Try using a shorter prompt, or enabling prompt truncating."}},
	{src: "azure", name: "token rate limit", want: ClassRateLimit, err: &Error{Status: 429, ProviderCode: "429",
		Message: "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 7 seconds."}},
	{src: "azure", name: "content filter", want: ClassContentFilter, err: &Error{Status: 400, ProviderCode: "content_filter",
		Message: "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry."}},

	// --- gateways and proxies ---
	{src: "gateway", name: "Cloudflare 520", want: ClassServer, err: &Error{Status: 520, Message: "error code: 520"}},
	{src: "gateway", name: "Cloudflare 524", want: ClassServer, err: &Error{Status: 524, Message: "error code: 524"}},
	{src: "gateway", name: "nginx 502 page", want: ClassServer, err: &Error{Status: 502,
		Message: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center></body></html>"}},
	{src: "gateway", name: "408", want: ClassNetwork, err: &Error{Status: 408, Message: "Request Timeout"}},
	{src: "gateway", name: "envoy 503 reset before headers", want: ClassServer, err: &Error{Status: 503,
		Message: "upstream connect error or disconnect/reset before headers. reset reason: connection termination"},
		text: ClassNetwork, why: "the words describe the connection; both are transient"},
	{src: "gateway", name: "envoy 503 no healthy upstream", want: ClassServer, err: &Error{Status: 503, Message: "no healthy upstream"}},
	{src: "gateway", name: "envoy 504", want: ClassServer, err: &Error{Status: 504, Message: "upstream request timeout"},
		text: ClassNetwork, why: "a timeout in words; both are transient"},
	{src: "gateway", name: "a stream error event: Error 429", want: ClassRateLimit, err: &Error{Message: "Error 429"}},
	{src: "gateway", name: "a stream error event: error code 500", want: ClassServer, err: &Error{Message: "error code 500"}},
	{src: "gateway", name: "a stream error event: upstream returned 5xx", want: ClassServer, err: &Error{Message: "upstream returned 5xx"}},
	{src: "gateway", name: "a stream error event: request cancelled", want: ClassNetwork, err: &Error{Message: "request cancelled"}},
	{src: "gateway", name: "a stream error event: too many tokens", want: ClassRateLimit, err: &Error{Message: "Too many tokens, please wait before trying again"}},
	{src: "gateway", name: "a wrapper's word is not the upstream status", want: ClassInvalidRequest, err: &Error{
		Message: "INTERNAL_SERVER_ERROR: Bad request to Anthropic: Error code: 400 - {'message': 'messages.1.content.0: Invalid `signature` in `thinking` block'}"}},
	{src: "gateway", name: "a Rust wrapper's status in brackets", want: ClassRateLimit, err: &Error{
		Message: "OpenAI API error (429 Too Many Requests): No deployments available for selected model, Try again in 5 seconds."}},
	{src: "gateway", name: "unlisted 4xx: 418", want: ClassUnknown, err: &Error{Status: 418, Message: "I'm a teapot"}},
	{src: "gateway", name: "unlisted 4xx without a body", want: ClassUnknown, err: &Error{Status: 451, Message: "451 status code (no body)"}},
	{src: "gateway", name: "425 too early", want: ClassNetwork, err: &Error{Status: 425, Message: "Too Early"},
		text: ClassUnknown, why: "two words; the status alone says what to do"},
	{src: "gateway", name: "an unlisted 4xx whose words say overloaded", want: ClassServer, err: &Error{Status: 424, Message: "The model is overloaded, please retry"}},

	// --- Go: net/http, net, syscall, io, tls, x509, http2 ---
	{src: "go", name: "dial refused", want: ClassNetwork, err: &Error{Err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscallErr("connect", syscall.ECONNREFUSED)}),
		Message: `Post "https://api.openai.com/v1/chat/completions": dial tcp 127.0.0.1:443: connect: connection refused`}},
	{src: "go", name: "dns no such host", want: ClassNetwork, err: &Error{Err: urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "api.opnai.com", IsNotFound: true}})}},
	{src: "go", name: "connection reset", want: ClassNetwork, err: &Error{Err: fmt.Errorf("read tcp 10.0.0.2:51234->104.18.6.192:443: %w", syscall.ECONNRESET)}},
	{src: "go", name: "broken pipe", want: ClassNetwork, err: &Error{Err: fmt.Errorf("write: %w", syscall.EPIPE)}},
	{src: "go", name: "unexpected EOF", want: ClassNetwork, err: &Error{Err: io.ErrUnexpectedEOF, Message: "unexpected EOF"}},
	{src: "go", name: "EOF", want: ClassNetwork, err: &Error{Err: urlErr(io.EOF), Message: `Post "https://api.openai.com/v1/chat/completions": EOF`}},
	{src: "go", name: "client deadline", want: ClassNetwork, err: &Error{Err: urlErr(context.DeadlineExceeded)}},
	{src: "go", name: "Client.Timeout", want: ClassNetwork, err: &Error{Err: urlErr(timeoutError{"context deadline exceeded (Client.Timeout exceeded while awaiting headers)"})}},
	{src: "go", name: "context canceled", want: ClassNetwork, err: &Error{Err: context.Canceled}},
	{src: "go", name: "timeout awaiting headers", want: ClassNetwork, err: &Error{Err: urlErr(timeoutError{"net/http: timeout awaiting response headers"})}},
	{src: "go", name: "TLS handshake timeout", want: ClassNetwork, err: &Error{Err: urlErr(timeoutError{"net/http: TLS handshake timeout"})}},
	{src: "go", name: "tls record header", want: ClassNetwork, err: &Error{Err: urlErr(tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"})}},
	{src: "go", name: "x509 unknown authority", want: ClassNetwork, err: &Error{Err: urlErr(x509.UnknownAuthorityError{})}},
	{src: "go", name: "x509 hostname", want: ClassNetwork, err: &Error{Err: urlErr(x509.HostnameError{Certificate: &x509.Certificate{}, Host: "api.openai.com"})}},
	{src: "go", name: "http2 GOAWAY", want: ClassNetwork, err: &Error{Err: errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=1999, ErrCode=NO_ERROR, debug=""`)}},
	{src: "go", name: "http2 connection lost", want: ClassNetwork, err: &Error{Err: errors.New("http2: client connection lost")}},
	{src: "go", name: "http2 stream error", want: ClassNetwork, err: &Error{Err: errors.New("stream error: stream ID 3; INTERNAL_ERROR; received from peer")}},
	{src: "go", name: "server closed idle connection", want: ClassNetwork, err: &Error{Err: urlErr(errors.New("http: server closed idle connection"))}},
	{src: "go", name: "truncated JSON body", want: ClassNetwork, err: &Error{Status: 200, Err: truncatedJSON(), Message: truncatedJSON().Error()}},

	// --- Node, Bun, Python transports ---
	{src: "node", name: "fetch failed", want: ClassNetwork, err: &Error{TypeName: "TypeError", Message: "fetch failed"}},
	{src: "node", name: "other side closed", want: ClassNetwork, err: &Error{TypeName: "SocketError", Message: "other side closed"}},
	{src: "node", name: "terminated", want: ClassNetwork, err: &Error{TypeName: "TypeError", Message: "terminated"}},
	{src: "node", name: "socket hang up", want: ClassNetwork, err: &Error{Message: "socket hang up"}},
	{src: "node", name: "ECONNRESET", want: ClassNetwork, err: &Error{Message: "read ECONNRESET"}},
	{src: "node", name: "ENOTFOUND", want: ClassNetwork, err: &Error{Message: "getaddrinfo ENOTFOUND api.openai.com"}},
	{src: "node", name: "TLS socket disconnected", want: ClassNetwork, err: &Error{
		Message: "Client network socket disconnected before secure TLS connection was established"}},
	{src: "node", name: "Bun: socket closed unexpectedly", want: ClassNetwork, err: &Error{TypeName: "ConnectionClosed",
		Message: "The socket connection was closed unexpectedly. For more information, pass `verbose: true` in the second argument to fetch()"}},
	{src: "python", name: "httpx incomplete chunked read", want: ClassNetwork, err: &Error{TypeName: "RemoteProtocolError",
		Message: "peer closed connection without sending complete message body (incomplete chunked read)"}},
	{src: "python", name: "httpx server disconnected", want: ClassNetwork, err: &Error{TypeName: "RemoteProtocolError",
		Message: "Server disconnected without sending a response."}},
	{src: "python", name: "requests remote end closed", want: ClassNetwork, err: &Error{
		Message: "('Connection aborted.', RemoteDisconnected('Remote end closed connection without response'))"}},
	{src: "python", name: "urllib3 read timeout", want: ClassNetwork, err: &Error{
		Message: "HTTPSConnectionPool(host='api.openai.com', port=443): Read timed out. (read timeout=600)"}},
	{src: "python", name: "envoy in front of a Python proxy", want: ClassNetwork, err: &Error{
		Message: "upstream connect error or disconnect/reset before headers. reset reason: connection termination"}},

	// --- as users quoted them in issues (the held-out set of docs/retry.md) ---
	{src: "issues", name: "Gemini through a CLI", want: ClassServer, err: &Error{Message: "Error: The model is overloaded. Please try again later."}},
	{src: "issues", name: "Claude Code: 500 with an overloaded body", want: ClassServer, err: &Error{
		Message: `API Error: 500 {"type":"error","error":{"type":"api_error","message":"Overloaded"}}`}},
	{src: "issues", name: "Claude Code: 529 while retrying", want: ClassServer, err: &Error{
		Message: `API Error (529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}) · Retrying in 1 seconds… (attempt 1/10)`}},
	{src: "issues", name: "a JSON rate limit without a status", want: ClassRateLimit, err: &Error{
		Message: `LLM error: {"message": "API rate limit exceeded", "request_id": "af8869793862ad7ab720bb7f5438dd6a"}`}},
	{src: "issues", name: "anthropic.APIStatusError in a stream", want: ClassServer, err: &Error{
		Message: "anthropic.APIStatusError: {'type': 'error', 'error': {'details': None, 'type': 'overloaded_error', 'message': 'Overloaded'}}"}},
	{src: "issues", name: "Zhipu's empty balance as a 429", want: ClassAuth, err: &Error{
		Message: "RATE_LIMIT_EXCEEDED: Rate limited by OpenAI: Error code: 429 - {'error': {'code': '1113', 'message': 'Insufficient balance or no resource package. Please recharge.'}} [BYOK]"}},
	{src: "issues", name: "an httpx misuse says nothing", want: ClassUnknown, err: &Error{
		Message: "Attempted to access streaming response content, without having called `read()`."}},
	{src: "issues", name: "Ollama model failed to load", want: ClassServer, err: &Error{
		Message: `Ollama API error (status 500): {"error":{"message":"model failed to load, this may be due to resource limitations or an internal error, check ollama server logs for details","type":"api_error","param":null,"code":null}}`}},
	{src: "issues", name: "LM Studio: an error event with a bare message", want: ClassUnknown, err: &Error{Message: "Compute error."}},
	{src: "issues", name: "litellm wraps an Ollama stream error", want: ClassNetwork, err: &Error{
		Message: "litellm.APIConnectionError: Ollama Error - {'error': 'an unknown error was encountered while running the model '}"}},
	{src: "issues", name: "Ollama 404 as text", want: ClassInvalidRequest, err: &Error{
		Message: `Error: 404 - {"error":"model \"llama3\" not found, try pulling it first"}`}},
	{src: "issues", name: "Ollama runner EOF", want: ClassNetwork, err: &Error{Message: `POST predict: Post "http://127.0.0.1:39693/completion": EOF`}},
	{src: "issues", name: "a wrapper's last error", want: ClassRateLimit, err: &Error{Message: "Error: Failed after 3 attempts. Last error: Too Many Requests"}},
	{src: "issues", name: "a Cloudflare challenge as a 403", want: ClassAuth, err: &Error{
		Message: `Error: the Grok API error: 403 Forbidden, response body: <!DOCTYPE html><html lang="en-US"><head><title>Just a moment...</title>`}},
	{src: "issues", name: "Groq behind Cloudflare", want: ClassAuth, err: &Error{Message: "403 Please enable cookies."}},
	{src: "issues", name: "Groq 413 inside an app's message", want: ClassInvalidRequest, err: &Error{
		Message: "Failed to generate roadmap: 413 Request too large for model `llama-3.1-8b-instant` in organization `org_01` service tier `on_demand` on tokens per minute (TPM): Limit 6000, Requested 8606, please reduce your message size and try again."}},
	{src: "issues", name: "a 503 at capacity", want: ClassServer, err: &Error{Message: "Error 503 : back-end server is at capacity"}},
	{src: "issues", name: "llama.cpp overflow inside a 200 stream", want: ClassContextOverflow, err: &Error{
		Message: "the request exceeds the available context size, try increasing it"}},

	// --- rules: synthetic cases that pin a precedence (not in the report) ---
	{src: "rule", name: "empty message is a dropped stream", want: ClassNetwork, err: &Error{}},
	{src: "rule", name: "empty message with a type name", want: ClassNetwork, err: &Error{TypeName: "StreamError"}},
	{src: "rule", name: "unknown message", want: ClassUnknown, err: &Error{Message: "the simulated model said something odd"}},
	{src: "rule", name: "wrapped *Error keeps its class", want: ClassAuth, err: &Error{Err: fmt.Errorf("call: %w", &Error{Class: ClassAuth, Message: "x"}), Message: "call: x"},
		text: ClassUnknown, why: "the class rode on the wrapped error"},
	{src: "rule", name: "SDK type name RateLimitError", want: ClassRateLimit, err: &Error{TypeName: "RateLimitError", Message: "Error code: 429"}},
	{src: "rule", name: "too many requests text", want: ClassRateLimit, err: &Error{Message: "429 Too Many Requests"}},
	{src: "rule", name: "service unavailable text", want: ClassServer, err: &Error{Message: "Service Unavailable"}},
	{src: "rule", name: "login expired", want: ClassAuth, err: &Error{Message: "Login expired, please sign in again"}},
	{src: "rule", name: "login failed", want: ClassAuth, err: &Error{Message: "login failed for user 'svc'"}},
	{src: "rule", name: "re-auth", want: ClassAuth, err: &Error{Message: "token revoked; re-authenticate with `jetpool login`"}},
	{src: "rule", name: "unauthorized text", want: ClassAuth, err: &Error{Message: "Unauthorized"}},
	{src: "rule", name: "not a valid image", want: ClassInvalidRequest, err: &Error{Message: "The file is not a valid image"}},
	{src: "rule", name: "marker beats a transient pattern", want: ClassAuth, err: &Error{Message: "connection closed: unauthorized"}},
	{src: "rule", name: "marker beats a status in the text", want: ClassAuth, err: &Error{Message: "Error 500: invalid api key"}},
	{src: "rule", name: "marker beats upstream returned 5xx", want: ClassAuth, err: &Error{Message: "upstream returned 5xx: Invalid API key"}},
	{src: "rule", name: "overflow beats a status in the text", want: ClassContextOverflow, err: &Error{Message: "Error 500: prompt is too long: 500 tokens > 400 maximum"}},
	{src: "rule", name: "a count is not a status", want: ClassUnknown, err: &Error{Message: "error: 500 tokens requested, 400 left in this segment"}},
	{src: "rule", name: "a bare number is not a status", want: ClassInvalidRequest, err: &Error{Message: "max_tokens must be at most 504"}},
	{src: "rule", name: "a 4xx in words decides nothing", want: ClassUnknown, err: &Error{Message: "upstream returned 4xx"}},
	{src: "rule", name: "got a 502", want: ClassServer, err: &Error{Message: "got a 502 from the upstream"}},
	{src: "rule", name: "a 503 error", want: ClassServer, err: &Error{Message: "the upstream gave a 503 error"}},
	{src: "rule", name: "errors counted are not a status", want: ClassUnknown, err: &Error{Message: "found 500 errors in the file"}},
	{src: "rule", name: "a status that decides nothing does not hide one that does", want: ClassRateLimit, err: &Error{Message: "status 200, but error 429 in the body"}},
	{src: "rule", name: "HTTP status line", want: ClassServer, err: &Error{Message: "HTTP/1.1 503 Service Temporarily Unavailable"}},
	{src: "rule", name: "status_code field in text", want: ClassRateLimit, err: &Error{Message: "{'status_code': 429, 'detail': 'slow down'}"}},
	{src: "rule", name: "code field in JSON text", want: ClassServer, err: &Error{Message: `{"error":{"code":503,"message":"x"}}`}},
	{src: "rule", name: "unknown model text", want: ClassInvalidRequest, err: &Error{Message: "unknown model 'gpt-9'"}},
	{src: "rule", name: "too many tokens per minute is a rate limit, not overflow", want: ClassRateLimit, err: &Error{Message: "Too many tokens per minute, please slow down"}},
	{src: "rule", name: "prompt has too many tokens", want: ClassContextOverflow, err: &Error{Message: "Your prompt has too many tokens for this model"}},
	{src: "rule", name: "insufficient_quota as text", want: ClassAuth, err: &Error{Message: "insufficient_quota"}},
	{src: "rule", name: "accurate limits is not a rate limit", want: ClassUnknown, err: &Error{Message: "could not compute accurate limits"}},
	{src: "rule", name: "a numeric code is a status", want: ClassRateLimit, err: &Error{ProviderCode: "429", Message: "slow"},
		text: ClassUnknown, why: "the status rode in the code"},
}

// TestCorpus classifies every case twice — as the structured error and as
// its bare text — and asserts both.
func TestCorpus(t *testing.T) {
	t.Parallel()
	require.GreaterOrEqual(t, len(corpus), 150)
	names := map[string]bool{}
	for _, tc := range corpus {
		key := tc.src + "/" + tc.name
		require.False(t, names[key], "duplicate case %s", key)
		names[key] = true
		require.Equal(t, tc.text != ClassNone, tc.why != "", "%s: a text class needs a why, and a why a text class", key)
		t.Run(key, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, classOf(tc.err), "structured: %s", tc.err.Error())
			require.Equal(t, cmp.Or(tc.text, tc.want), Classify(bare(tc.err)), "text alone: %q", bare(tc.err).Message)
		})
	}
}

// TestCorpusReport prints, with -v, the report that docs/retry.md quotes:
// go test ./retry -run TestCorpusReport -v
func TestCorpusReport(t *testing.T) {
	t.Parallel()
	t.Log("\n" + corpusReport(corpus))
}

// corpusReport counts the classes of the real cases (rules left out), both
// ways, and how often the text alone agrees with the structure: on the
// class, and on what the two layers do.
func corpusReport(cases []corpusCase) string {
	structured, text := map[Class]int{}, map[Class]int{}
	sources := map[string]int{}
	var n, same, sameLayers int
	var differ []string
	for _, tc := range cases {
		if tc.src == "rule" {
			continue
		}
		n++
		sources[tc.src]++
		s, b := classOf(tc.err), Classify(bare(tc.err))
		structured[s]++
		text[b]++
		switch {
		case s == b:
			same++
			sameLayers++
		case layers(s) == layers(b):
			sameLayers++
			differ = append(differ, fmt.Sprintf("- %s / %s: %s structured, %s as text (same layers): %s", tc.src, tc.name, s, b, tc.why))
		default:
			differ = append(differ, fmt.Sprintf("- %s / %s: %s structured, %s as text: %s", tc.src, tc.name, s, b, tc.why))
		}
	}
	var b strings.Builder
	srcs := make([]string, 0, len(sources))
	for s := range sources {
		srcs = append(srcs, fmt.Sprintf("%s %d", s, sources[s]))
	}
	slices.Sort(srcs)
	fmt.Fprintf(&b, "%d real errors: %s\n\n", n, strings.Join(srcs, ", "))
	b.WriteString("| class | structured | text alone |\n|---|---|---|\n")
	for _, c := range Classes {
		if structured[c] > 0 || text[c] > 0 {
			fmt.Fprintf(&b, "| %s | %d | %d |\n", c, structured[c], text[c])
		}
	}
	fmt.Fprintf(&b, "\ntext alone agrees with the structure: %d of %d on the class, %d of %d on what both layers do\n", same, n, sameLayers, n)
	for _, d := range differ {
		b.WriteString(d + "\n")
	}
	return b.String()
}

// layers is what the two retry layers do with a class: both retry a
// transient class, only the exec layer retries unknown, neither a permanent one.
func layers(c Class) string {
	switch {
	case c.Transient():
		return "both"
	case c.Permanent():
		return "neither"
	}
	return "exec"
}
