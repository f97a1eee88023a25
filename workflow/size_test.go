package workflow

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// encodedNodes is the size of src's workflow as a worker reads it.
func encodedNodes(t *testing.T, src string) int {
	t.Helper()
	w, err := Parse("workflow.yaml", []byte(src))
	require.NoError(t, err)
	enc, err := w.Encode()
	require.NoError(t, err)
	var doc yaml.Node
	require.NoError(t, yaml.Unmarshal(enc, &doc))
	n, _ := countNodes(&doc, 1<<62)
	return n
}

// longPipeline is a workflow of n actions shaped by shape: each action
// plain, or with a retry block and an inline schema, or sharing one schema
// through an anchor (small as a file, large once every action carries its
// copy).
func longPipeline(shape string, n int) string {
	var b strings.Builder
	b.WriteString("providers:\n  s: {kind: sim}\n")
	switch shape {
	case "anchored":
		b.WriteString("x-schema: &schema {type: object, required: [a, b, c], properties: {")
		for i := range 30 {
			fmt.Fprintf(&b, "f%d: {type: string, maxLength: 100}, ", i)
		}
		b.WriteString("a: {type: string}, b: {type: integer}, c: {type: array, items: {type: string}}}}\n")
	}
	b.WriteString("defaults: {provider: s, model: sim-1}\nactions:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: a%d\n    prompt: \"x {{ .text }}\"\n", i)
		switch shape {
		case "retry and schema":
			b.WriteString("    retry: {max_attempts: 3, backoff: 1s, redeliver: {max_deliveries: 2}}\n")
			b.WriteString("    expect: {schema: {type: object, required: [title], properties: {title: {type: string}}}}\n")
		case "anchored":
			b.WriteString("    expect: {schema: *schema}\n")
		}
	}
	return b.String()
}

// A workflow passes validation exactly when workers can read the job it
// makes: near and past the bound of the encoded form, for pipelines of
// several shapes, Parse (validate, dispatch, run) and Decode (the worker)
// agree, and the refusal names the file, the actions line and field, and
// what is too large (no "aliases" where there are none).
func TestValidateAgreesWithWorkers(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{"plain", "retry and schema", "anchored"} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			// The encoded form grows by the same number of nodes with
			// each action: the longest pipeline that fits, from two short ones.
			base, per := encodedNodes(t, longPipeline(shape, 1)), 0
			per = encodedNodes(t, longPipeline(shape, 2)) - base
			most := 1 + (MaxExpandedNodes-base)/per
			require.Greater(t, most, 100, "ordinary pipelines pass")

			// (Parse reads it as a worker will, by Decode: not again here.)
			w, err := Parse("workflow.yaml", []byte(longPipeline(shape, most)))
			require.NoError(t, err, "the longest pipeline that fits passes")

			// One action more: refused by validate, and by a worker too.
			_, err = Parse("workflow.yaml", []byte(longPipeline(shape, most+1)))
			require.Error(t, err)
			errs := Errors(err)
			require.Len(t, errs, 1)
			line := 4
			if shape == "anchored" {
				line = 5
			}
			require.Equal(t, line, errs[0].Line)
			require.Equal(t, "actions", errs[0].Field)
			require.Contains(t, errs[0].Msg, fmt.Sprintf("more than the %d a worker reads", MaxExpandedNodes))
			require.Contains(t, errs[0].Msg, fmt.Sprintf("use fewer actions (it has %d,", most+1))
			require.NotContains(t, errs[0].Msg, "alias")
			require.True(t, strings.HasPrefix(err.Error(), fmt.Sprintf("workflow.yaml:%d: actions: as a job carries it to workers", line)), err.Error())

			longer := *w
			longer.Actions = append(append([]*Action(nil), w.Actions...), w.Actions[0])
			enc, err := longer.Encode()
			require.NoError(t, err)
			_, err = Decode(enc)
			require.ErrorContains(t, err, "the document is more than", "a worker refuses it too")
			require.NotContains(t, err.Error(), "alias", "and says what is there")

			// Far past the bound, 10,000 actions of the larger shapes: the
			// file itself is past it, by its own nodes or by its
			// aliases, and the refusal says which.
			switch shape {
			case "retry and schema":
				_, err = Parse("workflow.yaml", []byte(longPipeline(shape, 10000)))
				require.ErrorContains(t, err, "the document is more than")
			case "anchored":
				_, err = Parse("workflow.yaml", []byte(longPipeline(shape, 10000)))
				require.ErrorContains(t, err, "its aliases expand the document past")
			}
		})
	}
}

// A file past the bound as written, with no alias, says it is too large,
// not that aliases expand it.
func TestLargeDocumentSaysSo(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	b.WriteString("actions:\n  - name: a\n    provider: sim\n    prompt: x\n    params:\n      stop:\n")
	for range MaxExpandedNodes {
		b.WriteString("        - x\n")
	}
	_, err := Parse("workflow.yaml", []byte(b.String()))
	errs := Errors(err)
	require.Len(t, errs, 1)
	require.Equal(t, fmt.Sprintf("the document is more than %d YAML nodes (each key, value and list item is one), the most jetpool reads", MaxExpandedNodes), errs[0].Msg)
	require.Greater(t, errs[0].Line, MaxExpandedNodes-20, "at the line where the count passed the bound")
}
