package workflow

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A provider's stream_idle_timeout is read, checked, carried to workers and
// shown by validate.
func TestStreamIdleTimeout(t *testing.T) {
	t.Parallel()
	w, err := Parse("workflow.yaml", []byte(`
providers:
  p: {kind: openai, base_url: "http://127.0.0.1:9/v1", stream: true, stream_idle_timeout: 45s}
  q: {kind: openai, base_url: "http://127.0.0.1:9/v1", timeout: 30s, stream: true}
actions:
  - {name: a, provider: p, model: m, prompt: x}
  - {name: b, provider: q, model: m, prompt: x}
`))
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, w.Providers["p"].StreamIdleTimeout)
	require.Equal(t, 15*time.Second, w.Providers["q"].StreamIdle(), "half the timeout by default")
	enc, err := w.Encode()
	require.NoError(t, err)
	back, err := Decode(enc)
	require.NoError(t, err)
	require.Equal(t, 45*time.Second, back.Providers["p"].StreamIdleTimeout)
	require.Zero(t, back.Providers["q"].StreamIdleTimeout)
	var out strings.Builder
	w.Describe(&out)
	require.Contains(t, out.String(), "provider p: kind openai, http://127.0.0.1:9/v1, no limits: adaptive concurrency\n")
	require.Contains(t, out.String(), "    stream: cut after 45s without content (stream_idle_timeout), retried as a dropped stream\n")
	require.Contains(t, out.String(), "    stream: cut after 15s without content (stream_idle_timeout), retried as a dropped stream\n")

	require.Equal(t, []string{"workflow.yaml:2: providers.p.stream_idle_timeout: 100ms is out of range 1s-24h0m0s"},
		parseErrs(t, `
providers:
  p: {kind: openai, base_url: "http://127.0.0.1:9/v1", stream_idle_timeout: 100ms}
actions:
  - {name: a, provider: p, model: m, prompt: x}
`))
}
