package provider

import (
	"bytes"
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
