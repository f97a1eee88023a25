package retry

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
)

// Classify decides the class of a failed call from everything the error
// carries. It reads, in this order:
//
//  1. context overflow (provider code/type or message), which wins even over
//     a 5xx status because llama.cpp and Ollama report it as a 500;
//  2. billing and credential signals in the provider type/code
//     (insufficient_quota, authentication_error, API_KEY_INVALID, …), which
//     win over the status (Gemini reports a bad key as 400 INVALID_ARGUMENT);
//  3. the permanent markers of docs/design.md §1 in "TypeName: message";
//  4. the HTTP status (status wins over the provider type otherwise: a 429
//     whose type says invalid_request_error is a rate limit, a 400 whose code
//     mentions server_error is an invalid request), or a numeric provider
//     code standing in for it (a LiteLLM proxy's "code": "429"); see
//     statusClass for the 4xx that decide nothing;
//  5. the provider type/code alone (errors inside a 200 stream have no status);
//  6. a well-known TypeName ("RateLimitError", "APIConnectionError", …);
//  7. the Go error types of the underlying error (net, syscall, io, tls, x509);
//  8. the message as text, for errors that reach us with no structure (an
//     error event inside a 200 stream, a gateway or SDK that passed the
//     provider's error on as a string): a status in the words ("Error 429",
//     "error code 500", "upstream returned 5xx", "500 status code (no body)"),
//     then an SDK's or gateway's type name in the words
//     ("litellm.RateLimitError: …", "ThrottlingException: …"), then
//     request-size refusals ("Request too large for …"), then the transient
//     message patterns of docs/design.md §1, case-insensitive, then a few
//     permanent message patterns (unknown model, …).
//
// An error with an empty message and no structured signal is a stream that
// dropped before any error body arrived: ClassNetwork. A non-empty message
// that matches nothing is ClassUnknown. Classify ignores e.Class; it returns
// ClassNone only for a nil e. docs/retry.md has the decision table and the
// classifier measured on a corpus of real error bodies, structured and as
// bare text.
func Classify(e *Error) Class {
	if e == nil {
		return ClassNone
	}
	text := strings.ToLower(matchText(e))
	code := strings.ToLower(strings.TrimSpace(e.ProviderCode))
	typ := strings.ToLower(strings.TrimSpace(e.ProviderType))

	// 1. Context overflow.
	if isOverflowSignal(code) || isOverflowSignal(typ) || isOverflowText(text) {
		return ClassContextOverflow
	}
	// 2. Billing and credentials carried as a provider type/code.
	if c, ok := permanentSignals[code]; ok {
		return c
	}
	if c, ok := permanentSignals[typ]; ok {
		return c
	}
	// 3. Permanent markers.
	if c, ok := markerClass(text); ok {
		return c
	}
	// 4. HTTP status, or a numeric code standing in for it.
	if c, ok := statusClass(cmp.Or(e.Status, codeStatus(code))); ok {
		return c
	}
	// 5. Provider type/code alone (no decisive status).
	if c, ok := providerSignals[code]; ok {
		return c
	}
	if c, ok := providerSignals[typ]; ok {
		return c
	}
	// 6. Well-known type names.
	if c, ok := typeNames[strings.ToLower(e.TypeName)]; ok {
		return c
	}
	// 7. Go error types.
	if c, ok := goClass(e.Err, e); ok {
		return c
	}
	// 8. The words alone.
	if c, ok := textClass(text, strings.ToLower(e.Message)); ok {
		return c
	}
	if strings.TrimSpace(e.Message) == "" && e.Status == 0 {
		return ClassNetwork
	}
	return ClassUnknown
}

// matchText is the "TypeName: message" text the patterns run over. Unlike
// Error() it never substitutes the class's own type name, which would make
// classification depend on a class set earlier.
func matchText(e *Error) string {
	if e.TypeName == "" {
		return e.Message
	}
	if e.Message == "" {
		return e.TypeName
	}
	return e.TypeName + ": " + e.Message
}

// --- context overflow -------------------------------------------------------

func isOverflowSignal(s string) bool {
	switch s {
	case "context_length_exceeded", // OpenAI, Groq, vLLM
		"exceed_context_size_error", // llama.cpp server
		"context_window_exceeded":
		return true
	}
	return false
}

var (
	// overflowText matches the ways providers say the prompt does not fit:
	// OpenAI/vLLM/Groq "maximum context length", Anthropic "prompt is too long"
	// and "exceed context limit", OpenAI Responses "context window",
	// llama.cpp "exceeds the available context size" / "Context size has been
	// exceeded", Ollama "input length exceeds the context length", Bedrock
	// "Input is too long", Gemini "The input token count (…) exceeds the maximum
	// number of tokens allowed", Cohere "too many tokens: … in the prompt",
	// LiteLLM "ContextWindowExceededError".
	overflowText = pattern(`prompt is too long|context_length_exceeded|contextwindowexceeded|` +
		`exceed_context_size|maximum context length|context window|` +
		`context (?:length|size|limit)\b[^.]{0,40}\b(?:exceed|too)|` +
		`exceeds? (?:the |its |maximum |max )*(?:available )?context (?:length|size|limit)|` +
		`input is too long|input (?:is )?too long for|` +
		`input token count[^.]{0,40}exceeds|` +
		`too many tokens[^.]{0,80}\b(?:prompt|input|messages?|context)\b|` +
		`\b(?:prompt|input|messages?)\b[^.]{0,40}too many tokens`)

	// maxTokensParam matches a complaint about the max_tokens parameter itself
	// ("max_tokens: 10000 > 4096, which is the maximum allowed number of output
	// tokens", "max_tokens is too large: 10000", vLLM "'max_tokens' or
	// 'max_completion_tokens' is too large"). That is a bad parameter, not an
	// overflow: shortening the prompt would not help.
	maxTokensParam = pattern(`max_(?:completion_|output_)?tokens\S*\s*(?::\s*\d+\s*>|(?:or \S+ )?(?:is|are) too large|must be)`)
)

func isOverflowText(text string) bool {
	return !maxTokensParam().MatchString(text) && overflowText().MatchString(text)
}

// --- structured signals -----------------------------------------------------

// permanentSignals are provider types/codes that win over the HTTP status.
//
// insufficient_quota (OpenAI's billing 429: "You exceeded your current quota,
// please check your plan and billing details") and its kin are classed auth,
// not rate_limit: retrying cannot help, and the remedy is the same as for a
// dead key — someone must fix the account, after which every record failed
// this way can be replayed (`jetpool retry --class auth`). Classing it
// invalid_request would send operators to look for a bad record, and mix
// the replayable failures with records that will fail again. Note: Gemini's
// per-minute quota 429 says "You exceeded your current quota" too, but with
// RESOURCE_EXHAUSTED, so the message alone never decides billing.
var permanentSignals = map[string]Class{
	"insufficient_quota":         ClassAuth,
	"billing_hard_limit_reached": ClassAuth,
	"billing_not_active":         ClassAuth,
	"access_terminated":          ClassAuth,
	"authentication_error":       ClassAuth,
	"permission_error":           ClassAuth,
	"permission_denied":          ClassAuth,
	"unauthenticated":            ClassAuth,
	"api_key_invalid":            ClassAuth,
	"api_key_expired":            ClassAuth,
	"invalid_api_key":            ClassAuth,
	"invalid_authentication":     ClassAuth,
	"unauthorized":               ClassAuth,
	"forbidden":                  ClassAuth,
	// A LiteLLM proxy's spend cap on a key or team: someone must raise it.
	"budget_exceeded": ClassAuth,
	// Azure OpenAI's content filter refusing the prompt (a 400): the same
	// prompt is refused again, and it is a filter's verdict, not a bad
	// request (jetpool retry --class content_filter finds it with the rest).
	"content_filter":               ClassContentFilter,
	"responsibleaipolicyviolation": ClassContentFilter,
}

// providerSignals are provider types/codes consulted when the status does
// not decide (no status, or 200 for an error event inside a stream).
var providerSignals = map[string]Class{
	"rate_limit_error":    ClassRateLimit,
	"rate_limit_exceeded": ClassRateLimit,
	"resource_exhausted":  ClassRateLimit,
	"capacity_exceeded":   ClassRateLimit, // Groq flex tier (498)
	"too_many_requests":   ClassRateLimit,
	// OpenAI Batch: "Enqueued token limit reached for gpt-4o in organization
	// …": the organisation's queue of batch tokens is full; it drains as
	// earlier batches finish, so it is a rate limit, not a bad request.
	"token_limit_exceeded": ClassRateLimit,
	"throttling_error":     ClassRateLimit, // LiteLLM proxy's own RPM/TPM limits
	"throttlingexception":  ClassRateLimit, // AWS Bedrock

	"overloaded_error":    ClassServer,
	"api_error":           ClassServer,
	"server_error":        ClassServer,
	"internal_error":      ClassServer,
	"internal":            ClassServer,
	"unavailable":         ClassServer,
	"service_unavailable": ClassServer,
	"deadline_exceeded":   ClassServer,
	"timeout_error":       ClassServer, // Anthropic 504
	"aborted":             ClassServer,

	"internal_server_error": ClassServer, // a gateway's spelling

	"invalid_request_error":    ClassInvalidRequest,
	"invalid_argument":         ClassInvalidRequest,
	"failed_precondition":      ClassInvalidRequest,
	"out_of_range":             ClassInvalidRequest,
	"model_not_found":          ClassInvalidRequest,
	"model_decommissioned":     ClassInvalidRequest, // Groq
	"not_found":                ClassInvalidRequest,
	"not_found_error":          ClassInvalidRequest,
	"request_too_large":        ClassInvalidRequest,
	"invalid_value":            ClassInvalidRequest,
	"invalid_prompt":           ClassInvalidRequest,
	"unsupported_value":        ClassInvalidRequest,
	"unsupported_parameter":    ClassInvalidRequest,
	"content_policy_violation": ClassInvalidRequest,
}

// statusClass maps an HTTP status. 1xx–3xx (and 0) decide nothing, and
// neither does a 4xx outside the lists below: it is left to the provider's
// type, the Go error and the words, and ends ClassUnknown when they say
// nothing either — the session layer does not retry it, the exec layer does
// (a few deliveries, with backoff), so a gateway's unfamiliar 4xx neither
// loses a record that a later call would have served nor costs more than
// max_deliveries calls. Only a status that says "this request, as written,
// will be refused again" is permanent; docs/retry.md has the table.
func statusClass(status int) (Class, bool) {
	switch status {
	case 429, // too many requests
		498: // Groq: flex tier capacity exceeded; "add jittered backoff and retries"
		return ClassRateLimit, true
	case 401, 403,
		402, // payment required (OpenRouter credits): billing, see permanentSignals
		407: // proxy authentication required: a proxy's credentials
		return ClassAuth, true
	case 408, // request timeout
		421, // misdirected request: the client may retry on another connection
		425, // too early: sent in TLS early data; retry after the handshake
		499: // client closed request (Groq, nginx): our side gave up
		return ClassNetwork, true
	case 409:
		// Conflict: OpenAI's and Anthropic's SDKs retry it (lock contention).
		return ClassServer, true
	case 400, // bad request
		404, // not found: a model or an endpoint that does not exist
		405, // method not allowed: a wrong base_url
		410, // gone: a retired model or endpoint
		413, // content too large
		414, // URI too long
		415, // unsupported media type
		422, // unprocessable content: failed validation
		431: // request header fields too large
		return ClassInvalidRequest, true
	}
	if status >= 500 && status <= 599 { // 500 502 503 504, 520-524 (Cloudflare), 529 overloaded
		return ClassServer, true
	}
	return ClassNone, false
}

// codeStatus is a provider code that is a bare HTTP status ("429", as a
// LiteLLM proxy sends it), 0 otherwise.
func codeStatus(code string) int {
	if len(code) != 3 {
		return 0
	}
	n, err := strconv.Atoi(code)
	if err != nil || n < 100 || n > 599 {
		return 0
	}
	return n
}

// typeNames are type names that already say the class: ours (Class.TypeName,
// so an error that went through a dead letter as text classifies the same
// way) and the OpenAI/Anthropic SDKs'.
var typeNames = map[string]Class{
	"ratelimiterror":           ClassRateLimit,
	"servererror":              ClassServer,
	"internalservererror":      ClassServer,
	"overloadederror":          ClassServer,
	"serviceunavailableerror":  ClassServer,
	"networkerror":             ClassNetwork,
	"timeouterror":             ClassNetwork,
	"dnserror":                 ClassNetwork,
	"tlserror":                 ClassNetwork,
	"cancelederror":            ClassNetwork,
	"apiconnectionerror":       ClassNetwork,
	"apitimeouterror":          ClassNetwork,
	"connectionerror":          ClassNetwork,
	"contextoverflowerror":     ClassContextOverflow,
	"autherror":                ClassAuth,
	"authenticationerror":      ClassAuth,
	"permissiondeniederror":    ClassAuth,
	"invalidrequesterror":      ClassInvalidRequest,
	"badrequesterror":          ClassInvalidRequest,
	"notfounderror":            ClassInvalidRequest,
	"unprocessableentityerror": ClassInvalidRequest,
	"schemaviolationerror":     ClassSchemaViolation,
	"programmingerror":         ClassProgramming,
	"panicerror":               ClassProgramming,
	// LiteLLM's (litellm.InternalServerError, litellm.Timeout, …), also as
	// they appear inside a message.
	"badgatewayerror":             ClassServer,
	"contextwindowexceedederror":  ClassContextOverflow,
	"contentpolicyviolationerror": ClassInvalidRequest,
	// AWS Bedrock's exception names.
	"throttlingexception":         ClassRateLimit,
	"serviceunavailableexception": ClassServer,
	"internalserverexception":     ClassServer,
	"modelnotreadyexception":      ClassServer,
	"modelstreamerrorexception":   ClassServer,
	"validationexception":         ClassInvalidRequest,
	"resourcenotfoundexception":   ClassInvalidRequest,
	"accessdeniedexception":       ClassAuth,
	"unrecognizedclientexception": ClassAuth,
	"expiredtokenexception":       ClassAuth,
}

// --- Go error types ---------------------------------------------------------

// goClass classifies the underlying Go error. self is the *Error that holds
// err, so a wrapped *Error with its own class is used but self is skipped.
func goClass(err error, self *Error) (Class, bool) {
	if err == nil {
		return ClassNone, false
	}
	var inner *Error
	if errors.As(err, &inner) && inner != self {
		if inner.Class != ClassNone {
			return inner.Class, true
		}
		return Classify(inner), true
	}
	if goNetKind(err) != "" {
		return ClassNetwork, true
	}
	return ClassNone, false
}

// goNetKind names the kind of transport failure err is, "" when it is none:
// "timeout", "canceled", "dns", "tls" or "network".
func goNetKind(err error) string {
	var (
		dnsErr      *net.DNSError
		netErr      net.Error
		opErr       *net.OpError
		recHdrErr   tls.RecordHeaderError
		alertErr    tls.AlertError
		certVerErr  *tls.CertificateVerificationError
		unknownAuth x509.UnknownAuthorityError
		hostErr     x509.HostnameError
		certInvErr  x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &dnsErr):
		if dnsErr.IsTimeout {
			return "timeout"
		}
		return "dns"
	case errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	case errors.As(err, &recHdrErr), errors.As(err, &alertErr), errors.As(err, &certVerErr),
		errors.As(err, &unknownAuth), errors.As(err, &hostErr), errors.As(err, &certInvErr):
		return "tls"
	case errors.As(err, &opErr),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ENETDOWN),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, net.ErrClosed):
		return "network"
	}
	// HTTP/2 (golang.org/x/net/http2 and net/http's bundled copy) is matched
	// by its text so that this package needs neither import.
	msg := strings.ToLower(err.Error())
	if strings.Contains(msg, "goaway") || strings.HasPrefix(msg, "http2: ") ||
		strings.Contains(msg, "stream error: stream id") {
		return "network"
	}
	// net/http's transport errors come wrapped in *url.Error (a net.Error);
	// anything the transport failed at that was not classified above is
	// still transport.
	if errors.As(err, &netErr) {
		if tlsText().MatchString(msg) {
			return "tls"
		}
		return "network"
	}
	return ""
}

var tlsText = pattern(`\btls\b|x509`)

// Redact removes credentials from s: the values of key-like query
// parameters (Gemini's ?key=, which *url.Error repeats in its text),
// bearer tokens, and OpenAI/Anthropic/Gemini-shaped keys. AsError and
// Diagnose apply it, so that a transport error never carries a key into a
// result or a dead letter.
func Redact(s string) string {
	s = keyParam().ReplaceAllString(s, "${1}REDACTED")
	s = bearer().ReplaceAllString(s, "${1}REDACTED")
	return keyShape().ReplaceAllString(s, "REDACTED")
}

var (
	keyParam = pattern(`(?i)([?&](?:key|api_?key|apikey|access_token|token|x-api-key)=)[^&"'\s]+`)
	bearer   = pattern(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}`)
	keyShape = pattern(`\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{30,}|gsk_[A-Za-z0-9]{20,})`)
)

// goTypeName is the diagnostic type name of a plain Go error: stable names,
// never the Go type (which would leak package paths into dead letters).
func goTypeName(err error, c Class) string {
	switch goNetKind(err) {
	case "timeout":
		return "TimeoutError"
	case "canceled":
		return "CanceledError"
	case "dns":
		return "DNSError"
	case "tls":
		return "TLSError"
	case "network":
		return "NetworkError"
	}
	return c.TypeName()
}
