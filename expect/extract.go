package expect

import (
	"encoding/json"
	"errors"
	"io"
	"regexp"
	"strings"
)

// MaxCandidates bounds how many '{' or '[' positions Extract tries in one
// text, so a long answer full of braces costs O(MaxCandidates·n), not O(n²).
const MaxCandidates = 16

// fence is a Markdown code fence: its language tag and body. An unclosed
// fence (a truncated answer) runs to the end of the text.
var fence = regexp.MustCompile("(?s)```[ \\t]*([A-Za-z0-9_+-]*)[^\\n]*\\n(.*?)(?:```|$)")

// Extract finds the JSON value in a model's output: the whole text when it
// is one JSON value; else the body of the first ```json fence (or of the
// first fence of any language); else the first object or array that starts
// anywhere in the text. Whatever follows the value is ignored. Numbers are
// json.Number. The error is a *Violation (CauseNoJSON or CauseInvalidJSON)
// whose Output is text.
func Extract(text string) (any, error) {
	trimmed := strings.TrimSpace(text)
	if trimmed == "" {
		return nil, &Violation{Cause: CauseNoJSON, Detail: "the output is empty", Output: text}
	}
	if v, err := decodeAll(trimmed); err == nil {
		return v, nil
	}
	var firstErr error
	for _, body := range fenceBodies(trimmed) {
		v, err := scan(body)
		if err == nil {
			return v, nil
		}
		if firstErr == nil && !errors.Is(err, errNoJSON) {
			firstErr = err
		}
	}
	v, err := scan(trimmed)
	if err == nil {
		return v, nil
	}
	if firstErr == nil {
		firstErr = err
	}
	if errors.Is(firstErr, errNoJSON) {
		return nil, &Violation{Cause: CauseNoJSON, Output: text}
	}
	return nil, &Violation{Cause: CauseInvalidJSON, Detail: parseDetail(firstErr), Output: text}
}

// fenceBodies returns the bodies of the text's code fences, those tagged
// json first.
func fenceBodies(text string) []string {
	var tagged, other []string
	for _, m := range fence.FindAllStringSubmatch(text, -1) {
		if strings.EqualFold(m[1], "json") {
			tagged = append(tagged, m[2])
		} else {
			other = append(other, m[2])
		}
	}
	return append(tagged, other...)
}

var errNoJSON = errors.New("no JSON value")

// scan decodes the first object or array that parses, trying each of the
// first MaxCandidates positions of '{' or '['. Its error is the first
// candidate's, or errNoJSON when there was none.
func scan(text string) (any, error) {
	var firstErr error
	for i, n := 0, 0; n < MaxCandidates; n++ {
		j := strings.IndexAny(text[i:], "{[")
		if j < 0 {
			break
		}
		i += j
		v, err := decodeFirst(text[i:])
		if err == nil {
			return v, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		i++
	}
	if firstErr == nil {
		return nil, errNoJSON
	}
	return nil, firstErr
}

// decodeFirst decodes the JSON value at the start of s, ignoring what follows.
func decodeFirst(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// decodeAll decodes s as exactly one JSON value.
func decodeAll(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

// parseDetail words a decoding error for people and models.
func parseDetail(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of JSON input (the value is cut off)"
	}
	return oneLine(err.Error())
}
