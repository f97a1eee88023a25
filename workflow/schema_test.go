package workflow

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSchemaValidatedWithLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		`workflow.yaml:7: actions[1].expect.schema: not a valid JSON Schema: at /properties/year/type: got string, want array; ` +
			`at /properties/year/type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'`,
		`workflow.yaml:12: actions[2].expect.schema: not a valid JSON Schema: at /required: got string, want array`,
	}, parseErrs(t, `
defaults: {provider: sim}
actions:
  - {name: ok, prompt: x, expect: {schema: {type: object, required: [a]}, repair: {max_attempts: 2}}}
  - name: bad_type
    expect:
      schema:
        type: object
        properties:
          year: {type: int}
    prompt: x
  - name: bad_required
    expect: {schema: {type: object, required: title}}
    prompt: x
`))
}

func TestSchemaFileValidated(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "book.json"), []byte(`{"type": "object", "properties": {"a": {"$ref": "defs.json"}}}`), 0o600))
	file := filepath.Join(dir, "workflow.yaml")
	_, err := Parse(file, []byte(strings.TrimPrefix(`
actions:
  - name: a
    provider: sim
    prompt: hi
    expect:
      schema: book.json
`, "\n")))
	var got []string
	for _, e := range Errors(err) {
		got = append(got, e.Error())
	}
	require.Equal(t, []string{file + `:6: actions[0].expect.schema: not a valid JSON Schema: external $ref defs.json is not supported: put the definition under $defs`}, got)
}
