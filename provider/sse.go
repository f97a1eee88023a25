package provider

import (
	"bufio"
	"bytes"
	"io"
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
}

func newSSEReader(body io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(&capReader{r: body, n: MaxBodyBytes}, 64<<10)}
}

// next returns the next event with data. It returns io.EOF at a clean end of
// the stream; any other error means the stream broke (io.ErrUnexpectedEOF for
// a chunked body cut short, errBodyTooLarge past the cap).
func (s *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	var data [][]byte
	for {
		line, err := s.line()
		if err != nil {
			if err == io.EOF && len(data) > 0 {
				// A last event without its blank line: deliver it; a cut JSON
				// payload will fail to decode and be treated as a broken stream.
				ev.data = bytes.Join(data, []byte("\n"))
				return ev, nil
			}
			return sseEvent{}, err
		}
		if len(line) == 0 { // dispatch
			if len(data) > 0 {
				ev.data = bytes.Join(data, []byte("\n"))
				return ev, nil
			}
			ev = sseEvent{}
			continue
		}
		if line[0] == ':' { // comment (keep-alive)
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			ev.event = string(value)
		case "data":
			data = append(data, bytes.Clone(value))
		}
	}
}

// line reads one line without its \n or \r\n.
func (s *sseReader) line() ([]byte, error) {
	var buf []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		buf = append(buf, chunk...)
		if err == bufio.ErrBufferFull {
			continue // a long line: the capReader below bounds it
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
