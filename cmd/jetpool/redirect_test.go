package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider/providertest"
)

// `jetpool run` against an endpoint that redirects every request to another
// host: the preflight stops the job before anything is published, and
// without the preflight each record fails permanently, at its first call,
// with a dead letter that says why (class invalid_request, RedirectError);
// the other host is sent nothing, and the key is in no output.
func TestRunRefusesARedirectElsewhere(t *testing.T) {
	dir := setEnv(t)
	const key = "sk-run-redirect-KEY-3c4d"
	t.Setenv("REDIRECT_TEST_KEY", key)
	elsewhere := providertest.NewServerAt(t, "127.0.0.2:0", providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "stolen", 1, 1)})
	bound := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		providertest.Redirect{Status: http.StatusTemporaryRedirect, To: elsewhere.URL + r.URL.Path}.ServeHTTP(w, r)
	}))
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s/v1, api_key_env: REDIRECT_TEST_KEY}
actions:
  - {name: ask, provider: local, model: m, prompt: "{{ .text }}", retry: {max_attempts: 3, redeliver: {max_deliveries: 3}}}
`, bound.URL)), 0o600))
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"a","text":"cats"}
{"id":"b","text":"dogs"}
`), 0o600))
	out := filepath.Join(dir, "results.jsonl")

	code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress")
	require.Equal(t, 2, code, stdout+stderr)
	require.Contains(t, stderr, "RedirectError: refused a redirect (307) from "+bound.URL+" to "+elsewhere.URL+"/v1/models: another host", "the preflight says why")
	require.Len(t, bound.Requests(), 1, "the preflight's one request, nothing published")

	code, stdout, stderr = jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress", "--no-preflight")
	require.Equal(t, exitFailedRecords, code, stdout+stderr)
	results := readResults(t, out)
	require.Len(t, results, 2)
	for _, r := range results {
		require.Equal(t, "failed", r["status"], r)
		require.Equal(t, "permanent", r["reason"], r)
		e := r["error"].(map[string]any)
		require.Equal(t, "invalid_request", e["class"])
		require.Contains(t, e["message"], "failed permanently: RedirectError: refused a redirect (307) from "+bound.URL+" to "+elsewhere.URL+"/v1/chat/completions: another host; a key or header goes only to the endpoint it is bound to")
		require.EqualValues(t, 1, r["recovery"].(map[string]any)["attempts"], "one call, no retry")
	}
	code, dl, _ := jetpool(t, "dlq", "list", "--json")
	require.Equal(t, 0, code)
	require.Equal(t, 2, strings.Count(dl, `"class":"invalid_request"`), dl)
	require.Contains(t, dl, "RedirectError")

	require.Empty(t, elsewhere.Requests(), "the other host was sent nothing")
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	for _, s := range []string{string(raw), dl, stdout, stderr} {
		require.NotContains(t, s, key)
	}
}
