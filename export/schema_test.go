package export

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// describe is a column's type in DuckDB's words.
func describe(c *col) string {
	switch c.kind {
	case kString:
		return "VARCHAR"
	case kJSON:
		return "JSON"
	case kInt:
		return "BIGINT"
	case kDouble:
		return "DOUBLE"
	case kFloat:
		return "FLOAT"
	case kBool:
		return "BOOLEAN"
	case kList:
		return describe(c.elem) + "[]"
	case kGroup:
		var f []string
		for _, x := range c.fields {
			f = append(f, x.name+" "+describe(x))
		}
		return "STRUCT(" + strings.Join(f, ", ") + ")"
	}
	return "?"
}

// How an expect: schema types the output column: typed where the schema
// says one type, JSON where a value could fall outside any column.
func TestSchemaCol(t *testing.T) {
	t.Parallel()
	for schema, want := range map[string]string{
		`{type: string}`:                    "VARCHAR",
		`{enum: [a, b]}`:                    "VARCHAR",
		`{enum: [a, 1]}`:                    "JSON",
		`{type: integer}`:                   "BIGINT",
		`{type: [number, "null"]}`:          "DOUBLE",
		`{type: [number, string]}`:          "JSON",
		`{type: boolean}`:                   "BOOLEAN",
		`{type: object}`:                    "JSON",
		`{type: object, required: [a]}`:     "JSON",
		`{properties: {a: {type: string}}}`: "JSON",
		`{type: object, additionalProperties: true, properties: {a: {type: string}}}`:          "JSON",
		`{type: object, additionalProperties: {type: string}, properties: {a: {}}}`:            "JSON",
		`{type: object, additionalProperties: false, properties: {b: {}, a: {type: integer}}}`: "STRUCT(a BIGINT, b JSON)",
		`{type: array}`:                                  "JSON",
		`{type: array, items: {type: string}}`:           "VARCHAR[]",
		`{type: array, items: {type: array, items: {}}}`: "JSON[][]",
		`{anyOf: [{type: string}]}`:                      "JSON",
		`{$ref: "#/defs/x"}`:                             "JSON",
	} {
		var s map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(schema), &s))
		require.Equal(t, want, describe(schemaCol(s, 0)), schema)
	}
	deep := map[string]any{"type": "string"}
	for range schemaDepthMax + 2 {
		deep = map[string]any{"type": "array", "items": deep}
	}
	require.True(t, strings.HasPrefix(describe(schemaCol(deep, 0)), "JSON[]"), "JSON past the depth bound")
}
