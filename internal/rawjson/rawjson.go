// Package rawjson reads JSON without decoding it: a validating scan and a
// walk over top-level keys (gjson), with values handed out as slices of the
// input rather than copies. The worker's envelope and the dispatcher's
// input lines go through it once per record.
package rawjson

import (
	"encoding/json"
	"errors"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Check reports whether b is valid JSON. On invalid input it returns
// encoding/json's error, which names the offset and what was found there.
func Check(b []byte) error {
	if gjson.ValidBytes(b) {
		return nil
	}
	var probe any
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	return errors.New("invalid JSON")
}

// Parse parses b without copying it: the strings the result hands out share
// b's bytes, so b must not be written to afterwards (a received message's
// data or a freshly read line never is).
func Parse(b []byte) gjson.Result {
	if len(b) == 0 {
		return gjson.Result{}
	}
	return gjson.Parse(unsafe.String(&b[0], len(b)))
}

// Slice is v's raw text as a slice of b, the bytes v was parsed from (a
// copy when gjson did not report where v stands).
func Slice(b []byte, v gjson.Result) json.RawMessage {
	if v.Index > 0 && v.Index+len(v.Raw) <= len(b) {
		return b[v.Index : v.Index+len(v.Raw) : v.Index+len(v.Raw)]
	}
	return json.RawMessage(v.Raw)
}

// Kind names v's JSON type, for error messages.
func Kind(v gjson.Result) string {
	switch {
	case v.IsObject():
		return "object"
	case v.IsArray():
		return "array"
	case v.Type == gjson.String:
		return "string"
	case v.Type == gjson.Number:
		return "number"
	case v.Type == gjson.True, v.Type == gjson.False:
		return "boolean"
	default:
		return "null"
	}
}
