package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/jetpool/jetpool/internal/pause"
	"github.com/jetpool/jetpool/retry"
)

// Size caps on what an adapter reads from a provider. A misbehaving endpoint
// (or a proxy that streams forever) must not be able to exhaust a worker's memory.
const (
	// MaxBodyBytes caps a successful response body, streamed or not.
	MaxBodyBytes = 32 << 20
	// MaxErrorBodyBytes caps the part of an error body that is read and parsed.
	MaxErrorBodyBytes = 64 << 10
	// MaxMessageLen caps a provider message that is not JSON (an HTML error page, say).
	MaxMessageLen = 500
)

var (
	// errRequestTimeout is the cause set on a call's context when Config.Timeout expires,
	// so an expired request timeout can be told from the caller's own cancellation.
	errRequestTimeout = errors.New("request timeout")
	// errBodyTooLarge is returned by capReader once a body passes its cap.
	errBodyTooLarge = errors.New("response body too large")
)

// client is the HTTP plumbing shared by the openai, anthropic and gemini adapters.
//
// The adapters speak net/http directly rather than through the vendors' SDKs:
// we need the exact status line, headers and body of every failure to classify
// it, and the SDKs' own retry loops would multiply with our two retry layers
// (docs/design.md §1) — here nothing retries but jetpool's session and exec layers.
type client struct {
	cfg  Config
	base *url.URL
	http *http.Client
	tr   *transport
	// auth sets the credentials on a request (nothing when key is empty).
	auth func(h http.Header, key string)
	// known classifies an error by provider-specific knowledge that retry.Classify
	// does not have; it returns ClassNone to leave the decision to Classify.
	known func(e *retry.Error) retry.Class
	now   func() time.Time
}

func newClient(cfg Config, defaultBase string) (*client, error) {
	raw := cmp.Or(cfg.BaseURL, defaultBase)
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("provider %s: base_url %q is not an http(s) URL", cfg.Name, redactURL(raw))
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Every call slot keeps its connection between calls. net/http keeps
	// two idle connections a host (and a hundred in all) unless told
	// otherwise: past that, a connection that finished a call was closed
	// and the next call dialled (and, over TLS, shook hands) again, which
	// at hundreds of calls in flight to one host cost more CPU and memory
	// than the calls. Idle connections still close after IdleConnTimeout.
	tr.MaxIdleConns = 0 // no bound across hosts
	tr.MaxIdleConnsPerHost = maxIdleConnsPerHost
	rt := newTransport(tr)
	return &client{
		cfg:  cfg,
		base: u,
		tr:   rt,
		// No Client.Timeout: the per-request timeout is a context deadline (see
		// withTimeout) so that it also bounds reading a stream, and so that its
		// expiry can be told from the caller's cancellation.
		http:  &http.Client{Transport: rt, CheckRedirect: checkRedirect},
		known: func(*retry.Error) retry.Class { return retry.ClassNone },
		now:   time.Now,
	}, nil
}

// maxIdleConnsPerHost bounds the idle connections kept to one host: more
// than the call slots a worker runs (Concurrency), so none is closed for
// want of room.
const maxIdleConnsPerHost = 16384

// CloseIdleConnections closes the adapter's idle keep-alive connections.
func (c *client) CloseIdleConnections() { c.tr.CloseIdleConnections() }

// Name implements Provider.
func (c *client) Name() string { return c.cfg.Name }

// endpoint joins path to the base URL, keeping the base URL's own query
// (e.g. an Azure-style ?api-version=) and adding q.
func (c *client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + "/" + strings.TrimLeft(path, "/")
	u.RawPath = ""
	if len(q) > 0 {
		all := u.Query()
		for k, vs := range q {
			all[k] = vs
		}
		u.RawQuery = all.Encode()
	}
	return u.String()
}

// key reads the API key; a missing key is an auth error naming the variable.
func (c *client) key(model string) (string, *retry.Error) {
	k, err := c.cfg.APIKey()
	if err != nil {
		return "", &retry.Error{Class: retry.ClassAuth, TypeName: "AuthError", Message: err.Error(),
			Provider: c.cfg.Name, Model: model, Err: err}
	}
	return k, nil
}

// withTimeout bounds one request, its body or stream included, by Config.Timeout
// of the time the process runs: an answer that arrived while the process was
// stopped (SIGSTOP, a suspended VM) is read when it thaws, not cut off by a
// timer that fell due meanwhile and paid for again (internal/pause).
func (c *client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return pause.Process().WithTimeoutCause(ctx, cmp.Or(c.cfg.Timeout, TimeoutDefault), errRequestTimeout)
}

// send makes one request. A non-2xx status comes back as a classified
// *retry.Error (its body read, capped, and closed); so does a transport error.
// On success the caller owns resp.Body.
func (c *client) send(ctx context.Context, method, target string, body any, model, key string, hdr http.Header) (*http.Response, *retry.Error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, &retry.Error{Class: retry.ClassProgramming, TypeName: "EncodeError",
				Message: "encoding request: " + err.Error(), Provider: c.cfg.Name, Model: model, Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return nil, &retry.Error{Class: retry.ClassProgramming, TypeName: "RequestError",
			Message: c.redact(err.Error(), key), Provider: c.cfg.Name, Model: model}
	}
	req.Header.Set("User-Agent", "jetpool")
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if key != "" {
		c.auth(req.Header, key)
	}
	// cfg.Headers last: an operator may override anything, anthropic-version included.
	for k, v := range c.cfg.Headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err, model, key, "")
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	// A read error here leaves a partial body; the status still classifies it.
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxErrorBodyBytes))
	return nil, c.statusError(resp.StatusCode, resp.Header, b, model, key)
}

// statusError normalises a non-2xx response.
func (c *client) statusError(status int, h http.Header, body []byte, model, key string) *retry.Error {
	ae := parseAPIError(body)
	e := &retry.Error{
		Status:       status,
		ProviderType: ae.typ,
		ProviderCode: ae.code,
		Message:      ae.message,
		Provider:     c.cfg.Name,
		Model:        model,
	}
	if e.Message == "" {
		e.Message = bodyPrefix(body)
	}
	if e.Message == "" {
		// Like the vendors' SDKs: "529 status code (no body)" beats an empty
		// message, which the session layer would read as a dropped stream.
		e.Message = fmt.Sprintf("%d status code (no body)", status)
	}
	e.RetryAfter = max(retryAfter(h, c.now()), ae.retryDelay)
	c.finish(e, key)
	if e.Class == retry.ClassRateLimit {
		// Reset headers describe when a bucket refills. Only a rate limit says
		// that bucket is what stopped us; on a 500 they would only delay a retry.
		e.Reset = resetAfter(h, c.now())
	}
	e.RateLimit = rateLimitOf(h, c.now())
	c.capWaits(e)
	return e
}

// finish classifies e (provider knowledge first, then retry.Classify), names
// it and scrubs the key from its message.
func (c *client) finish(e *retry.Error, key string) {
	if e.Class == retry.ClassNone {
		e.Class = c.known(e)
	}
	if e.Class == retry.ClassNone {
		e.Class = retry.Classify(e)
	}
	if e.TypeName == "" {
		e.TypeName = typeName(e)
	}
	e.Message = c.redact(e.Message, key)
}

// typeName picks the stable diagnostic name of an HTTP error.
func typeName(e *retry.Error) string {
	switch {
	case e.ProviderCode == "insufficient_quota" || e.ProviderType == "insufficient_quota":
		return "InsufficientQuotaError"
	case e.Class == retry.ClassServer && (e.Status == 529 || e.ProviderType == "overloaded_error"):
		return "OverloadedError"
	case e.Class == retry.ClassInvalidRequest && e.Status == http.StatusNotFound:
		return "NotFoundError"
	case e.Class == retry.ClassAuth && e.Status == http.StatusForbidden:
		return "PermissionDeniedError"
	case e.Class == retry.ClassUnknown:
		return "APIError"
	}
	return e.Class.TypeName()
}

// transportError normalises an error that is not an HTTP status: no response
// at all, or a body or stream that broke. when says where it broke: "" before
// the response headers, otherwise e.g. "reading response body".
func (c *client) transportError(ctx context.Context, err error, model, key, when string) *retry.Error {
	var re *redirectError
	if errors.As(err, &re) {
		return c.redirectRefused(re, model, key)
	}
	e := &retry.Error{Class: retry.ClassNetwork, Provider: c.cfg.Name, Model: model}
	var ue *url.Error
	if errors.As(err, &ue) {
		// url.Error prints the request URL; a key may ride in its query.
		err = &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
	}
	e.Err = err
	switch {
	case errors.Is(err, errBodyTooLarge):
		// Permanent for this request: the size of an answer follows from the
		// request (its max_tokens, n, the output it asks for), so sending it
		// again downloads the same 32 MiB again, and pays for it again, on
		// every attempt of both layers. It fails at once, and can be replayed
		// (jetpool retry --class invalid_request) once the request or the
		// endpoint is fixed.
		e.Class, e.TypeName = retry.ClassInvalidRequest, "ResponseTooLargeError"
		e.Message = fmt.Sprintf("response body exceeds %d MiB, the most jetpool reads of one answer", MaxBodyBytes>>20)
	case isStreamIdle(ctx):
		ie, _ := streamIdle(ctx) // idle.go
		e.TypeName, e.Message = "StreamIdleError", ie.Error()
		e.Err = fmt.Errorf("%w: %w", ie, err)
	case context.Cause(ctx) == errRequestTimeout:
		e.TypeName = "APITimeoutError"
		e.Message = fmt.Sprintf("request timed out after %s", cmp.Or(c.cfg.Timeout, TimeoutDefault))
		e.Err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	case ctx.Err() != nil:
		// The caller's own context: cancelled (shutdown) or its deadline passed.
		e.TypeName = "APIConnectionError"
		e.Message = ctx.Err().Error()
		e.Err = fmt.Errorf("%w: %w", ctx.Err(), err)
	case when == "":
		e.TypeName = "APIConnectionError"
		e.Message = err.Error()
	default:
		e.TypeName = "NetworkError"
		e.Message = when + ": " + err.Error()
	}
	e.Message = c.redact(e.Message, key)
	return e
}

// streamBroken is the error of a stream that broke mid-flight: a network
// error with an empty message (docs/design.md §3), unless the cause is ours to name
// (our timeout, the caller's cancellation, the size cap) or the stream was
// garbage (see badStream).
func (c *client) streamBroken(ctx context.Context, err error, model, key string) *retry.Error {
	var bad *badStreamError
	switch {
	case errors.Is(err, errBodyTooLarge) || ctx.Err() != nil:
		return c.transportError(ctx, err, model, key, "reading stream")
	case errors.As(err, &bad):
		return c.badStream(bad, model, key)
	}
	return &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
		Provider: c.cfg.Name, Model: model, Err: err}
}

// badStream is the error of a stream that is not what it should be, named
// with its first bytes, quoted and clipped:
//
//   - an event cut short (its JSON stops where the stream did) is a network
//     error, like any stream that broke mid-flight;
//   - a body that is not SSE but is a JSON error (a gateway that answered a
//     stream request with {"error": …} and a 200) is that error;
//   - anything else is classified by its words, as an error event's text is
//     (retry.Classify): an HTML "502 Bad Gateway" page is a server error, a
//     plain "Error 429" a rate limit; garbage that says nothing known is an
//     InvalidResponseError of class unknown, like a 2xx body that is not
//     JSON (decodeBody): the session layer does not retry it, the exec layer
//     does.
func (c *client) badStream(bad *badStreamError, model, key string) *retry.Error {
	if bad.cut() {
		return &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
			Message:  c.redact("stream ended inside an event: "+quoteHead(bad.data), key),
			Provider: c.cfg.Name, Model: model, Err: bad.err}
	}
	if bad.err == nil && parseAPIError(bad.data) != (apiError{}) {
		return c.inBandError(bad.data, model, key)
	}
	// Err is the decoding error alone: the data may echo what the message redacts.
	e := &retry.Error{Message: bodyPrefix(bad.data), Provider: c.cfg.Name, Model: model, Err: bad.err}
	c.finish(e, key)
	if e.Class == retry.ClassUnknown {
		e.TypeName = "InvalidResponseError"
	}
	e.Message = c.redact(bad.Error(), key)
	return e
}

// readBody reads a successful, non-streamed body under MaxBodyBytes.
func (c *client) readBody(ctx context.Context, resp *http.Response, model, key string) ([]byte, *retry.Error) {
	b, err := io.ReadAll(&capReader{r: resp.Body, n: MaxBodyBytes})
	if err != nil {
		return nil, c.transportError(ctx, err, model, key, "reading response body")
	}
	return b, nil
}

// decodeBody decodes a 2xx JSON body. A body cut short is a network error,
// not a schema problem: "unexpected end of JSON input" means the bytes stopped,
// not that the model said something wrong.
func (c *client) decodeBody(b []byte, v any, model, key string) *retry.Error {
	err := json.Unmarshal(b, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	if len(bytes.TrimSpace(b)) == 0 || (errors.As(err, &se) && se.Offset >= int64(len(b))) {
		return &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
			Message: "truncated response body: " + err.Error(), Provider: c.cfg.Name, Model: model, Err: err}
	}
	// Not JSON at all (a proxy's HTML page, say): nothing we know; the exec layer may retry.
	e := &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
		Message:  "decoding response: " + err.Error() + ": " + bodyPrefix(b),
		Provider: c.cfg.Name, Model: model, Err: err}
	e.Message = c.redact(e.Message, key)
	return e
}

// inBandError normalises an error that arrives inside a 2xx body or an SSE
// stream ({"error":{...}} or Anthropic's event: error).
func (c *client) inBandError(data []byte, model, key string) *retry.Error {
	ae := parseAPIError(data)
	e := &retry.Error{ProviderType: ae.typ, ProviderCode: ae.code, Message: ae.message,
		RetryAfter: ae.retryDelay, Provider: c.cfg.Name, Model: model}
	if ae.status >= 400 {
		e.Status = ae.status // e.g. OpenRouter's {"error":{"code":502,...}}
	}
	if e.Message == "" {
		e.Message = bodyPrefix(data)
	}
	c.finish(e, key)
	c.capWaits(e)
	return e
}

// secretParam matches a credential in a URL query.
var secretParam = regexp.MustCompile(`(?i)([?&](?:key|api[_-]?key|access_token|token|sig|signature)=)[^&#\s"]*`)

// redact removes the key, and any credential-looking query parameter, from s.
func (c *client) redact(s, key string) string {
	if key != "" {
		s = strings.ReplaceAll(s, key, "[REDACTED]")
	}
	return secretParam.ReplaceAllString(s, "${1}REDACTED")
}

// redactURL drops credentials from a URL: its password and secret query values.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		u.User = url.User(u.User.Username())
		raw = u.String()
	}
	return secretParam.ReplaceAllString(raw, "${1}REDACTED")
}

// capReader fails with errBodyTooLarge once more than n bytes were read.
type capReader struct {
	r io.Reader
	n int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.n < 0 {
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > c.n+1 {
		p = p[:c.n+1]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if c.n < 0 {
		return n, errBodyTooLarge
	}
	return n, err
}

// mergeParams copies params under body's own fields: what the adapter sets
// (model, messages, stream…) wins.
func mergeParams(params map[string]any, body map[string]any) map[string]any {
	out := make(map[string]any, len(params)+len(body))
	for k, v := range params {
		out[k] = v
	}
	for k, v := range body {
		out[k] = v
	}
	return out
}
