package expect

import (
	"fmt"
	"strings"
)

// Cause is why an output fails its expectation.
type Cause string

// The causes of a Violation.
const (
	// CauseNoJSON: the output holds no JSON value at all.
	CauseNoJSON Cause = "no_json"
	// CauseInvalidJSON: the output holds something that starts like JSON
	// but does not parse.
	CauseInvalidJSON Cause = "invalid_json"
	// CauseTruncated: the provider stopped at the token limit (finish
	// reason "length") before the JSON value was complete.
	CauseTruncated Cause = "truncated"
	// CauseSchema: the JSON value does not satisfy the schema.
	CauseSchema Cause = "schema"
)

// Violation is returned by Check and Extract when an output fails its
// expectation. Match it with errors.As.
type Violation struct {
	Cause    Cause
	Detail   string    // for CauseInvalidJSON: the parser's words; for CauseNoJSON: optional
	Problems []Problem // for CauseSchema: every schema error, sorted by path
	Output   string    // the output as the model returned it
}

// Error is the one-line diagnostic, without the output:
//
//	output truncated at max_tokens (finish reason length)
//	invalid JSON: invalid character 'T' looking for beginning of value
//	2 schema errors: at (root): missing property 'author'; at /year: got string, want integer
func (v *Violation) Error() string {
	switch v.Cause {
	case CauseTruncated:
		return "output truncated at max_tokens (finish reason length)"
	case CauseInvalidJSON:
		return "invalid JSON: " + v.Detail
	case CauseSchema:
		noun := "schema errors"
		if len(v.Problems) == 1 {
			noun = "schema error"
		}
		return fmt.Sprintf("%d %s: %s", len(v.Problems), noun, joinProblems(v.Problems))
	}
	if v.Detail != "" {
		return "no JSON value in the output: " + v.Detail
	}
	return "no JSON value in the output"
}

// correctionTail ends every correction: models that wrapped JSON in prose
// or fences are asked not to, though Extract would cope.
const correctionTail = "Reply again with only the corrected JSON value: no explanation and no code fences."

// Correction is the user message a repair sends after the invalid output,
// naming what is wrong (for a schema violation, each error with its
// instance path) and asking for the value again.
func (v *Violation) Correction() string {
	var sb strings.Builder
	switch v.Cause {
	case CauseTruncated:
		sb.WriteString("Your previous reply was cut off at the output token limit before the JSON value was complete. ")
		sb.WriteString("Reply again with the complete JSON value only, keeping it short enough to fit: no explanation and no code fences.")
		return sb.String()
	case CauseInvalidJSON:
		fmt.Fprintf(&sb, "Your previous reply is not valid JSON (%s).\n", v.Detail)
	case CauseSchema:
		sb.WriteString("Your previous reply does not match the required JSON Schema:\n")
		for _, p := range v.Problems {
			fmt.Fprintf(&sb, "- at %s: %s\n", p.Path, p.Reason)
		}
	default:
		sb.WriteString("Your previous reply contains no JSON value.\n")
	}
	sb.WriteString(correctionTail)
	return sb.String()
}
