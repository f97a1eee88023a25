package workflow

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const pipelineSrc = `
providers:
  s: {kind: sim}
defaults: {provider: s}
actions:
  - name: classify
    prompt: "Classify: {{ .text }}"
    expect:
      schema: {type: object, properties: {sentiment: {type: string}, score: {type: number}}}
  - name: summarise
    prompt: |
      Text: {{ .text }}
      Sentiment: {{ .clasify.sentiment }}
  - name: tag
    prompt: "{{ .classify.sentimnt }} {{ .summarise.words }} {{ .tag }} {{ .later }}"
  - name: later
    prompt: "{{ .classify.score }} {{ index . \"summarise\" }} {{ .title }}"
`

func refErrs(t *testing.T, w *Workflow, fields ...string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range fields {
		seen[f] = true
	}
	var out []string
	for _, e := range Errors(w.CheckRefs(seen)) {
		out = append(out, e.Error())
	}
	return out
}

func TestCheckRefs(t *testing.T) {
	t.Parallel()
	w := mustParse(t, pipelineSrc)
	require.Equal(t, []string{
		`workflow.yaml:12: actions[1].prompt: reads .clasify.sentiment: no record field and no earlier action is called "clasify" (did you mean classify?)`,
		`workflow.yaml:14: actions[2].prompt: reads .classify.sentimnt: the expect: schema of action classify has no property "sentimnt" (did you mean sentiment?)`,
		`workflow.yaml:14: actions[2].prompt: reads .summarise.words: the output of action summarise is text (it has no expect: block asking for JSON), so it has no field "words"`,
		`workflow.yaml:14: actions[2].prompt: reads .tag: that is this action's own name, and no record has a field "tag" (an action sees the outputs of the actions before it)`,
		`workflow.yaml:14: actions[2].prompt: reads .later: action later runs after this one, and no record has a field "later"`,
	}, refErrs(t, w, "text", "title"))

	// A field no record has is named with what the records do have.
	errs := refErrs(t, w, "text")
	require.Contains(t, errs, `workflow.yaml:16: actions[3].prompt: reads .title: no record field and no earlier action is called "title" (fields: text; earlier actions: classify, summarise, tag)`)
}

// Without the records, only what the workflow itself says: references into
// earlier outputs are checked, and names close to an earlier action are
// suspects.
func TestCheckRefsWithoutRecords(t *testing.T) {
	t.Parallel()
	w := mustParse(t, pipelineSrc)
	var errs []string
	for _, e := range Errors(w.CheckRefs(nil)) {
		errs = append(errs, e.Error())
	}
	require.Len(t, errs, 2)
	require.Contains(t, errs[0], `reads .classify.sentimnt: the expect: schema of action classify has no property "sentimnt"`)
	require.Contains(t, errs[1], `reads .summarise.words: the output of action summarise is text`)
	var sus []string
	for _, e := range w.Suspects() {
		sus = append(sus, e.Error())
	}
	require.Equal(t, []string{`workflow.yaml:12: actions[1].prompt: reads .clasify.sentiment: no earlier action is called "clasify" (did you mean classify?); a typo unless every record has a field "clasify"`}, sus)
}

// A schema that allows properties besides those it names lets a prompt
// read any.
func TestCheckRefsAdditionalProperties(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  s: {kind: sim}
defaults: {provider: s}
actions:
  - name: a
    prompt: "{{ .text }}"
    expect: {schema: {type: object, properties: {x: {type: string}}, additionalProperties: true}}
  - name: b
    prompt: "{{ .a.y }}"
`)
	require.NoError(t, w.CheckRefs(map[string]bool{"text": true}))
}

func TestRecordFields(t *testing.T) {
	t.Parallel()
	w := mustParse(t, pipelineSrc)
	require.Equal(t, []string{"text"}, w.RecordFields(0))
	require.Equal(t, []string{"clasify", "text"}, w.RecordFields(1))
	require.Equal(t, []string{"later", "tag"}, w.RecordFields(2))
	require.Equal(t, []string{"title"}, w.RecordFields(3))
}
