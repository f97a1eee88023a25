package expect

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaBase and schemaURL are the address a compiled schema is known by:
// not a file URL, and every reference that leaves the schema goes to
// noLoader, so a $ref can never read a file or the network.
const (
	schemaBase = "jetpool:///"
	schemaURL  = schemaBase + "schema.json"
)

var printer = message.NewPrinter(language.English)

// Checker checks outputs against one expectation. It is safe for concurrent
// use. The zero Checker (or a nil *Checker) asks only for parseable JSON.
type Checker struct {
	schema *jsonschema.Schema
}

// New compiles schema into a Checker; a nil schema asks only for parseable
// JSON (expect.format: json). The error is returned when the schema itself
// is invalid, as CheckSchema words it.
func New(schema map[string]any) (*Checker, error) {
	if schema == nil {
		return &Checker{}, nil
	}
	s, err := compile(schema)
	if err != nil {
		return nil, err
	}
	return &Checker{schema: s}, nil
}

// CheckSchema reports whether schema is a valid JSON Schema, on one line:
// "not a valid JSON Schema: at /type: value must be one of 'array', …".
// It is workflow.SchemaCheck.
func CheckSchema(schema map[string]any) error {
	_, err := compile(schema)
	return err
}

// noLoader refuses every external reference: a schema must be whole.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external $ref %s is not supported: put the definition under $defs", strings.TrimPrefix(url, schemaBase))
}

func compile(schema map[string]any) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, schema); err != nil {
		return nil, schemaError(err)
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, schemaError(err)
	}
	return s, nil
}

// schemaError words a compile error on one line, without the library's
// internal URLs.
func schemaError(err error) error {
	var sve *jsonschema.SchemaValidationError
	if errors.As(err, &sve) {
		var ve *jsonschema.ValidationError
		if errors.As(sve.Err, &ve) {
			return fmt.Errorf("not a valid JSON Schema: %s", joinProblems(problems(ve)))
		}
		return fmt.Errorf("not a valid JSON Schema: %s", oneLine(sve.Err.Error()))
	}
	var le *jsonschema.LoadURLError
	if errors.As(err, &le) {
		return fmt.Errorf("not a valid JSON Schema: %s", oneLine(le.Err.Error()))
	}
	return fmt.Errorf("not a valid JSON Schema: %s", oneLine(strings.ReplaceAll(err.Error(), schemaURL, "schema")))
}

// Check extracts the JSON value from text (see Extract) and validates it.
// finishReason is the provider's normalised finish reason; "length" turns an
// unparseable output into CauseTruncated. It returns the parsed value (JSON
// numbers as json.Number, so that large integers survive) or a *Violation.
func (c *Checker) Check(text, finishReason string) (any, error) {
	v, err := Extract(text)
	if err != nil {
		var viol *Violation
		if errors.As(err, &viol) && finishReason == "length" {
			viol.Cause, viol.Detail = CauseTruncated, ""
		}
		return nil, err
	}
	if c == nil || c.schema == nil {
		return v, nil
	}
	if err := c.schema.Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, &Violation{Cause: CauseSchema, Problems: []Problem{{Path: rootPath, Reason: oneLine(err.Error())}}, Output: text}
		}
		return nil, &Violation{Cause: CauseSchema, Problems: problems(ve), Output: text}
	}
	return v, nil
}

// rootPath names the whole value in a Problem.
const rootPath = "(root)"

// Problem is one schema error.
type Problem struct {
	Path   string // JSON pointer of the instance location, e.g. "/authors/0/name"; "(root)" for the whole value
	Reason string // the validator's words, e.g. "missing property 'author'", "got string, want integer"
}

func (p Problem) String() string { return p.Path + ": " + p.Reason }

// problems flattens a validation error into its leaves, which say what is
// wrong (the inner nodes only say "'allOf' failed"), sorted by path so the
// order does not depend on map iteration.
func problems(ve *jsonschema.ValidationError) []Problem {
	var out []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			path := rootPath
			if len(e.InstanceLocation) > 0 {
				path = pointer(e.InstanceLocation)
			}
			out = append(out, Problem{Path: path, Reason: oneLine(e.ErrorKind.LocalizedString(printer))})
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	slices.SortFunc(out, func(a, b Problem) int {
		ra, rb := a.Path == rootPath, b.Path == rootPath
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Reason, b.Reason))
	})
	return slices.Compact(out)
}

// pointer is an RFC 6901 JSON pointer.
func pointer(tokens []string) string {
	var sb strings.Builder
	r := strings.NewReplacer("~", "~0", "/", "~1")
	for _, t := range tokens {
		sb.WriteByte('/')
		sb.WriteString(r.Replace(t))
	}
	return sb.String()
}

func joinProblems(ps []Problem) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = "at " + p.String()
	}
	return strings.Join(s, "; ")
}

// oneLine folds s onto one line.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
