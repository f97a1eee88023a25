package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider/providertest"
)

// `retry --workflow` with a revision that moves the endpoint: the replayed
// records are worked at the new endpoint (the old one is not called again).
// A revision this process could not work (its key not set, under
// --no-preflight; the same with a plain retry) is refused before anything
// is consumed: exit 2, the reason, every dead letter kept, no revision
// added, nothing called.
func TestRetryWorkflowMovingTheEndpoint(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("RETRY_MOVE_KEY", "sk-old")
	old := providertest.NewServer(t, providertest.Reply{Status: 400, Body: providertest.OpenAIError("bad request: unknown parameter", "invalid_request_error", "")})
	moved := providertest.NewServer(t, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "fixed", 3, 1)})
	file := func(name, url, keyEnv string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %s/v1, api_key_env: %s}
actions:
  - {name: ask, provider: p, model: m, prompt: "{{ .text }}"}
`, url, keyEnv)), 0o600))
		return p
	}
	wf := file("wf.yaml", old.URL, "RETRY_MOVE_KEY")
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"a","text":"cats"}`+"\n"+`{"id":"b","text":"dogs"}`+"\n"), 0o600))
	code, _, stderr := jetpool(t, "run", wf, "--input", in, "--no-progress", "--no-preflight", "--job", "mv")
	require.Equal(t, 4, code, stderr)
	require.Len(t, old.Requests(), 2)
	dlq := func() string {
		_, out, _ := jetpool(t, "dlq", "list", "--job", "mv")
		return out
	}
	require.Contains(t, dlq(), "2 dead letters")

	// A key this process does not have: refused, nothing consumed.
	noKey := file("nokey.yaml", moved.URL, "RETRY_MOVE_UNSET_KEY")
	code, _, stderr = jetpool(t, "retry", "--workflow", noKey, "--no-preflight", "--no-progress")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "job mv: this process could not work its replayed records under "+noKey+" (its revision 2): revision 2: provider p: environment variable RETRY_MOVE_UNSET_KEY is not set")
	require.Contains(t, stderr, "nothing was replayed, every dead letter is kept")
	require.Contains(t, dlq(), "2 dead letters")
	_, status, _ := jetpool(t, "status", "mv", "--json")
	require.Contains(t, status, `"revision": 1`, "no revision added")

	// The same for a plain retry, once the job's own key is gone.
	os.Unsetenv("RETRY_MOVE_KEY")
	code, _, stderr = jetpool(t, "retry", "--no-progress")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, "job mv: this process could not work its replayed records: provider p: environment variable RETRY_MOVE_KEY is not set")
	require.Contains(t, dlq(), "2 dead letters")
	t.Setenv("RETRY_MOVE_KEY", "sk-old")
	require.Empty(t, moved.Requests(), "nothing called, not even preflight")

	// The moved endpoint, with the key: worked there.
	fixed := file("fixed.yaml", moved.URL, "RETRY_MOVE_KEY")
	code, _, stderr = jetpool(t, "retry", "--workflow", fixed, "--no-progress")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "2 dead letters replayed")
	require.Equal(t, 2, recordCalls(moved), "the replayed records called the new endpoint")
	require.Equal(t, 2, recordCalls(old), "and not the old one")
	require.Contains(t, dlq(), "0 dead letters")
}

// recordCalls counts the requests of s that asked about a record (not
// preflight's).
func recordCalls(s *providertest.Server) int {
	n := 0
	for _, r := range s.Requests() {
		if strings.Contains(string(r.Body), "cats") || strings.Contains(string(r.Body), "dogs") {
			n++
		}
	}
	return n
}
