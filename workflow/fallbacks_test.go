package workflow

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

const fallbacksWorkflow = `
providers:
  openai: {api_key_env: OPENAI_KEY_A}
actions:
  - name: extract
    provider: openai
    model: gpt-4.1-mini
    prompt: "{{ .text }}"
    params: {max_tokens: 100, temperature: 0.3}
    retry: {max_attempts: 2, redeliver: {max_deliveries: 2}}
    fallbacks:
      - {provider: anthropic, model: claude-haiku-4-5, on: [outage, content_filter]}
      - {model: gpt-5-mini, on: context_overflow}
`

// TestFallbacks: a fallbacks: list is read with its defaults (on: outage,
// the action's provider), priced at each model's price, its providers
// added to the workflow's (a worker refuses a job whose fallback key it
// does not hold), counted in the worst case, and it survives encoding.
func TestFallbacks(t *testing.T) {
	t.Parallel()
	w := mustParse(t, fallbacksWorkflow)
	a := w.Actions[0]
	require.Len(t, a.Fallbacks, 2)
	f0, f1 := a.Fallbacks[0], a.Fallbacks[1]
	require.Equal(t, "anthropic/claude-haiku-4-5", f0.String())
	require.Equal(t, []string{FallbackOutage, "content_filter"}, f0.On)
	require.Equal(t, "openai/gpt-5-mini", f1.String())
	require.True(t, f1.Takes("context_overflow"))
	require.False(t, f1.Takes(FallbackOutage))
	require.NotNil(t, f0.Price, "the built-in table prices claude-haiku-4-5")
	require.NotEqual(t, a.Price, f0.Price)
	require.Contains(t, w.Providers, "anthropic")

	// 2 attempts × (1 + 2 fallbacks) rounds × 2 deliveries.
	b := a.Bound(w.Providers["openai"])
	require.Equal(t, 12, b.Calls)
	var out bytes.Buffer
	w.Describe(&out)
	require.Contains(t, out.String(), "  fallbacks:  1. anthropic/claude-haiku-4-5 (anthropic) on outage, content_filter; billed at $")
	require.Contains(t, out.String(), "2. openai/gpt-5-mini (openai) on context_overflow; billed at $")
	require.Contains(t, out.String(), "params: max_tokens is sent as max_completion_tokens")
	require.Contains(t, out.String(), "worst case: 12 calls (2 attempts × 2 deliveries × 3 rounds (repairs, max_tokens doublings, fallbacks))")

	data, err := w.Encode()
	require.NoError(t, err)
	got, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, comparable(w), comparable(got))
}

func TestFallbacksBad(t *testing.T) {
	t.Parallel()
	errs := parseErrs(t, `
providers:
  oa: {kind: openai, api_key_env: OPENAI_API_KEY}
actions:
  - name: a
    provider: oa
    model: m
    prompt: x
    fallbacks:
      - {provider: nope, model: m2}
      - {model: m, on: [outage, weather]}
      - {provider: oa}
  - name: b
    provider: oa
    model: m
    prompt: x
    mode: batch
    fallbacks: [{model: m2}]
  - name: c
    provider: oa
    model: m
    prompt: x
    fallbacks: {model: m2}
`)
	require.Equal(t, []string{
		`workflow.yaml:9: actions[0].fallbacks[0].provider: unknown provider "nope" (not under providers: and not a preset: ` + presetList() + `)`,
		`workflow.yaml:10: actions[0].fallbacks[1].on[1]: unknown trigger "weather" (want one of outage, rate_limit, server, network, content_filter, context_overflow, truncated, invalid_request, auth)`,
		`workflow.yaml:11: actions[0].fallbacks[2].model: missing; a fallback names the model to move to`,
		`workflow.yaml:17: actions[1].fallbacks: not with mode: batch (its stragglers have fallback: online)`,
		`workflow.yaml:22: actions[2].fallbacks: want a list of {provider, model, on}, got a mapping`,
	}, errs)
}

func presetList() string {
	s := ""
	for i, n := range provider.PresetNames() {
		if i > 0 {
			s += ", "
		}
		s += n
	}
	return s
}
