package retry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"regexp"
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
//  3. the permanent markers of DESIGN.md §1 in "TypeName: message";
//  4. the HTTP status (status wins over the provider type otherwise: a 429
//     whose type says invalid_request_error is a rate limit, a 400 whose code
//     mentions server_error is an invalid request);
//  5. the provider type/code alone (errors inside a 200 stream have no status);
//  6. a well-known TypeName ("RateLimitError", "APIConnectionError", …);
//  7. the Go error types of the underlying error (net, syscall, io, tls, x509);
//  8. the transient message patterns of DESIGN.md §1, case-insensitive;
//  9. a few permanent message patterns (unknown model, …).
//
// An error with an empty message and no structured signal is a stream that
// dropped before any error body arrived: ClassNetwork. A non-empty message
// that matches nothing is ClassUnknown. Classify ignores e.Class; it returns
// ClassNone only for a nil e.
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
	// 4. HTTP status.
	if c, ok := statusClass(e.Status); ok {
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
	// 8. Transient message patterns.
	if c, ok := transientText(text); ok {
		return c
	}
	// 9. Permanent message patterns beyond the markers.
	if invalidRequestText.MatchString(text) {
		return ClassInvalidRequest
	}
	if strings.TrimSpace(e.Message) == "" {
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
	// number of tokens allowed", Cohere "too many tokens: … in the prompt".
	overflowText = regexp.MustCompile(`prompt is too long|context_length_exceeded|` +
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
	maxTokensParam = regexp.MustCompile(`max_(?:completion_|output_)?tokens\S*\s*(?::\s*\d+\s*>|(?:or \S+ )?(?:is|are) too large|must be)`)
)

func isOverflowText(text string) bool {
	return !maxTokensParam.MatchString(text) && overflowText.MatchString(text)
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
}

// providerSignals are provider types/codes consulted when the status does
// not decide (no status, or 200 for an error event inside a stream).
var providerSignals = map[string]Class{
	"rate_limit_error":    ClassRateLimit,
	"rate_limit_exceeded": ClassRateLimit,
	"resource_exhausted":  ClassRateLimit,
	"capacity_exceeded":   ClassRateLimit, // Groq flex tier (498)
	"too_many_requests":   ClassRateLimit,

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

	"invalid_request_error":    ClassInvalidRequest,
	"invalid_argument":         ClassInvalidRequest,
	"failed_precondition":      ClassInvalidRequest,
	"out_of_range":             ClassInvalidRequest,
	"model_not_found":          ClassInvalidRequest,
	"not_found":                ClassInvalidRequest,
	"not_found_error":          ClassInvalidRequest,
	"request_too_large":        ClassInvalidRequest,
	"invalid_value":            ClassInvalidRequest,
	"invalid_prompt":           ClassInvalidRequest,
	"unsupported_value":        ClassInvalidRequest,
	"unsupported_parameter":    ClassInvalidRequest,
	"content_policy_violation": ClassInvalidRequest,
}

// statusClass maps an HTTP status. 1xx–3xx (and 0) decide nothing.
func statusClass(status int) (Class, bool) {
	switch {
	case status == 429:
		return ClassRateLimit, true
	case status == 498: // Groq: flex tier capacity exceeded; "add jittered backoff and retries"
		return ClassRateLimit, true
	case status == 401 || status == 403:
		return ClassAuth, true
	case status == 402: // payment required (OpenRouter credits): billing, see permanentSignals
		return ClassAuth, true
	case status == 408: // request timeout
		return ClassNetwork, true
	case status == 499: // client closed request (Groq, nginx): our side gave up
		return ClassNetwork, true
	case status == 409:
		// Conflict: OpenAI's and Anthropic's SDKs retry it (lock contention).
		return ClassServer, true
	case status >= 500 && status <= 599: // 500 502 503 504, 520-524 (Cloudflare), 529 overloaded
		return ClassServer, true
	case status >= 400 && status <= 499:
		return ClassInvalidRequest, true
	}
	return ClassNone, false
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
		if tlsText.MatchString(msg) {
			return "tls"
		}
		return "network"
	}
	return ""
}

var tlsText = regexp.MustCompile(`\btls\b|x509`)

// Redact removes credentials from s: the values of key-like query
// parameters (Gemini's ?key=, which *url.Error repeats in its text),
// bearer tokens, and OpenAI/Anthropic/Gemini-shaped keys. AsError and
// Diagnose apply it, so that a transport error never carries a key into a
// result or a dead letter.
func Redact(s string) string {
	s = keyParam.ReplaceAllString(s, "${1}REDACTED")
	s = bearer.ReplaceAllString(s, "${1}REDACTED")
	return keyShape.ReplaceAllString(s, "REDACTED")
}

var (
	keyParam = regexp.MustCompile(`(?i)([?&](?:key|api_?key|apikey|access_token|token|x-api-key)=)[^&"'\s]+`)
	bearer   = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}`)
	keyShape = regexp.MustCompile(`\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|AIza[0-9A-Za-z_-]{30,}|gsk_[A-Za-z0-9]{20,})`)
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

// --- message patterns -------------------------------------------------------

// markers are DESIGN.md §1's permanent markers: any of them in
// "TypeName: message" makes an error permanent, whatever else it says.
var markers = []struct {
	text  string
	class Class
}{
	{"not a valid image", ClassInvalidRequest},
	{"invalid image", ClassInvalidRequest},
	{"image data is not", ClassInvalidRequest},
	{"login expired", ClassAuth},
	{"login failed", ClassAuth},
	{"re-auth", ClassAuth},
	{"unauthorized", ClassAuth},
	{"invalid api key", ClassAuth},
	{"invalid_api_key", ClassAuth},
	// Beyond DESIGN's list: how OpenAI and Gemini word a bad key.
	{"incorrect api key", ClassAuth},
	{"api key not valid", ClassAuth},
	// Billing, by text: Anthropic's 400 "Your credit balance is too low to
	// access the Anthropic API" (see permanentSignals for why auth).
	{"credit balance is too low", ClassAuth},
	{"billing_hard_limit_reached", ClassAuth},
	{"insufficient_quota", ClassAuth},
}

// markerClass reports the class of the first permanent marker in text
// (lower-cased).
func markerClass(text string) (Class, bool) {
	for _, m := range markers {
		if strings.Contains(text, m.text) {
			return m.class, true
		}
	}
	return ClassNone, false
}

var (
	rateLimitText = regexp.MustCompile(`\brate.?limit|too many requests|resource.?exhausted|` +
		`resource has been exhausted|quota|\b(?:tpm|rpm|tpd|rpd)\b|tokens per (?:min|day)|requests per (?:min|day)|` +
		`capacity_exceeded`)
	serverText = regexp.MustCompile(`overloaded|service unavailable|service_unavailable|` +
		`temporarily unavailable|currently unavailable|internal server error|internal error|` +
		`bad gateway|gateway timeout|server.?error|over capacity|high demand|` +
		`no healthy upstream|\b50[234]\b|\b529\b`)
	networkText = regexp.MustCompile(`connection (?:error|refused|reset|closed|aborted|lost|timed out)|` +
		`broken pipe|timeout|\btimed out\b|deadline exceeded|no such host|\bdns\b|\btls\b|x509|handshake|` +
		`unexpected eof|\beof\b|unexpected end of json input|` +
		`stream (?:dropped|closed|ended|error|disconnected|interrupted)|other side closed|fetch failed|` +
		`\bterminated\b|reset before headers|goaway|socket hang up|` +
		`\be(?:connreset|connrefused|connaborted|timedout|pipe|notfound|hostunreach|netunreach)\b|` +
		`network|premature close|incomplete chunked|closed idle connection|` +
		`use of closed network connection|\b(?:dial|read|write) tcp\b|request canceled|context canceled`)

	// invalidRequestText: permanent shapes seen without a status (an SDK
	// that dropped it, a proxy's plain-text body).
	invalidRequestText = regexp.MustCompile(`model[^.]{0,80}(?:not found|does not exist)|` +
		`model_not_found|unknown model|no such model|invalid model`)
)

// transientText classifies text (lower-cased) by DESIGN.md §1's transient
// message patterns.
func transientText(text string) (Class, bool) {
	switch {
	case rateLimitText.MatchString(text):
		return ClassRateLimit, true
	case serverText.MatchString(text):
		return ClassServer, true
	case networkText.MatchString(text):
		return ClassNetwork, true
	}
	return ClassNone, false
}
