package retry

// Classification by the words of an error: the permanent markers (step 3 of
// Classify) and the message as text (step 8), for errors that reach us
// with no structure.

import (
	"strconv"
	"strings"
)

// markers are docs/design.md §1's permanent markers: any of them in
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
	// Beyond docs/design.md's list: how OpenAI and Gemini word a bad key.
	{"incorrect api key", ClassAuth},
	{"api key not valid", ClassAuth},
	// Billing, by text: Anthropic's 400 "Your credit balance is too low to
	// access the Anthropic API" (see permanentSignals for why auth).
	{"credit balance is too low", ClassAuth},
	{"billing_hard_limit_reached", ClassAuth},
	{"insufficient_quota", ClassAuth},
	// Found by the corpus (corpus_test.go): Anthropic's bad key and 403,
	// OpenAI's missing key, Gemini's expired key, OpenAI's region block, and
	// spend caps that a person must lift — Anthropic's "You have reached your
	// specified API usage limits. You will regain access on 2026-09-01",
	// OpenRouter's credits, a LiteLLM proxy's budget, an empty prepaid balance.
	{"invalid x-api-key", ClassAuth},
	{"authentication_error", ClassAuth},
	{"provide an api key", ClassAuth},
	{"api key expired", ClassAuth},
	{"does not have permission", ClassAuth},
	{"doesn't have permission", ClassAuth},
	{"permission_denied", ClassAuth},
	{"unregistered callers", ClassAuth},
	{"invalid authentication credentials", ClassAuth},
	{"country, region, or territory not supported", ClassAuth},
	{"reached your specified api usage limits", ClassAuth},
	{"insufficient credits", ClassAuth},
	{"requires more credits", ClassAuth},
	{"budget has been exceeded", ClassAuth},
	{"insufficient balance", ClassAuth}, // Zhipu's 429 code 1113: "Insufficient balance or no resource package"
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
	rateLimitText = pattern(`\brate.?limit|too many requests|resource.?exhausted|` +
		`resource has been exhausted|quota|\b(?:tpm|rpm|tpd|rpd)\b|tokens per (?:min|day)|requests per (?:min|day)|` +
		`capacity_exceeded|capacity exceeded|throttl(?:ed|ing)|` +
		// Bedrock: "Too many tokens, please wait before trying again."
		`too many tokens,? (?:please|wait|try)|wait before (?:trying|retrying)|` +
		// OpenAI Batch's enqueued-token limit; a LiteLLM router cooling its
		// deployments down ("No deployments available for selected model,
		// Try again in 60 seconds"); Cloudflare's rate limit, "error code: 1015".
		`token_limit_exceeded|enqueued token limit|no deployments available|error code:? 1015\b`)
	serverText = pattern(`overloaded|service unavailable|service_unavailable|` +
		`temporarily unavailable|currently unavailable|internal server error|internal error|` +
		`bad gateway|gateway timeout|server.?error|over capacity|high demand|` +
		`no healthy upstream|server had an error|server (?:is )?busy|deadline expired|try again later|` +
		`loading model|model is (?:currently )?loading|engine ?dead|engine loop|enginecore encountered|` +
		`unable to process (?:your|the) request`)
	networkText = pattern(`connection (?:was |has been |is )?(?:error|refused|reset|closed|aborted|lost|timed out|terminated|dropped)|` +
		`broken pipe|timeout|\btimed out\b|deadline exceeded|no such host|\bdns\b|\btls\b|x509|handshake|` +
		`unexpected eof|\beof\b|unexpected end of json input|` +
		`stream (?:dropped|closed|ended|error|disconnected|interrupted)|other side closed|fetch failed|` +
		`\bterminated\b|reset before headers|goaway|socket hang up|` +
		`\be(?:connreset|connrefused|connaborted|timedout|pipe|notfound|hostunreach|netunreach)\b|` +
		`network|premature close|incomplete chunked|closed idle connection|` +
		`use of closed network connection|\b(?:dial|read|write) tcp\b|` +
		// Bun: "The socket connection was closed unexpectedly"; httpx:
		// "peer closed connection without sending complete message body",
		// "Server disconnected without sending a response"; urllib3:
		// "Remote end closed connection without response".
		`closed unexpectedly|peer closed connection|server disconnected|remote end closed|remotedisconnected|` +
		`socket disconnected|\b(?:request|context|operation|call|stream)\s+(?:was\s+|has been\s+)?(?:cancell?ed|aborted)\b`)

	// requestTooLargeText is a request refused for its size, checked before
	// the transient patterns: OpenAI's 429 and Groq's 413 "Request too large
	// for … on tokens per min (TPM)" name a per-minute limit, but no wait lets
	// a request larger than the whole minute's budget through.
	requestTooLargeText = pattern(`request too large|request_too_large|request entity too large|` +
		`payload too large|request exceeds the maximum allowed`)

	// invalidRequestText: permanent shapes seen without a status (an SDK
	// that dropped it, a proxy's plain-text body).
	invalidRequestText = pattern(`model[^.]{0,80}(?:not found|does not exist)|` +
		`model_not_found|unknown model|no such model|invalid model|decommissioned|no endpoints found|` +
		`invalid[_ ]argument|invalid json payload|location is not supported|roles must alternate|` +
		`must be (?:between|less than|greater than|one of|at most|at least)|` +
		`unsupported parameter|unrecognized request argument|invalid (?:value|type) for|does not support|` +
		`\binvalid '|unsupported image`)

	// contentFilterText: a provider's filter refused the prompt (Azure
	// OpenAI's "…triggering Azure OpenAI's content management policy").
	contentFilterText = pattern(`content (?:management |filtering )?policy|content_filter|responsibleaipolicyviolation`)
)

// transientText classifies text (lower-cased) by docs/design.md §1's transient
// message patterns.
func transientText(text string) (Class, bool) {
	switch {
	case rateLimitText().MatchString(text):
		return ClassRateLimit, true
	case serverText().MatchString(text):
		return ClassServer, true
	case networkText().MatchString(text):
		return ClassNetwork, true
	}
	return ClassNone, false
}

// textClass classifies an error by its words alone (step 8 of Classify):
// text is "TypeName: message" and msg the message, both lower-cased.
func textClass(text, msg string) (Class, bool) {
	if c, ok := statusInText(msg); ok {
		return c, true
	}
	if c, ok := typeNameInText(text); ok {
		return c, true
	}
	if requestTooLargeText().MatchString(text) {
		return ClassInvalidRequest, true
	}
	if c, ok := transientText(text); ok {
		return c, true
	}
	if contentFilterText().MatchString(text) {
		return ClassContentFilter, true
	}
	if invalidRequestText().MatchString(text) || maxTokensParam().MatchString(text) {
		return ClassInvalidRequest, true
	}
	return ClassNone, false
}

var (
	// statusText is an HTTP status in words: after a word that introduces
	// one ("Error 429", "error code: 500", "status=503", `"code": 429`,
	// "HTTP/1.1 502", "upstream returned 5xx", "got a 502"), leading the
	// message as the SDKs print it ("500 status code (no body)", "429 Rate
	// limit reached…", "503 UNAVAILABLE. {…}"), or followed by "error",
	// "status" or "response" ("a 503 error"). Group 1 is the introduction,
	// 2 the number, 3 the word after it, so that a count ("error: 500
	// tokens") is not taken for a status.
	statusText = pattern(`(^\s*|\b(?:error|error_?code|status|status_?code|http|code|returned|received|got|response|with)` +
		`(?:\s+(?:an?|the))?["']?\s*[:=#(\[]?\s*["']?(?:code\s*[:=]?\s*)?|\bhttp/\d(?:\.\d)?\s+)?` +
		`\b([1-5](?:\d\d|xx))\b(?:\s*([a-z%]+))?`)
	// countUnits are the words that make a number a count, not a status.
	countUnits = map[string]bool{"tokens": true, "token": true, "characters": true, "chars": true,
		"bytes": true, "kb": true, "mb": true, "ms": true, "s": true, "sec": true, "seconds": true,
		"minutes": true, "words": true, "items": true, "messages": true, "lines": true, "requests": true,
		"images": true, "files": true, "results": true, "%": true}
)

// statusInText is the class of the first status in msg (lower-cased), by
// statusText, that decides one (see statusClass). "5xx" reads as a server
// error; "4xx" says too little.
func statusInText(msg string) (Class, bool) {
	for _, m := range statusText().FindAllStringSubmatchIndex(msg, -1) {
		num := msg[m[4]:m[5]]
		next := ""
		if m[6] >= 0 {
			next = msg[m[6]:m[7]]
		}
		introduced := m[2] >= 0
		if countUnits[next] || (!introduced && next != "error" && next != "status" && next != "response") {
			continue
		}
		if num == "5xx" {
			return ClassServer, true
		}
		n, err := strconv.Atoi(num)
		if err != nil {
			continue // 4xx
		}
		if c, ok := statusClass(n); ok {
			return c, true
		}
	}
	return ClassNone, false
}

// typeNameText is a type name inside a message: an SDK's or gateway's
// exception name ("litellm.RateLimitError: …", "ThrottlingException: …").
var typeNameText = pattern(`\b[a-z]+(?:error|exception)\b`)

// typeNameInText is the class of the first well-known type name in text.
func typeNameInText(text string) (Class, bool) {
	for _, name := range typeNameText().FindAllString(text, -1) {
		if c, ok := typeNames[name]; ok {
			return c, true
		}
	}
	return ClassNone, false
}
