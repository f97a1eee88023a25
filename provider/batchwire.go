package provider

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jetpool/jetpool/retry"
)

// Wire exposes an adapter's wire format to the batch package: the request
// body an online call would send, the parsing of a response body, and the
// normalisation of errors. Batch requests are therefore built, and their
// per-entry errors classified, exactly like online calls (docs/design.md §1).
type Wire struct {
	c     *client
	kind  string
	body  func(Request) (map[string]any, *retry.Error)
	parse func(b []byte, model string) (Response, *retry.Error)
}

// NewWire returns the wire format of cfg's kind (openai or anthropic).
func NewWire(cfg Config) (*Wire, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	switch cfg.Kind {
	case KindOpenAI:
		p, err := newOpenAI(cfg)
		if err != nil {
			return nil, err
		}
		o := p.(*openAI)
		return &Wire{c: o.client, kind: KindOpenAI, body: o.body, parse: o.parse}, nil
	case KindAnthropic:
		p, err := newAnthropic(cfg)
		if err != nil {
			return nil, err
		}
		a := p.(*anthropic)
		return &Wire{c: a.client, kind: KindAnthropic, body: a.body, parse: a.parse}, nil
	}
	return nil, fmt.Errorf("provider %s: kind %q has no batch wire format", cfg.Name, cfg.Kind)
}

// Kind is the adapter kind.
func (w *Wire) Kind() string { return w.kind }

// Config is the provider entry.
func (w *Wire) Config() Config { return w.c.cfg }

// Endpoint joins path to the provider's base URL.
func (w *Wire) Endpoint(path string) string { return w.c.endpoint(path, nil) }

// HTTP is the adapter's HTTP client (no client timeout: use WithTimeout).
func (w *Wire) HTTP() *http.Client { return w.c.http }

// WithTimeout bounds one request by the provider's timeout.
func (w *Wire) WithTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return w.c.withTimeout(ctx)
}

// Key reads the API key; a missing key is an auth error.
func (w *Wire) Key(model string) (string, error) {
	k, err := w.c.key(model)
	if err != nil {
		return "", err
	}
	return k, nil
}

// Auth sets the credentials (and, for anthropic, the version header) on h.
func (w *Wire) Auth(h http.Header, key string) {
	if key != "" {
		w.c.auth(h, key)
	}
	if w.kind == KindAnthropic {
		h.Set("Anthropic-Version", AnthropicVersion)
	}
	h.Set("User-Agent", "jetpool")
	for k, v := range w.c.cfg.Headers {
		h.Set(k, v)
	}
}

// Body is the JSON body of a non-streamed call of req; the error is a
// request the wire format cannot carry (a document URL on OpenAI, say).
func (w *Wire) Body(req Request) (map[string]any, error) {
	req.Stream, req.OnDelta = false, nil
	b, err := w.body(req)
	if err != nil {
		return nil, err
	}
	delete(b, "stream")
	return b, nil
}

// Response parses a successful response body (a chat.completion, or an
// Anthropic message).
func (w *Wire) Response(body []byte, model string) (Response, error) {
	r, err := w.parse(body, model)
	if err != nil {
		return Response{}, err
	}
	return r, nil
}

// StatusError normalises an HTTP error: status, headers and body.
func (w *Wire) StatusError(status int, h http.Header, body []byte, model, key string) *retry.Error {
	if h == nil {
		h = http.Header{}
	}
	return w.c.statusError(status, h, body, model, key)
}

// InBandError normalises an error object that came without an HTTP status
// (an error file line, an errored batch result).
func (w *Wire) InBandError(body []byte, model, key string) *retry.Error {
	return w.c.inBandError(body, model, key)
}

// TransportError normalises a transport error (no response, or a body that
// broke while reading; when says where, "" for before the headers).
func (w *Wire) TransportError(ctx context.Context, err error, model, key, when string) *retry.Error {
	return w.c.transportError(ctx, err, model, key, when)
}

// parse is the non-streamed body parsing of Call.
func (p *openAI) parse(b []byte, model string) (Response, *retry.Error) {
	return p.decode(b, model, "")
}

// parse is the non-streamed body parsing of Call.
func (p *anthropic) parse(b []byte, model string) (Response, *retry.Error) {
	return p.decode(b, model, "")
}
