package workflow

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReasoningModelParams: validate shows how gpt-5's and o-series' params
// are sent, and warns of each one dropped; the action's params stay as
// written (they are adapted per request).
func TestReasoningModelParams(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  oa: {kind: openai, api_key_env: OPENAI_API_KEY}
defaults:
  provider: oa
  params: {max_tokens: 200, temperature: 0.2}
actions:
  - {name: think, model: gpt-5-mini, prompt: "{{ .text }}"}
  - {name: plain, model: gpt-4.1-mini, prompt: "{{ .text }}"}
  - {name: o, model: o3, prompt: "{{ .text }}", params: {temperature: 1}}
`)
	require.Equal(t, map[string]any{"max_tokens": 200.0, "temperature": 0.2}, w.Actions[0].Params)
	require.Equal(t, []string{
		"workflow.yaml:7: actions[0].params.temperature is dropped (gpt-5-mini takes only the default 1, not 0.2) (action think)",
	}, w.ParamWarnings())
	var b bytes.Buffer
	w.Describe(&b)
	require.Contains(t, b.String(), "  params:     max_tokens is sent as max_completion_tokens (gpt-5-mini refuses max_tokens; reasoning tokens count against it)\n"+
		"  params:     temperature is dropped (gpt-5-mini takes only the default 1, not 0.2)\n")
	require.Contains(t, b.String(), "  params:     max_tokens is sent as max_completion_tokens (o3 refuses")
	require.NotContains(t, b.String(), "gpt-4.1-mini refuses")
}
