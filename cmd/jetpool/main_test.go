package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("os/signal.signal_recv"),
		goleak.IgnoreTopFunction("os/signal.loop"))
}

// simWorkflow is one action on the sim provider.
const simWorkflow = "providers:\n  sim: {kind: sim}\ndefaults:\n  provider: sim\nactions:\n  - name: a\n    prompt: \"{{ .text }}\"\n"

// jetpool runs the CLI in-process with its own data dir.
func jetpool(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = realMain(args, &out, &errb)
	return code, out.String(), errb.String()
}

func setEnv(t *testing.T) string {
	dir := t.TempDir()
	t.Setenv("JETPOOL_DATA_DIR", filepath.Join(dir, "data"))
	t.Setenv("JETPOOL_NATS_URL", "")
	t.Setenv("JETPOOL_LOG_LEVEL", "error")
	t.Setenv("JETPOOL_LOG_FORMAT", "json")
	return dir
}

func readResults(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m))
		out = append(out, m)
	}
	return out
}

// The quickstart tells the story of docs/design.md: a run where some records die
// with "invalid api key", the key is fixed, retry replays them, all ok.
func TestQuickstartStory(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("SIM_API_KEY", "")
	out := filepath.Join(dir, "results.jsonl")
	wf, in := "../../examples/quickstart/workflow.yaml", "../../examples/quickstart/records.jsonl"

	code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress")
	require.Equal(t, exitFailedRecords, code, "return_last: failed records do not fail the job, but the exit code says they failed\n%s%s", stdout, stderr)
	require.Contains(t, stderr, "completed with ")
	require.Contains(t, stdout, "200 records")
	require.Contains(t, stdout, "failed by class:  auth")
	results := readResults(t, out)
	require.Len(t, results, 200)
	failed := 0
	for _, r := range results {
		if r["status"] == "failed" {
			failed++
			require.Equal(t, "permanent", r["reason"])
		}
	}
	require.Positive(t, failed)

	code, stdout, _ = jetpool(t, "dlq", "list", "--reason", "permanent")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "failed permanently: AuthError: invalid api key")

	// Running the same command again re-runs nothing.
	code, stdout, _ = jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress", "--allow-failed")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "model calls this run: 0")

	t.Setenv("SIM_API_KEY", "sk-sim-fixed")
	code, stdout, stderr = jetpool(t, "retry", "--output", out, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.Contains(t, stderr, "replayed")
	require.Contains(t, stdout, "200 succeeded, 0 failed")
	for _, r := range readResults(t, out) {
		require.Equal(t, "ok", r["status"], r["id"])
	}
	code, stdout, _ = jetpool(t, "dlq", "list")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "0 dead letters")

	code, stdout, _ = jetpool(t, "status", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"succeeded": 200`)
}

func TestExitCodes(t *testing.T) {
	dir := setEnv(t)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	in := write("in.jsonl", `{"id":"a","text":"x"}
{"id":"b","text":"y"}
{"id":"c","text":"z"}
`)
	raise := write("raise.yaml", `
providers:
  sim: {kind: sim, sim: {fail_first: 100, fail_class: auth}}
actions:
  - name: act
    provider: sim
    prompt: "{{ .text }}"
    retry: {max_attempts: 2, on_exhausted: raise}
`)
	code, stdout, stderr := jetpool(t, "run", raise, "--input", in, "--no-progress", "--concurrency", "1")
	require.Equal(t, 1, code, stdout+stderr)
	require.Contains(t, stderr, "failed permanently: AuthError: invalid api key")
	require.Contains(t, stdout, "FAILED")

	bad := write("bad.yaml", "actions:\n  - name: a\n    prompt: x\n    retry: {max_attempts: 12}\n")
	code, _, stderr = jetpool(t, "run", bad, "--input", in)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "bad.yaml:4")
	require.Contains(t, stderr, "max_attempts: 12 is out of range 1-10")

	okWF := write("ok.yaml", "providers: {sim: {kind: sim}}\nactions:\n  - name: a\n    provider: sim\n    prompt: \"{{ .text }}\"\n")
	badIn := write("bad.jsonl", "{\"id\":\"a\",\"text\":\"x\"}\n{broken\n")
	code, _, stderr = jetpool(t, "run", okWF, "--input", badIn)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "bad.jsonl:2: malformed JSON")

	code, _, _ = jetpool(t, "run", okWF)
	require.Equal(t, 2, code, "--input is required")
	code, _, _ = jetpool(t, "frobnicate")
	require.Equal(t, 2, code)
	code, stdout, _ = jetpool(t, "validate", okWF)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "off (1 call, 1 delivery)")
	// Completed with failed records: 4 (return_last), 0 with --allow-failed;
	// every record ok: 0.
	failWF := write("fail.yaml", "providers: {sim: {kind: sim, sim: {fail_first: 100, fail_class: auth}}}\nactions:\n  - name: a\n    provider: sim\n    prompt: \"{{ .text }}\"\n")
	code, stdout, stderr = jetpool(t, "run", failWF, "--input", in, "--no-progress", "--no-preflight")
	require.Equal(t, 4, code, stdout+stderr)
	require.Contains(t, stdout, "completed: 3 records, 0 succeeded, 3 failed")
	require.Contains(t, stderr, "completed with 3 failed records (exit 4; --allow-failed exits 0)")
	code, _, stderr = jetpool(t, "run", failWF, "--input", in, "--no-progress", "--no-preflight", "--allow-failed")
	require.Equal(t, 0, code, stderr)
	code, stdout, stderr = jetpool(t, "run", okWF, "--input", in, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.Contains(t, stdout, "3 succeeded, 0 failed")

	// validate: a suspect name is a warning; with --input, the refusal run makes.
	typo := write("typo.yaml", "providers: {sim: {kind: sim}}\ndefaults: {provider: sim}\nactions:\n  - name: classify\n    prompt: \"{{ .text }}\"\n  - name: sum\n    prompt: \"{{ .clasify }}\"\n")
	code, _, stderr = jetpool(t, "validate", typo)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, `warning: `+typo+`:7: actions[1].prompt: reads .clasify: no earlier action is called "clasify" (did you mean classify?)`)
	code, _, stderr = jetpool(t, "validate", typo, "--input", in)
	require.Equal(t, 2, code, stderr)
	require.Contains(t, stderr, typo+`:7: actions[1].prompt: reads .clasify: no record field and no earlier action is called "clasify" (did you mean classify?)`)
	code, _, stderr = jetpool(t, "validate", okWF, "--input", in)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "3 records, every field the prompts read is there")

	code, stdout, _ = jetpool(t, "help")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "4    the job completed with failed records")
	for _, c := range commands {
		require.Contains(t, stdout, c.name)
	}
	require.True(t, strings.Contains(stdout, "JETPOOL_NATS_URL"))
}
