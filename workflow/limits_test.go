package workflow

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

const limitsYAML = `
providers:
  tuned:
    kind: openai
    base_url: "http://127.0.0.1:1/v1"
    max_retry_after: 2m
    limits:
      breaker: {failure_ratio: 0.25, min_calls: 50, window: 1m, cooldown: 5s, cooldown_max: 1m}
  off: {kind: openai, base_url: "http://127.0.0.1:2/v1", limits: {rpm: 60, breaker: false}}
actions:
  - {name: a, provider: tuned, model: m, prompt: hi}
  - {name: b, provider: off, model: m, prompt: hi}
`

// A provider's max_retry_after and limits.breaker are read, survive the
// jobs bucket's encoding, and are shown by validate.
func TestProviderLimitsBlock(t *testing.T) {
	t.Parallel()
	w, err := Parse("workflow.yaml", []byte(limitsYAML))
	require.NoError(t, err)
	tuned := w.Providers["tuned"]
	require.Equal(t, 2*time.Minute, tuned.MaxRetryAfter)
	require.Equal(t, provider.Breaker{FailureRatio: 0.25, MinCalls: 50, Window: time.Minute, Cooldown: 5 * time.Second,
		CooldownMax: time.Minute}, tuned.Limits.Breaker)
	off := w.Providers["off"]
	require.Equal(t, provider.Limits{RPM: 60, Breaker: provider.Breaker{Off: true}}, off.Limits)
	require.Zero(t, off.MaxRetryAfter)
	require.Equal(t, provider.MaxRetryAfterDefault, off.RetryAfterCap())

	data, err := w.Encode()
	require.NoError(t, err)
	back, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, w.Providers, back.Providers)

	var out bytes.Buffer
	w.Describe(&out)
	require.Contains(t, out.String(), `  provider off: kind openai, http://127.0.0.1:2/v1, limits rpm 60, tpm -, concurrency -
    breaker: off
    Retry-After: honoured up to 10m0s (max_retry_after)
`)
	require.Contains(t, out.String(), `    breaker: opens when 25 % of at least 50 calls in 1m0s fail (5xx, overload, connection); open 5s, doubling up to 1m0s
    Retry-After: honoured up to 2m0s (max_retry_after)
`)
}

func TestBadProviderLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, block string
		want        []string
	}{
		{"ratio above one", `limits: {breaker: {failure_ratio: 1.5}}`,
			[]string{"workflow.yaml:3: providers.p.limits.breaker.failure_ratio: 1.5 is out of range: want more than 0 and at most 1 (0.5: half the calls)"}},
		{"ratio not a number", `limits: {breaker: {failure_ratio: half}}`,
			[]string{`workflow.yaml:3: providers.p.limits.breaker.failure_ratio: want a number between 0 and 1 such as 0.5, got "half"`}},
		{"min_calls zero", `limits: {breaker: {min_calls: 0}}`,
			[]string{"workflow.yaml:3: providers.p.limits.breaker.min_calls: 0 is out of range 1-1000000"}},
		{"window too short", `limits: {breaker: {window: 10ms}}`,
			[]string{"workflow.yaml:3: providers.p.limits.breaker.window: 10ms is out of range 1s-1h0m0s"}},
		{"cooldown_max below cooldown", `limits: {breaker: {cooldown: 1m, cooldown_max: 10s}}`,
			[]string{"workflow.yaml:3: providers.p.limits.breaker.cooldown_max: 10s is shorter than cooldown 1m0s"}},
		{"an unknown breaker field", `limits: {breaker: {ratio: 0.5}}`,
			[]string{"workflow.yaml:3: providers.p.limits.breaker.ratio: unknown field (want one of failure_ratio, min_calls, window, cooldown, cooldown_max)"}},
		{"breaker: true", `limits: {breaker: true}`,
			[]string{"workflow.yaml:3: providers.p.limits.breaker: true is the default; write false to turn the breaker off, or a mapping to tune it"}},
		{"max_retry_after of a year", `max_retry_after: 8760h`,
			[]string{"workflow.yaml:3: providers.p.max_retry_after: 8760h0m0s is out of range 1s-24h0m0s"}},
		{"max_retry_after not a duration", `max_retry_after: 600`,
			[]string{"workflow.yaml:3: providers.p.max_retry_after: want a duration such as 500ms, 2s or 1m30s, got \"600\""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			src := "providers:\n  p:\n    kind: openai\n    base_url: \"http://127.0.0.1:1/v1\"\n    " + c.block + "\nactions:\n  - {name: a, provider: p, model: m, prompt: hi}\n"
			src = strings.Replace(src, "    kind: openai\n    base_url: \"http://127.0.0.1:1/v1\"\n    "+c.block,
				"    "+c.block+"\n    kind: openai\n    base_url: \"http://127.0.0.1:1/v1\"", 1)
			require.Equal(t, c.want, parseErrs(t, src))
		})
	}
}
