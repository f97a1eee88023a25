package workflow

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// A bad overflow: block is refused with its file, line and field.
func TestOverflowRefused(t *testing.T) {
	t.Parallel()
	presets := strings.Join(provider.PresetNames(), ", ")
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"a field the prompt does not read", `
actions:
  - name: a
    provider: sim
    prompt: "{{ .text }} by {{ .author }}"
    overflow: {truncate: txt}
`, []string{`workflow.yaml:5: actions[0].overflow.truncate: the prompt reads no field "txt" (it reads author, text)`}},
		{"neither a cut nor a fallback", `
actions:
  - name: a
    provider: sim
    prompt: "{{ .text }}"
    overflow: {keep: tail}
`, []string{`workflow.yaml:5: actions[0].overflow: needs truncate (a field the prompt reads, to shorten), fallback_model (a larger-context model), or both`}},
		{"an unknown fallback provider", `
actions:
  - name: a
    provider: openai
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    overflow:
      fallback_model: big
      provider: opneai
`, []string{`workflow.yaml:8: actions[0].overflow.provider: unknown provider "opneai" (not under providers: and not a preset: ` + presets + `)`}},
		{"the action's own model", `
actions:
  - {name: a, provider: openai, model: gpt-4o-mini, prompt: "{{ .text }}", overflow: {fallback_model: gpt-4o-mini}}
`, []string{`workflow.yaml:2: actions[0].overflow.fallback_model: gpt-4o-mini is the action's own model: a fallback must be a model with a larger context window`}},
		{"bad keep and rounds", `
actions:
  - name: a
    provider: sim
    prompt: "{{ .text }}"
    overflow:
      truncate: text
      keep: end
      max_rounds: 9
      rounds: 2
`, []string{
			`workflow.yaml:7: actions[0].overflow.keep: bad value "end" (want head, tail or middle)`,
			`workflow.yaml:8: actions[0].overflow.max_rounds: 9 is out of range 1-5`,
			`workflow.yaml:9: actions[0].overflow.rounds: unknown field (want one of truncate, keep, fallback_model, provider, max_rounds)`,
		}},
		{"keep without truncate, provider without a model", `
actions:
  - name: a
    provider: sim
    prompt: "{{ .text }}"
    overflow: {keep: tail, provider: openai, fallback_model: ""}
`, []string{
			`workflow.yaml:5: actions[0].overflow.fallback_model: empty`,
		}},
		{"keep without truncate", `
actions:
  - name: a
    provider: openai
    model: m
    prompt: "{{ .text }}"
    overflow: {keep: tail, fallback_model: big}
`, []string{`workflow.yaml:6: actions[0].overflow.keep: only used with truncate`}},
		{"under defaults", `
defaults: {provider: sim, overflow: {truncate: text}}
actions:
  - {name: a, prompt: "{{ .text }}"}
`, []string{`workflow.yaml:1: defaults.overflow: only on an action: it names a field of that action's prompt`}},
		{"a budget needs the fallback's price", `
providers:
  local: {kind: openai, base_url: "http://127.0.0.1:1/v1", price: {input_per_mtok: 1, output_per_mtok: 1}}
  big: {kind: openai, base_url: "http://127.0.0.1:2/v1"}
defaults: {max_cost: 5}
actions:
  - {name: a, provider: local, model: m, prompt: "{{ .text }}", overflow: {fallback_model: huge, provider: big}}
`, []string{`workflow.yaml:4: defaults.max_cost: action a's overflow fallback (provider big, model huge) is unpriced, so the budget could not count its calls: set ` + "`price:`" + ` on its provider or load a price file`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, parseErrs(t, tc.src))
		})
	}
}

// The fallback's provider is the workflow's (preflight checks its key, a
// worker must be able to serve it); the block travels with the job.
func TestOverflowEncoded(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  big: {kind: anthropic, price: {input_per_mtok: 3, output_per_mtok: 15}}
actions:
  - name: summarize
    provider: openai
    model: gpt-4o-mini
    prompt: "Summarize {{ .title }}: {{ .text }}"
    overflow: {truncate: text, keep: middle, fallback_model: claude-sonnet-4, provider: big}
  - name: plain
    provider: openai
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    overflow: {truncate: text}
`)
	require.Contains(t, w.Providers, "big", "the fallback's provider is in use")
	a := w.Actions[0]
	require.Equal(t, &Overflow{Truncate: "text", Keep: KeepMiddle, FallbackModel: "claude-sonnet-4", FallbackProvider: "big",
		FallbackPrice: &pricing.Price{InputPerMTok: 3, OutputPerMTok: 15, Source: "workflow"}, MaxRounds: OverflowRoundsDefault}, a.Overflow)
	require.Equal(t, &Overflow{Truncate: "text", Keep: KeepDefault, MaxRounds: OverflowRoundsDefault}, w.Actions[1].Overflow)

	data, err := w.Encode()
	require.NoError(t, err)
	require.Contains(t, string(data), `"overflow": {`)
	got, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, comparable(w), comparable(got))
}

// validate says what the block does and the worst case with its rounds.
func TestOverflowDescribe(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
actions:
  - name: summarize
    provider: openai
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    retry: {max_attempts: 3}
    max_calls: 20
    overflow: {truncate: text, fallback_model: gpt-4.1}
  - name: routed
    provider: openai
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    expect: {format: json, repair: true}
    overflow: {fallback_model: gpt-4.1, max_rounds: 3}
`)
	var b bytes.Buffer
	w.Describe(&b)
	out := b.String()
	require.Contains(t, out, `
  overflow:   on a context overflow: move to openai/gpt-4.1, then shorten .text (keep its head) by what the provider says is over, plus a margin; up to 2 rounds a delivery, each a call
              worst case with its rounds: 27 calls: 3 attempts × 3 rounds (the first, 2 overflow rounds) × 3 deliveries, capped at 20 by max_calls
`)
	require.Contains(t, out, `
  overflow:   on a context overflow: move to openai/gpt-4.1; up to 1 round a delivery, each a call
              worst case with its rounds: 4 calls: 1 attempt × 4 rounds (the first, 2 repairs, 1 overflow round) × 1 delivery
`)
}

// Each overflow round is a round of the session, as a repair is: the
// bound multiplies it by the attempts and the deliveries.
func TestBoundCountsOverflowRounds(t *testing.T) {
	t.Parallel()
	p := retry.Policy{Enabled: true, MaxAttempts: 3, MaxDeliveries: 2}
	require.Equal(t, 6, retry.Action{Policy: p}.Bound().Calls)
	require.Equal(t, 18, retry.Action{Policy: p, OverflowRounds: 2}.Bound().Calls)
	require.Equal(t, 24, retry.Action{Policy: p, Repairs: 1, OverflowRounds: 2}.Bound().Calls)
	b := retry.Action{Policy: p, OverflowRounds: 2, MaxCalls: 10}.Bound()
	require.Equal(t, 10, b.Calls)
	require.Equal(t, 18, b.Uncapped)
	require.Equal(t, 3, retry.Action{OverflowRounds: 2}.Bound().Calls, "retry off: the call and two rounds")
}
