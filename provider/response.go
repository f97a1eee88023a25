package provider

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// invalidResponse is the error of a 2xx body that is JSON but not the
// answer its wire format promises: no choices or candidates, a message of
// the wrong shape (content 12345), a content block without its text. Never
// an empty success: the answer was not understood.
//
// Its class is unknown: the session layer does not call again at once, the
// exec layer redelivers after its backoff. A malformed 200 most often comes
// from a gateway or proxy in a bad state, which a later delivery may find
// mended; when the shape is the endpoint's steady habit, redelivery spends
// at most max_deliveries calls on it before the record is dead-lettered
// (reason exhausted) with the shape named in its error.
func (c *client) invalidResponse(model, what string) *retry.Error {
	return &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
		Message: "malformed response: " + what, Provider: c.cfg.Name, Model: model}
}

// jsonKind names the JSON type of raw, for an error message.
func jsonKind(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "missing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "a list"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// timed runs an adapter's call and sets the answer's Latency.
func timed(call func() (Response, error)) (Response, error) {
	start := time.Now()
	out, err := call()
	if err == nil {
		out.Latency = time.Since(start)
	}
	return out, err
}

// answer reads a successful response: as a stream when one was asked for
// and the server sent one, else as a body parsed by decode (a server may
// answer a stream request with plain JSON: its text is then one delta).
func (c *client) answer(ctx context.Context, resp *http.Response, req Request, key string,
	stream func(context.Context, io.Reader, Request, string) (Response, error),
	decode func(b []byte, model, key string) (Response, *retry.Error)) (res Response, err error) {
	defer c.noteRateLimit(resp.Header, &res, &err) // http.go
	if req.Stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return stream(ctx, resp.Body, req, key)
	}
	b, rerr := c.readBody(ctx, resp, req.Model, key)
	if rerr != nil {
		return Response{}, rerr
	}
	out, rerr := decode(b, req.Model, key)
	if rerr != nil {
		return Response{}, rerr
	}
	if req.Stream && req.OnDelta != nil && out.Text != "" {
		req.OnDelta(out.Text)
	}
	return out, nil
}
