package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The exit codes of `jetpool run`, as a CI step sees them from the process:
// 0 every record ok, 4 completed with failed records (0 with
// --allow-failed), 1 a raise action failed the job, 2 usage and input
// errors (a duplicate id, a template typo: nothing published).
func TestRunExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_LOG_LEVEL": "error"}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	in := write("in.jsonl", "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\"y\"}\n")
	wf := func(name, sim, extra string) string {
		return write(name, "providers: {sim: {kind: sim"+sim+"}}\nactions:\n  - name: act\n    provider: sim\n    prompt: \"{{ .text }}\"\n"+extra)
	}
	ok := wf("ok.yaml", "", "")
	failing := wf("fail.yaml", ", sim: {fail_first: 100, fail_class: auth}", "")
	raise := wf("raise.yaml", ", sim: {fail_first: 100, fail_class: auth}", "    retry: {max_attempts: 2, on_exhausted: raise}\n")
	typo := write("typo.yaml", "providers: {sim: {kind: sim}}\nactions:\n  - name: act\n    provider: sim\n    prompt: \"{{ .txt }}\"\n")
	dups := write("dups.jsonl", "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"a\",\"text\":\"y\"}\n")

	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"every record ok", []string{"run", ok, "--input", in}, 0, "2 succeeded, 0 failed"},
		{"failed records", []string{"run", failing, "--input", in, "--no-preflight"}, 4, "completed with 2 failed records (exit 4; --allow-failed exits 0)"},
		{"failed records allowed", []string{"run", failing, "--input", in, "--no-preflight", "--allow-failed", "--job", "allowed"}, 0, "0 succeeded, 2 failed"},
		{"the job failed", []string{"run", raise, "--input", in, "--no-preflight", "--concurrency", "1"}, 1, "FAILED"},
		{"a template typo", []string{"run", typo, "--input", in}, 2, `typo.yaml:5: actions[0].prompt: reads .txt: no record field and no earlier action is called "txt" (did you mean text?)`},
		{"a duplicate id", []string{"run", ok, "--input", dups}, 2, `dups.jsonl:2: id "a" already used at line 1`},
		{"usage", []string{"run", ok}, 2, "--input is required"},
	} {
		r := jetpool(t, env, append(tc.args, "--no-progress")...)
		require.Equal(t, tc.code, r.code, "%s:\n%s%s", tc.name, r.stdout, r.stderr)
		require.Contains(t, r.stdout+r.stderr, tc.says, tc.name)
	}
}
