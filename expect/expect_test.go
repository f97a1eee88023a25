package expect_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/expect"
)

func schema(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &m))
	return m
}

const bookSchema = `{
	"type": "object",
	"required": ["title", "author"],
	"properties": {
		"title": {"type": "string"},
		"author": {"type": "string"},
		"year": {"type": "integer"},
		"tags": {"type": "array", "items": {"type": "string"}},
		"published": {"type": "string", "format": "date"}
	}
}`

func violation(t *testing.T, err error) *expect.Violation {
	t.Helper()
	var v *expect.Violation
	require.True(t, errors.As(err, &v), "want a *Violation, got %T: %v", err, err)
	return v
}

func TestExtract(t *testing.T) {
	t.Parallel()
	want := map[string]any{"title": "Dune", "year": json.Number("1965")}
	for name, text := range map[string]string{
		"bare":              `{"title":"Dune","year":1965}`,
		"surrounding space": "\n  {\"title\":\"Dune\",\"year\":1965}\n",
		"json fence":        "```json\n{\"title\":\"Dune\",\"year\":1965}\n```",
		"fence after prose": "Here is the metadata you asked for:\n\n```json\n{\"title\":\"Dune\",\"year\":1965}\n```\nLet me know if you need more.",
		"bare fence":        "```\n{\"title\":\"Dune\",\"year\":1965}\n```",
		"JSON tag wins":     "```python\nprint({'x': 1})\n```\n```JSON\n{\"title\":\"Dune\",\"year\":1965}\n```",
		"after a sentence":  `Sure! The answer is {"title":"Dune","year":1965}`,
		"trailing prose":    `{"title":"Dune","year":1965} I hope this helps. {"not": "this one"}`,
		"prose with braces": `Using [brackets] and {curly} words first: {"title":"Dune","year":1965} done`,
		"one-line fence":    "```json {\"title\":\"Dune\",\"year\":1965}```",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			v, err := expect.Extract(text)
			require.NoError(t, err)
			require.Equal(t, want, v)
		})
	}

	t.Run("arrays and scalars", func(t *testing.T) {
		t.Parallel()
		v, err := expect.Extract("The list: [1, 2, 3].")
		require.NoError(t, err)
		require.Equal(t, []any{json.Number("1"), json.Number("2"), json.Number("3")}, v)
		v, err = expect.Extract(`"just a string"`)
		require.NoError(t, err)
		require.Equal(t, "just a string", v)
	})
	t.Run("large integers keep their digits", func(t *testing.T) {
		t.Parallel()
		v, err := expect.Extract(`{"id": 12345678901234567890}`)
		require.NoError(t, err)
		require.Equal(t, json.Number("12345678901234567890"), v.(map[string]any)["id"])
	})
}

func TestExtractFailures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		cause      expect.Cause
		msg        string
	}{
		{"empty", "  \n", expect.CauseNoJSON, "no JSON value in the output: the output is empty"},
		{"prose only", "I could not find an author in this text.", expect.CauseNoJSON, "no JSON value in the output"},
		{"cut off", `{"title": "Dune", "auth`, expect.CauseInvalidJSON, "invalid JSON: unexpected end of JSON input (the value is cut off)"},
		{"single quotes", `{'title': 'Dune'}`, expect.CauseInvalidJSON, "invalid JSON: invalid character '\\'' looking for beginning of object key string"},
		{"broken fence", "```json\n{\"title\": Dune}\n```", expect.CauseInvalidJSON, "invalid JSON: invalid character 'D' looking for beginning of value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := expect.Extract(tc.text)
			v := violation(t, err)
			require.Equal(t, tc.cause, v.Cause)
			require.Equal(t, tc.msg, v.Error())
			require.Equal(t, tc.text, v.Output)
		})
	}
}

func TestCheckSchema(t *testing.T) {
	t.Parallel()
	c, err := expect.New(schema(t, bookSchema))
	require.NoError(t, err)

	t.Run("valid", func(t *testing.T) {
		t.Parallel()
		v, err := c.Check("```json\n{\"title\":\"Dune\",\"author\":\"Frank Herbert\",\"year\":1965}\n```", "stop")
		require.NoError(t, err)
		require.Equal(t, map[string]any{"title": "Dune", "author": "Frank Herbert", "year": json.Number("1965")}, v)
	})
	t.Run("each error with its path", func(t *testing.T) {
		t.Parallel()
		out := `{"title":"Dune","year":"1965","tags":["sf",7],"published":"last year"}`
		_, err := c.Check(out, "stop")
		v := violation(t, err)
		require.Equal(t, expect.CauseSchema, v.Cause)
		require.Equal(t, out, v.Output)
		require.Equal(t, []expect.Problem{
			{Path: "(root)", Reason: "missing property 'author'"},
			{Path: "/published", Reason: `'last year' is not valid date: parsing time "last year" as "2006-01-02": cannot parse "last year" as "2006"`},
			{Path: "/tags/1", Reason: "got number, want string"},
			{Path: "/year", Reason: "got string, want integer"},
		}, v.Problems)
		require.Equal(t, "4 schema errors: at (root): missing property 'author'; at /published: 'last year' is not valid date: "+
			`parsing time "last year" as "2006-01-02": cannot parse "last year" as "2006"; at /tags/1: got number, want string; at /year: got string, want integer`, v.Error())
		require.Equal(t, "Your previous reply does not match the required JSON Schema:\n"+
			"- at (root): missing property 'author'\n"+
			"- at /published: 'last year' is not valid date: parsing time \"last year\" as \"2006-01-02\": cannot parse \"last year\" as \"2006\"\n"+
			"- at /tags/1: got number, want string\n"+
			"- at /year: got string, want integer\n"+
			"Reply again with only the corrected JSON value: no explanation and no code fences.", v.Correction())
	})
	t.Run("truncated at max_tokens", func(t *testing.T) {
		t.Parallel()
		_, err := c.Check(`{"title":"Dune","author":"Frank Her`, "length")
		v := violation(t, err)
		require.Equal(t, expect.CauseTruncated, v.Cause)
		require.Equal(t, "output truncated at max_tokens (finish reason length)", v.Error())
		require.Contains(t, v.Correction(), "cut off at the output token limit")
	})
	t.Run("a complete value is fine even at the limit", func(t *testing.T) {
		t.Parallel()
		_, err := c.Check(`{"title":"Dune","author":"Frank Herbert"} and then the model went on and on unt`, "length")
		require.NoError(t, err)
	})
	t.Run("invalid JSON is named in the correction", func(t *testing.T) {
		t.Parallel()
		_, err := c.Check(`{title: "Dune"}`, "stop")
		v := violation(t, err)
		require.Equal(t, "Your previous reply is not valid JSON (invalid character 't' looking for beginning of object key string).\n"+
			"Reply again with only the corrected JSON value: no explanation and no code fences.", v.Correction())
	})
	t.Run("no JSON", func(t *testing.T) {
		t.Parallel()
		_, err := c.Check("Sorry, I cannot help with that.", "stop")
		require.Equal(t, "Your previous reply contains no JSON value.\n"+
			"Reply again with only the corrected JSON value: no explanation and no code fences.", violation(t, err).Correction())
	})
}

func TestFormatJSONOnly(t *testing.T) {
	t.Parallel()
	c, err := expect.New(nil)
	require.NoError(t, err)
	v, err := c.Check(`Result: {"anything": [true, null]}`, "stop")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"anything": []any{true, nil}}, v)
	_, err = c.Check("not json", "stop")
	require.Equal(t, expect.CauseNoJSON, violation(t, err).Cause)

	var nilChecker *expect.Checker
	_, err = nilChecker.Check("[1]", "stop")
	require.NoError(t, err)
}

func TestSchemaErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, schema, msg string }{
		{"unknown type", `{"type": "bogus"}`, "not a valid JSON Schema: at /type: got string, want array; at /type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'"},
		{"required not a list", `{"type": "object", "required": "title"}`, "not a valid JSON Schema: at /required: got string, want array"},
		{"minimum not a number", `{"minimum": "x"}`, "not a valid JSON Schema: at /minimum: got string, want number"},
		{"external ref", `{"$ref": "https://example.com/s.json"}`, "not a valid JSON Schema: external $ref https://example.com/s.json is not supported: put the definition under $defs"},
		{"relative ref", `{"$ref": "other.json"}`, "not a valid JSON Schema: external $ref other.json is not supported: put the definition under $defs"},
		{"bad pattern", `{"type": "string", "pattern": "("}`, "not a valid JSON Schema: "},
		{"dangling local ref", `{"$ref": "#/$defs/nope"}`, "not a valid JSON Schema: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := expect.CheckSchema(schema(t, tc.schema))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.msg), err.Error())
			require.NotContains(t, err.Error(), "\n")
			_, err = expect.New(schema(t, tc.schema))
			require.Error(t, err)
		})
	}
	for _, ok := range []string{
		`{}`, `{"type": "object"}`, bookSchema,
		`{"$defs": {"name": {"type": "string"}}, "type": "object", "properties": {"a": {"$ref": "#/$defs/name"}}}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "definitions": {}}`,
		`{"type": "object", "properties": {"n": {"maxLength": 5}}}`,
	} {
		require.NoError(t, expect.CheckSchema(schema(t, ok)), ok)
	}
}

func BenchmarkNew(b *testing.B) {
	var m map[string]any
	require.NoError(b, json.Unmarshal([]byte(bookSchema), &m))
	for b.Loop() {
		if _, err := expect.New(m); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheck(b *testing.B) {
	var m map[string]any
	require.NoError(b, json.Unmarshal([]byte(bookSchema), &m))
	c, err := expect.New(m)
	require.NoError(b, err)
	out := "Here you go:\n```json\n{\"title\": \"Dune\", \"author\": \"Frank Herbert\", \"year\": 1965, \"tags\": [\"sf\", \"classic\"]}\n```"
	for b.Loop() {
		if _, err := c.Check(out, "stop"); err != nil {
			b.Fatal(err)
		}
	}
}
