package provider_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// A worker sends a key only where its operator bound it, calls keyless
// endpoints only on allowed hosts, and never reads a JETPOOL_ variable as a
// key; a refusal names the provider, the variable or file, and the host.
func TestTrustCheck(t *testing.T) {
	t.Parallel()
	trust, err := provider.LoadTrust(env(map[string]string{
		provider.EnvKeyHosts: "AZURE_KEY=myco.openai.azure.com;VLLM_KEY=http://10.0.0.5:8000 /run/secrets/k=*.internal.example,127.0.0.1:9000",
	}))
	require.NoError(t, err)
	preset := func(name string) provider.Config { c, _ := provider.Preset(name); return c }
	with := func(c provider.Config, f func(*provider.Config)) provider.Config { f(&c); return c }
	for _, tc := range []struct {
		name string
		cfg  provider.Config
		want string // "" allowed, else the error's text
	}{
		{"preset", preset("openai"), ""},
		{"preset with another base_url", with(preset("openai"), func(c *provider.Config) { c.BaseURL = "https://evil.example/v1" }),
			"provider openai: key variable OPENAI_API_KEY may be sent to api.openai.com, not to evil.example (JETPOOL_KEY_HOSTS binds more hosts)"},
		{"a preset's key over plain http", with(preset("groq"), func(c *provider.Config) { c.BaseURL = "http://api.groq.com/openai/v1" }),
			"provider groq: key variable GROQ_API_KEY may go to api.groq.com over HTTPS only, not in the clear to http://api.groq.com (an http:// binding in JETPOOL_KEY_HOSTS allows that)"},
		{"the worker's NATS password", provider.Config{Name: "x", Kind: provider.KindOpenAI, BaseURL: "https://evil.example", APIKeyEnv: "JETPOOL_NATS_PASSWORD"},
			"provider x: key variable JETPOOL_NATS_PASSWORD is jetpool's own configuration, never sent as a provider key (not to evil.example, nor anywhere)"},
		{"a JETPOOL_ variable even to its own host", provider.Config{Name: "x", Kind: provider.KindOpenAI, APIKeyEnv: "JETPOOL_NATS_TOKEN"},
			"provider x: key variable JETPOOL_NATS_TOKEN is jetpool's own configuration, never sent as a provider key (not to api.openai.com, nor anywhere)"},
		{"an unbound variable", provider.Config{Name: "x", Kind: provider.KindOpenAI, BaseURL: "https://evil.example:8443/v1", APIKeyEnv: "HOME"},
			"provider x: key variable HOME is bound to no host on this worker, so it is not sent to evil.example:8443 (keys are bound by the worker's operator, in JETPOOL_KEY_HOSTS)"},
		{"an unbound key file", provider.Config{Name: "x", Kind: provider.KindAnthropic, BaseURL: "https://evil.example", APIKeyFile: "/etc/../etc/passwd"},
			"provider x: key file /etc/passwd is bound to no host on this worker, so it is not sent to evil.example (keys are bound by the worker's operator, in JETPOOL_KEY_HOSTS)"},
		{"a bound variable", provider.Config{Name: "az", Kind: provider.KindOpenAI, BaseURL: "https://myco.openai.azure.com/openai", APIKeyEnv: "AZURE_KEY"}, ""},
		{"a bound http endpoint", provider.Config{Name: "v", Kind: provider.KindOpenAI, BaseURL: "http://10.0.0.5:8000/v1", APIKeyEnv: "VLLM_KEY"}, ""},
		{"a bound http endpoint on another port", provider.Config{Name: "v", Kind: provider.KindOpenAI, BaseURL: "http://10.0.0.5:9000/v1", APIKeyEnv: "VLLM_KEY"},
			"provider v: key variable VLLM_KEY may be sent to http://10.0.0.5:8000, not to 10.0.0.5:9000 (JETPOOL_KEY_HOSTS binds more hosts)"},
		{"a bound key file, a subdomain", provider.Config{Name: "f", Kind: provider.KindOpenAI, BaseURL: "https://llm.internal.example/v1", APIKeyFile: "/run/secrets/k"}, ""},
		{"a bound key file on loopback", provider.Config{Name: "f", Kind: provider.KindOpenAI, BaseURL: "http://127.0.0.1:9000/v1", APIKeyFile: "/run/secrets/k"}, ""},
		{"a wildcard is no suffix match", provider.Config{Name: "f", Kind: provider.KindOpenAI, BaseURL: "https://evilinternal.example", APIKeyFile: "/run/secrets/k"},
			"provider f: key file /run/secrets/k may be sent to *.internal.example, 127.0.0.1:9000, not to evilinternal.example (JETPOOL_KEY_HOSTS binds more hosts)"},
		{"a file wins over a variable (APIKey reads it first)", provider.Config{Name: "f", Kind: provider.KindOpenAI, APIKeyEnv: "OPENAI_API_KEY", APIKeyFile: "/etc/shadow"},
			"provider f: key file /etc/shadow is bound to no host on this worker, so it is not sent to api.openai.com (keys are bound by the worker's operator, in JETPOOL_KEY_HOSTS)"},
		{"keyless loopback (Ollama)", preset("ollama"), ""},
		{"keyless localhost", provider.Config{Name: "l", Kind: provider.KindOpenAI, BaseURL: "http://localhost:1234/v1"}, ""},
		{"keyless elsewhere", provider.Config{Name: "l", Kind: provider.KindOpenAI, BaseURL: "https://collector.evil.example/v1"},
			"provider l: endpoint collector.evil.example (no key) is not among this worker's keyless hosts (loopback; set by JETPOOL_KEYLESS_HOSTS)"},
		{"sim, no key", preset("sim"), ""},
		{"sim, its key variable", provider.Config{Name: "s", Kind: provider.KindSim, APIKeyEnv: provider.SimKeyEnv}, ""},
		{"sim, another variable (an oracle on it)", provider.Config{Name: "s", Kind: provider.KindSim, APIKeyEnv: "HOME"},
			"provider s: key variable HOME is bound to no host on this worker, so it is not sent to sim (keys are bound by the worker's operator, in JETPOOL_KEY_HOSTS)"},
		{"an openai key is not the sim's", provider.Config{Name: "s", Kind: provider.KindSim, APIKeyEnv: "OPENAI_API_KEY"},
			"provider s: key variable OPENAI_API_KEY may be sent to api.openai.com, not to sim (JETPOOL_KEY_HOSTS binds more hosts)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := trust.Check(tc.cfg)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.want)
			require.ErrorIs(t, err, provider.ErrUntrusted)
			var ue *provider.UntrustedError
			require.True(t, errors.As(err, &ue))
		})
	}
}

func TestTrustKeylessHosts(t *testing.T) {
	t.Parallel()
	none, err := provider.LoadTrust(env(map[string]string{provider.EnvKeylessHosts: "none"}))
	require.NoError(t, err)
	ollama, _ := provider.Preset("ollama")
	require.ErrorIs(t, none.Check(ollama), provider.ErrUntrusted)

	lan, err := provider.LoadTrust(env(map[string]string{provider.EnvKeylessHosts: "loopback, http://gpu-box:8000"}))
	require.NoError(t, err)
	require.NoError(t, lan.Check(ollama))
	require.NoError(t, lan.Check(provider.Config{Name: "g", Kind: provider.KindOpenAI, BaseURL: "http://gpu-box:8000/v1"}))
	require.Error(t, lan.Check(provider.Config{Name: "g", Kind: provider.KindOpenAI, BaseURL: "http://gpu-box:8001/v1"}))
}

func TestLoadTrustRefusesBadBindings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ value, want string }{
		{"JETPOOL_NATS_PASSWORD=evil.example", `JETPOOL_KEY_HOSTS: entry "JETPOOL_NATS_PASSWORD=evil.example": JETPOOL_NATS_PASSWORD is jetpool's own configuration and is never sent as a provider key`},
		{"OPENAI_API_KEY", `JETPOOL_KEY_HOSTS: entry "OPENAI_API_KEY": want SOURCE=HOST[,HOST…] (a key variable or an absolute key file path, and where it may be sent)`},
		{"relative/key=h", `JETPOOL_KEY_HOSTS: entry "relative/key=h": "relative/key" is neither a variable name nor an absolute file path`},
		{"K=https://h/x?y", `JETPOOL_KEY_HOSTS: entry "K=https://h/x?y": "https://h/x?y" is not a host (want a name or address, optionally :port, *.domain or http://)`},
		{"K=loopback", `JETPOOL_KEY_HOSTS: entry "K=loopback": name the loopback host and port a key may go to (e.g. 127.0.0.1:8000), not all of loopback`},
	} {
		_, err := provider.LoadTrust(env(map[string]string{provider.EnvKeyHosts: tc.value}))
		require.EqualError(t, err, tc.want, tc.value)
	}
}

// `jetpool run` trusts the workflow file it was given: exactly its own
// providers' key→endpoint pairs, never a JETPOOL_ variable.
func TestTrustAllowing(t *testing.T) {
	t.Parallel()
	own := map[string]provider.Config{
		"local": {Name: "local", Kind: provider.KindOpenAI, BaseURL: "http://127.0.0.1:5000/v1", APIKeyEnv: "LOCAL_TEST_KEY"},
		"nats":  {Name: "nats", Kind: provider.KindOpenAI, BaseURL: "https://evil.example", APIKeyEnv: "JETPOOL_NATS_PASSWORD"},
		"lan":   {Name: "lan", Kind: provider.KindOpenAI, BaseURL: "https://gpu.lan"},
	}
	base := provider.DefaultTrust()
	trust := base.Allowing(own)
	require.NoError(t, trust.Check(own["local"]))
	require.NoError(t, trust.Check(own["lan"]))
	require.ErrorIs(t, trust.Check(own["nats"]), provider.ErrUntrusted)
	other := own["local"]
	other.BaseURL = "http://127.0.0.1:5001/v1"
	require.ErrorIs(t, trust.Check(other), provider.ErrUntrusted, "another port than the file's")
	require.ErrorIs(t, base.Check(own["local"]), provider.ErrUntrusted, "the base policy is unchanged")
}
