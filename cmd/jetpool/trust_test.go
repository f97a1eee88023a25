package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider/providertest"
)

// `jetpool run` trusts the workflow file it was given, but its own pool
// still needs the key: without it (preflight skipped) the command ends
// with why, exit 2, instead of waiting for a job nothing here can work;
// and a JETPOOL_ variable is refused before anything is called.
func TestRunCannotServeItsJob(t *testing.T) {
	dir := setEnv(t)
	srv := providertest.NewServer(t, http.NotFoundHandler())
	wf := filepath.Join(dir, "wf.yaml")
	write := func(src string) {
		require.NoError(t, os.WriteFile(wf, []byte(fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s/v1, %s}
actions:
  - {name: ask, provider: local, model: m, prompt: "{{ .text }}"}
`, srv.URL, src)), 0o600))
	}
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"a","text":"cats"}`+"\n"), 0o600))

	write("api_key_env: JETPOOL_TEST_UNSET_KEY_9")
	code, _, stderr := jetpool(t, "run", wf, "--input", in, "--no-progress", "--no-preflight")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "provider local: key variable JETPOOL_TEST_UNSET_KEY_9 is jetpool's own configuration, never sent as a provider key")

	write("api_key_env: RUN_TEST_UNSET_KEY_9")
	code, _, stderr = jetpool(t, "run", wf, "--input", in, "--no-progress", "--no-preflight", "--job", "nokey")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "this process cannot work job nokey: provider local: environment variable RUN_TEST_UNSET_KEY_9 is not set: missing API key (its records stay queued")
	require.Empty(t, srv.Requests(), "nothing was called")
}
