package e2e

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A `jetpool retry` on a store that `jetpool ui` hosts (the embedded
// server of the data dir), with no worker anywhere: the retry finds no
// live worker serving the job and works the replayed records itself,
// with the key fixed in its own environment, instead of leaving them for
// nobody; `jetpool status` then counts every record succeeded.
func TestRetryBesideTheDashboardWorksTheRecords(t *testing.T) {
	env, job, failed := quickstartFailed(t)
	require.Positive(t, failed)

	ui := start(t, env, "ui", "--addr", "127.0.0.1:0")
	ui.waitOutput(t, regexp.MustCompile(`jetpool ui on (http://\S+)`), 30*time.Second)

	fixed := map[string]string{"SIM_API_KEY": "sk-sim-fixed"}
	for k, v := range env {
		if k != "SIM_API_KEY" {
			fixed[k] = v
		}
	}
	r := jetpool(t, fixed, "retry", "--job", job, "--no-progress")
	require.Zero(t, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	require.Contains(t, r.stderr, "no live worker serves job "+job+": working its replayed records here")
	require.NotContains(t, r.stderr, "workers will run them")
	require.Contains(t, r.stdout, "200 succeeded, 0 failed")

	st := jetpool(t, env, "status", job, "--json")
	require.Zero(t, st.code, st.stderr)
	var s struct {
		Succeeded, Failed int
		DeadLetters       *int `json:"dead_letters"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	require.Equal(t, 200, s.Succeeded)
	require.Zero(t, s.Failed)
	require.NotNil(t, s.DeadLetters)
	require.Zero(t, *s.DeadLetters)

	ui.signal(t, syscall.SIGTERM)
	require.Zero(t, ui.wait(t, 30*time.Second), ui.stderr.String())
}

// quickstartFailed runs the quickstart with a wrong key in a data dir of
// its own: its auth faults dead-letter a few records (exit 4). It returns
// the environment, the job and how many records failed.
func quickstartFailed(t *testing.T) (env map[string]string, job string, failed int) {
	t.Helper()
	env = map[string]string{"JETPOOL_DATA_DIR": filepath.Join(t.TempDir(), "data"), "JETPOOL_LOG_LEVEL": "warn", "SIM_API_KEY": "sk-wrong"}
	run := jetpool(t, env, "run", "../examples/quickstart/workflow.yaml", "--input", "../examples/quickstart/records.jsonl", "--no-progress")
	require.Equal(t, 4, run.code, "completed with failed records: "+run.stderr)
	m := regexp.MustCompile(`job (\S+) completed: 200 records, (\d+) succeeded, (\d+) failed`).FindStringSubmatch(run.stdout)
	require.NotNil(t, m, run.stdout)
	failed, _ = strconv.Atoi(m[3])
	return env, m[1], failed
}
