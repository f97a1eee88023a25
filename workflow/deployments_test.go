package workflow

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

// TestDeployments: a provider's deployments are read with what each
// inherits (the preset's base URL, the provider's limits), each checked
// by the worker's trust on its own key and host, shown by validate, and
// kept by encoding.
func TestDeployments(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  openai:
    limits: {rpm: 300}
    deployments:
      - {api_key_env: OPENAI_KEY_A}
      - {name: oa-eu, base_url: "https://eu.example.com/v1", api_key_env: OPENAI_KEY_B, limits: {rpm: 600}}
actions:
  - {name: a, provider: openai, model: gpt-4.1-mini, prompt: "{{ .text }}"}
`)
	eps := w.Providers["openai"].Endpoints()
	require.Len(t, eps, 2)
	require.Equal(t, "openai-1", eps[0].Name)
	require.Equal(t, "https://api.openai.com/v1", eps[0].BaseURL)
	require.Equal(t, "OPENAI_KEY_A", eps[0].APIKeyEnv)
	require.Equal(t, 300, eps[0].Limits.RPM, "the provider's limits")
	require.Equal(t, "oa-eu", eps[1].Name)
	require.Equal(t, 600, eps[1].Limits.RPM)

	var out bytes.Buffer
	w.Describe(&out)
	require.Contains(t, out.String(), "    deployment openai-1: https://api.openai.com/v1, key from $OPENAI_KEY_A, limits rpm 300, tpm -, concurrency -")
	require.Contains(t, out.String(), "    deployment oa-eu: https://eu.example.com/v1, key from $OPENAI_KEY_B, limits rpm 600, tpm -, concurrency -")
	require.Contains(t, out.String(), "calls spread over 2 deployments")
	require.NotContains(t, out.String(), "OPENAI_API_KEY", "the preset's key is not used")

	trust, err := provider.LoadTrust(func(k string) (string, bool) {
		if k == provider.EnvKeyHosts {
			return "OPENAI_KEY_A=api.openai.com", true
		}
		return "", false
	})
	require.NoError(t, err)
	require.ErrorContains(t, trust.Check(w.Providers["openai"]), "provider oa-eu: key variable OPENAI_KEY_B is bound to no host on this worker")

	data, err := w.Encode()
	require.NoError(t, err)
	got, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, comparable(w), comparable(got))
}

func TestDeploymentsBad(t *testing.T) {
	t.Parallel()
	errs := parseErrs(t, `
providers:
  oa:
    kind: openai
    deployments:
      - {base_url: "ftp://x", api_key_env: "sk-123"}
      - {name: oa-1}
  b: {kind: openai, deployments: {base_url: "https://x"}}
actions:
  - {name: e, kind: embed, provider: oa, model: m, input: "{{ .text }}"}
`)
	require.Equal(t, []string{
		`workflow.yaml:5: providers.oa.deployments[0].base_url: want an http or https URL, got "ftp://x"`,
		`workflow.yaml:5: providers.oa.deployments[0].api_key_env: not an environment variable name (write the name of the variable that holds the key, never the key)`,
		`workflow.yaml:6: providers.oa.deployments[1]: deployment oa-1 twice (first at line 5)`,
		`workflow.yaml:7: providers.b.deployments: want a list of {base_url, api_key_env, limits}, got a mapping`,
	}, errs)
}
