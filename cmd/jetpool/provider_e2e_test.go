package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider/providertest"
)

// `jetpool run` against a local server speaking the OpenAI wire format: a
// 429 with retry-after-ms, then a 503, then an answer for every record, and
// a permanent 400 for one — retries show in the results, the 400 is a dead
// letter, and the API key appears nowhere.
func TestRunAgainstLocalOpenAIServer(t *testing.T) {
	dir := setEnv(t)
	const key = "sk-test-SECRET-9f8e7d"
	t.Setenv("LOCAL_TEST_KEY", key)
	var mu sync.Mutex
	calls := map[string]int{}
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
			return
		}
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			_, _ = io.WriteString(w, providertest.OpenAIModels("gpt-test"))
			return
		}
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		raw, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(raw, &body); err != nil || len(body.Messages) == 0 {
			t.Errorf("unexpected request %s %s: %s (%v)", r.Method, r.URL.Path, raw, err)
			w.WriteHeader(400)
			return
		}
		prompt := body.Messages[len(body.Messages)-1].Content
		mu.Lock()
		calls[prompt]++
		n := calls[prompt]
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(prompt, "bad-image"):
			w.WriteHeader(400)
			_, _ = io.WriteString(w, providertest.OpenAIError("Invalid image: the image data is not a valid image.", "invalid_request_error", "invalid_image"))
		case n == 1:
			w.Header().Set("retry-after-ms", "20")
			w.WriteHeader(429)
			_, _ = io.WriteString(w, providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded"))
		case n == 2:
			w.WriteHeader(503)
			_, _ = io.WriteString(w, providertest.OpenAIError("The server is overloaded", "server_error", ""))
		default:
			_, _ = io.WriteString(w, providertest.OpenAIChat("gpt-test", "answer to "+prompt, 10, 3))
		}
	}))
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s, api_key_env: LOCAL_TEST_KEY}
actions:
  - name: ask
    provider: local
    model: gpt-test
    prompt: "describe {{ .text }}"
    retry: {max_attempts: 3, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 50ms}}
`, srv.URL)), 0o600))
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"a","text":"cats"}
{"id":"b","text":"dogs"}
{"id":"c","text":"bad-image"}
`), 0o600))
	out := filepath.Join(dir, "results.jsonl")
	code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress", "--concurrency", "1")
	require.Equal(t, exitFailedRecords, code, stdout+stderr)
	require.Contains(t, stdout, "3 records, 2 succeeded, 1 failed")
	byID := map[string]map[string]any{}
	for _, r := range readResults(t, out) {
		byID[r["id"].(string)] = r
	}
	for _, id := range []string{"a", "b"} {
		r := byID[id]
		require.Equal(t, "ok", r["status"], id)
		rec := r["recovery"].(map[string]any)
		failures := rec["failures"].([]any)
		require.Len(t, failures, 2, "%s: the 429 and the 503 are recorded", id)
		require.Contains(t, fmt.Sprint(failures), "RateLimitError")
		require.Contains(t, fmt.Sprint(failures), "server")
		require.Equal(t, float64(1), rec["deliveries"])
		require.Equal(t, map[string]any{"input_tokens": float64(10), "output_tokens": float64(3)}, r["usage"])
	}
	bad := byID["c"]
	require.Equal(t, "failed", bad["status"])
	require.Equal(t, "permanent", bad["reason"])
	require.Contains(t, bad["error"].(map[string]any)["message"], "failed permanently: InvalidRequestError: Invalid image")

	code, dl, _ := jetpool(t, "dlq", "list", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, dl, `"reason":"permanent"`)
	require.Contains(t, dl, `"class":"invalid_request"`)
	// The key is in no result, no dead letter, no output.
	raw, err := os.ReadFile(out)
	require.NoError(t, err)
	for _, s := range []string{string(raw), dl, stdout, stderr} {
		require.NotContains(t, s, key)
	}
	code, show, _ := jetpool(t, "dlq", "show", "1")
	require.Equal(t, 0, code)
	require.NotContains(t, show, key)
	require.Contains(t, show, "bad-image")
	require.Regexp(t, `(?m)^worker: +\S+-\d+$`, show, "the dead letter names the worker that failed it (host-pid)")
}
