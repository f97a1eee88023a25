// Package rawjson reads JSON without decoding it: a validating scan and a
// walk over top-level keys, with values handed out as slices of the input
// rather than copies. The worker's envelope and the dispatcher's input
// lines go through it once per record.
package rawjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strconv"
	"unsafe"
)

// Members validates b as one JSON object (white space around it allowed)
// and calls fn with each of its top-level members in order: the key,
// unescaped, and the value's raw text, a slice of b. fn returning false
// stops the walk (b is then not checked past that member). An invalid b
// gets encoding/json's error, which names the offset and what was found
// there; a valid b that is not an object gets ErrNotObject.
//
// It is the hot path of the dispatcher (every input line, twice) and of
// the worker (every work envelope): one pass, no allocation (a key is a
// view of b unless it holds an escape), strings scanned eight bytes at a
// time. The key handed to fn is only valid during the call when b is
// later written to; b must not change while Members runs.
func Members(b []byte, fn func(key string, value []byte) bool) error {
	s := scanner{b: b}
	s.space()
	if s.i >= len(b) || b[s.i] != '{' {
		if s.value(0) && s.end() {
			return ErrNotObject
		}
		return s.fail()
	}
	if !s.object(0, fn) {
		if s.stopped {
			return nil
		}
		return s.fail()
	}
	if !s.end() {
		return s.fail()
	}
	return nil
}

// ErrNotObject is returned by Members for valid JSON that is not an object.
var ErrNotObject = errors.New("not a JSON object")

// Valid reports whether b is one valid JSON value, as encoding/json.Valid
// does, in Members' one pass.
func Valid(b []byte) bool {
	s := scanner{b: b}
	s.space()
	return s.value(0) && s.end()
}

// String decodes a JSON string's raw text (quotes included), as Members
// hands it out: a view of raw when it holds no escape, a copy otherwise.
// ok is false when raw is not a valid JSON string.
func String(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') >= 0 {
		if !Valid(raw) {
			return "", false
		}
		return unescape(raw), true
	}
	if len(body) == 0 {
		return "", true
	}
	return unsafe.String(&body[0], len(body)), true
}

// View is b as a string that shares b's bytes (b must not change while
// the string is in use).
func View(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Number is a JSON number's raw text as a float64 (0 when it is not one).
func Number(raw []byte) float64 {
	f, _ := strconv.ParseFloat(View(raw), 64)
	return f
}

// KindOf names the JSON type of a raw value, for error messages.
func KindOf(raw []byte) string {
	if len(raw) == 0 {
		return "null"
	}
	switch raw[0] {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// unescape decodes a valid JSON string holding an escape (a copy). Apart,
// so that its result alone is allocated, not every key's.
func unescape(raw []byte) string {
	var v string
	_ = json.Unmarshal(raw, &v)
	return v
}

// maxDepth bounds nesting, as encoding/json does.
const maxDepth = 10000

type scanner struct {
	b       []byte
	i       int
	stopped bool // by fn, not by an error
}

// fail is the error for b: encoding/json's own, which says where and what.
func (s *scanner) fail() error {
	var probe any
	if err := json.Unmarshal(s.b, &probe); err != nil {
		return err
	}
	return errors.New("invalid JSON")
}

func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// open steps over the '{' or '[' at s.i and the space after it: empty when
// the next byte is end (and steps over it too); not ok past maxDepth.
func (s *scanner) open(depth int, end byte) (empty, ok bool) {
	if depth >= maxDepth {
		return false, false
	}
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == end {
		s.i++
		return true, true
	}
	return false, true
}

// object scans an object at s.i ('{'), calling fn (when not nil) with its
// members. False on an error, or when fn stopped it.
func (s *scanner) object(depth int, fn func(string, []byte) bool) bool {
	if empty, ok := s.open(depth, '}'); empty || !ok {
		return ok
	}
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		k0 := s.i
		esc, ok := s.str()
		if !ok {
			return false
		}
		k1 := s.i
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		v0 := s.i
		if !s.value(depth + 1) {
			return false
		}
		if fn != nil {
			var key string
			if esc {
				key = unescape(s.b[k0:k1]) // str checked it
			} else if k1-k0 > 2 {
				key = unsafe.String(&s.b[k0+1], k1-k0-2)
			}
			if !fn(key, s.b[v0:s.i:s.i]) {
				s.stopped = true
				return false
			}
		}
		if more, ok := s.sep('}'); !more {
			return ok
		}
	}
}

// sep reads what follows a member or an element: a comma (more), or the
// closing bracket; anything else is an error (ok false).
func (s *scanner) sep(closing byte) (more, ok bool) {
	s.space()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.space()
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}

func (s *scanner) value(depth int) bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '{':
		return s.object(depth, nil)
	case '[':
		return s.array(depth)
	case '"':
		_, ok := s.str()
		return ok
	case 't':
		return s.lit("true")
	case 'f':
		return s.lit("false")
	case 'n':
		return s.lit("null")
	default:
		if c == '-' || c >= '0' && c <= '9' {
			return s.number()
		}
		return false
	}
}

func (s *scanner) array(depth int) bool {
	if empty, ok := s.open(depth, ']'); empty || !ok {
		return ok
	}
	for {
		if !s.value(depth + 1) {
			return false
		}
		if more, ok := s.sep(']'); !more {
			return ok
		}
	}
}

func (s *scanner) lit(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *scanner) number() bool {
	b, i := s.b, s.i
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == d {
			return false
		}
	}
	s.i = i
	return true
}

// Eight copies of a byte, for the word-at-a-time string scan.
const (
	ones    = 0x0101010101010101
	highs   = 0x8080808080808080
	quotes  = '"' * ones
	slashes = '\\' * ones
)

// special reports whether any byte of the word x is a quote, a backslash
// or a control character (below 0x20): the bytes a string scan must stop
// at. (x - ones*n) & ^x & highs is non-zero when some byte is below n, and
// a byte equal to c is a zero byte of x ^ c*ones.
func special(x uint64) bool {
	q, bs := x^quotes, x^slashes
	return ((x-ones*0x20)&^x|(q-ones)&^q|(bs-ones)&^bs)&highs != 0
}

// str scans a string at s.i ('"'); esc reports whether it holds an escape.
func (s *scanner) str() (esc, ok bool) {
	b := s.b
	i := s.i + 1
	for {
		for i+16 <= len(b) {
			w := b[i : i+16 : i+16]
			if special(binary.LittleEndian.Uint64(w)) || special(binary.LittleEndian.Uint64(w[8:])) {
				break
			}
			i += 16
		}
		for i+8 <= len(b) && !special(binary.LittleEndian.Uint64(b[i:i+8:i+8])) {
			i += 8
		}
		if i >= len(b) {
			return esc, false
		}
		switch c := b[i]; {
		case c == '"':
			s.i = i + 1
			return esc, true
		case c == '\\':
			esc = true
			i++
			if i >= len(b) {
				return esc, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i++
			case 'u':
				if i+4 >= len(b) || !hex(b[i+1]) || !hex(b[i+2]) || !hex(b[i+3]) || !hex(b[i+4]) {
					return esc, false
				}
				i += 5
			default:
				return esc, false
			}
		case c < 0x20:
			return esc, false
		default:
			i++
		}
	}
}

func hex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// MembersOf is Members for an object already validated (by Members, say,
// as part of a larger document): the same members, without checking the
// text again. Strings are skipped with a search for their closing quote, so
// a long field costs next to nothing. b must be valid JSON; on anything
// else it stops where it cannot go on, without an error.
func MembersOf(b []byte, fn func(key string, value []byte) bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return
	}
	i = skipSpace(b, i+1)
	for i < len(b) && b[i] == '"' {
		k0 := i
		i = skipString(b, i)
		k1 := i
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ':' {
			return
		}
		i = skipSpace(b, i+1)
		v0 := i
		i = skipValue(b, i)
		if i <= v0 {
			return
		}
		var key string
		if k1-k0 > 2 {
			key = unsafe.String(&b[k0+1], k1-k0-2)
			if bytes.IndexByte(b[k0+1:k1-1], '\\') >= 0 {
				key = unescape(b[k0:k1])
			}
		}
		if !fn(key, b[v0:i:i]) {
			return
		}
		i = skipSpace(b, i)
		if i >= len(b) || b[i] != ',' {
			return
		}
		i = skipSpace(b, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString is the end of the valid string at b[i] ('"').
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		i += j
		// A quote after an odd run of backslashes is escaped.
		n := 0
		for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
			n++
		}
		i++
		if n%2 == 0 {
			return i
		}
	}
}

// skipValue is the end of the valid value at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default:
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}
