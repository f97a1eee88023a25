package provider

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/jetpool/jetpool/retry"
)

// Redirects. Trust.Check binds a key to the endpoint a workflow names; a
// redirect from that endpoint must not carry the key anywhere else. Go's
// client drops only Authorization (and cookies) across hosts: it would send
// Anthropic's x-api-key, Gemini's x-goog-api-key and every configured
// header to any host a Location names, and everything to another port of
// the same host. So an adapter follows a redirect only within the origin
// of the request that began it (scheme, host and port, as Check saw
// them), only when it keeps the method and body (307, 308, or any
// redirect of a GET), and for at most MaxRedirects hops; any other
// redirect fails the call before the next request is sent, permanently:
// the endpoint's configuration, not the moment, is wrong. An endpoint
// without a key is held to the same rule, so a loopback model server
// cannot make a worker fetch another address (a cloud metadata service,
// say) and store its answer as a model's.

// MaxRedirects is how many same-origin redirects one request may follow.
const MaxRedirects = 5

// RedirectTypeName names the error of a refused redirect ("RedirectError:
// …" in results and dead letters); its class is invalid_request, which
// neither retry layer retries (jetpool retry --class invalid_request
// replays it once the endpoint is fixed).
const RedirectTypeName = "RedirectError"

// redirectError is returned by checkRedirect; transportError turns it into
// a *retry.Error of class invalid_request.
type redirectError struct {
	status int    // the redirect's status, 0 when unknown
	from   string // the origin the request began at
	to     string // the Location, redacted
	why    string
}

func (e *redirectError) Error() string {
	s := "refused a redirect"
	if e.status != 0 {
		s += fmt.Sprintf(" (%d)", e.status)
	}
	return fmt.Sprintf("%s from %s to %s: %s", s, e.from, e.to, e.why)
}

// checkRedirect is the http.Client's CheckRedirect of every adapter: req is
// the request the redirect would send next, via the requests sent so far
// (via[0] the first).
func checkRedirect(req *http.Request, via []*http.Request) error {
	first := via[0].URL
	re := &redirectError{from: origin(first), to: truncate(redactURL(req.URL.String()), MaxMessageLen/2)}
	if req.Response != nil {
		re.status = req.Response.StatusCode
	}
	prev := via[len(via)-1]
	switch {
	case req.URL.User != nil && (first.User == nil || req.URL.User.String() != first.User.String()):
		// A relative Location keeps base_url's own userinfo; any other
		// is the redirecting server's.
		re.why = "the Location carries credentials of its own"
	case !strings.EqualFold(req.URL.Scheme, first.Scheme):
		re.why = fmt.Sprintf("it changes the scheme from %s to %s", first.Scheme, req.URL.Scheme)
	case !strings.EqualFold(req.URL.Hostname(), first.Hostname()):
		re.why = "another host"
	case portOf(req.URL) != portOf(first):
		re.why = "another port"
	case req.Method != prev.Method:
		// 301, 302 and 303 turn a POST into a GET without its body: the
		// call would not be the one asked for.
		re.why = fmt.Sprintf("it turns the %s into a %s without its body", prev.Method, req.Method)
		return re
	case len(via) > MaxRedirects:
		re.why = fmt.Sprintf("more than %d redirects", MaxRedirects)
		return re
	default:
		return nil
	}
	re.why += fmt.Sprintf("; a key or header goes only to the endpoint it is bound to, and jetpool follows redirects only within %s (set base_url to where the provider answers)", re.from)
	return re
}

// origin is scheme://host:port of u, the port explicit.
func origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(hostPort(u))
}

func hostPort(u *url.URL) string {
	h := u.Hostname()
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return h + ":" + portOf(u)
}

// portOf is u's port, or its scheme's default.
func portOf(u *url.URL) string {
	return cmp.Or(u.Port(), defaultPort(strings.EqualFold(u.Scheme, "https")))
}

// redirectRefused is the error of a call whose redirect checkRedirect
// refused.
func (c *client) redirectRefused(re *redirectError, model, key string) *retry.Error {
	return &retry.Error{Class: retry.ClassInvalidRequest, TypeName: RedirectTypeName, Status: re.status,
		Message: c.redact(re.Error(), key), Provider: c.cfg.Name, Model: model}
}
