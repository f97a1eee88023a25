package provider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// sseEvent is one server-sent event: its event: field and its data: lines joined.
type sseEvent struct {
	event string
	data  []byte
}

// sseReader reads server-sent events (text/event-stream) from a body capped at
// MaxBodyBytes: a line longer than the whole cap fails the same way.
type sseReader struct {
	r *bufio.Reader
	// started is set by the first line that is SSE; until then a line that
	// is not means the body is not a stream at all (see badStreamError).
	started bool
	// idle hears of keep-alive comments (idle.go); nil: nobody listens.
	idle *idleWatch
}

func newSSEReader(body io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(&capReader{r: body, n: MaxBodyBytes}, 64<<10)}
}

// next returns the next event with data. It returns io.EOF at a clean end of
// the stream; any other error means the stream broke (io.ErrUnexpectedEOF for
// a chunked body cut short, errBodyTooLarge past the cap), or a
// *badStreamError when the body is not SSE.
//
// llama.cpp's server (some builds) reports an error in a stream as an
// "error: {json}" line, a field SSE does not define. It is delivered as an
// event named "error" whose data is {"error": <the value>}: the envelope all
// three adapters already read as an error.
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data [][]byte
	var errData []byte
	for {
		line, err := s.line()
		if err != nil {
			if err == io.EOF && (len(data) > 0 || errData != nil) {
				// A last event without its blank line: deliver it; a cut JSON
				// payload will fail to decode and be treated as a broken stream.
				return dispatch(ev, data, errData), nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 { // dispatch
			if len(data) > 0 || errData != nil {
				return dispatch(ev, data, errData), nil
			}
			ev = sseEvent{}
			continue
		}
		if !s.started {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a BOM may open the stream
			if len(line) == 0 {
				continue
			}
			if !sseLine(line) {
				return sseEvent{}, s.notSSE(line)
			}
			s.started = true
		}
		if line[0] == ':' { // comment (keep-alive)
			s.idle.keepalive()
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.event = string(value)
		case "data":
			data = append(data, bytes.Clone(value))
		case "error":
			errData = errorEnvelope(value)
		}
	}
}

func dispatch(ev sseEvent, data [][]byte, errData []byte) sseEvent {
	if errData != nil {
		return sseEvent{event: "error", data: errData}
	}
	ev.data = bytes.Join(data, []byte("\n"))
	return ev
}

// errorEnvelope wraps the value of an "error:" line as {"error": value}; a
// value that is not JSON becomes a JSON string.
func errorEnvelope(value []byte) []byte {
	v := bytes.TrimSpace(value)
	if !json.Valid(v) {
		v, _ = json.Marshal(string(v))
	}
	return append(append([]byte(`{"error":`), v...), '}')
}

// sseLine reports whether a line (not empty) is one an event stream can
// open with: a comment, or one of SSE's fields (or llama.cpp's "error").
func sseLine(line []byte) bool {
	if line[0] == ':' {
		return true
	}
	field, _, _ := bytes.Cut(line, []byte(":"))
	switch string(field) {
	case "data", "event", "id", "retry", "error":
		return true
	}
	return false
}

// notSSE reads what follows the first line, up to MaxErrorBodyBytes: a body
// that is not an event stream is most often an error (a gateway's JSON
// error, an HTML page) sent with a 200.
func (s *sseReader) notSSE(first []byte) error {
	rest, _ := io.ReadAll(io.LimitReader(s.r, MaxErrorBodyBytes))
	body := append(append(bytes.Clone(first), '\n'), rest...)
	return &badStreamError{what: "response is not an SSE stream", data: body}
}

// badStreamError is a stream that is not what it should be: a body that is
// not SSE at all, or an event whose data does not decode. streamBroken names
// it, with the first bytes quoted.
type badStreamError struct {
	what string // what was wrong
	data []byte // the body read so far, or the event's data
	err  error  // the decoding error of an event, nil for a body that is not SSE
}

func (e *badStreamError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("%s: %v: %s", e.what, e.err, quoteHead(e.data))
	}
	return e.what + ": " + quoteHead(e.data)
}

func (e *badStreamError) Unwrap() error { return e.err }

// badEvent is the error of an event whose data did not decode (err).
func badEvent(data []byte, err error) *badStreamError {
	return &badStreamError{what: "stream event does not decode", data: data, err: err}
}

// cut reports whether the event's JSON stops short ("unexpected end of JSON
// input"): the bytes stopped, the stream was cut mid-event.
func (e *badStreamError) cut() bool {
	var se *json.SyntaxError
	return e.err != nil && errors.As(e.err, &se) && se.Offset >= int64(len(e.data))
}

// headLen is how much of a bad stream a message quotes.
const headLen = 120

// quoteHead is b's first headLen bytes, quoted, with "…" when clipped.
func quoteHead(b []byte) string {
	return strconv.Quote(truncate(string(b), headLen))
}

// line reads one line without its \n or \r\n.
func (s *sseReader) line() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			// A long line: the capReader below bounds it. Its bytes are
			// an event arriving, not a keep-alive: progress (idle.go).
			s.idle.progress()
			continue
		}
		if err != nil {
			if err == io.EOF && len(buf) > 0 {
				return bytes.TrimRight(buf, "\r\n"), nil
			}
			return nil, err
		}
		return bytes.TrimRight(buf, "\r\n"), nil
	}
}
