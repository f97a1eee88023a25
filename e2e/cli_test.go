package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// The version TestMain builds into jetpoolBin, as the Dockerfile does.
const (
	e2eVersion = "v0.0.0-e2e"
	e2eCommit  = "e2e0123456789"
)

// `jetpool version` reports what -ldflags "-X main.version=… -X
// main.commit=…" set.
func TestVersionFromLdflags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := jetpool(t, nil, args...)
		require.Zero(t, r.code, r.stderr)
		assert.Regexp(t, `^jetpool `+regexp.QuoteMeta(e2eVersion)+` \(commit `+e2eCommit+`.*; go1\.\d+`, r.stdout)
	}
}

// `jetpool status`, `dlq list` and `results` work beside a running `jetpool
// run` on the embedded server (it serves its server to local processes, as
// `jetpool server` does); SIGINT stops the run with exit 130 and removes the
// server file; the same command again finishes the job.
func TestStatusBesideRun(t *testing.T) {
	t.Parallel()
	const n = 40
	data := filepath.Join(t.TempDir(), "data")
	env := map[string]string{"JETPOOL_DATA_DIR": data}
	wf := testenv.WriteFile(t, "pipeline.yaml", `providers:
  sim: {kind: sim, sim: {latency: 100ms}}
defaults: {provider: sim, model: sim-1}
actions:
  - name: extract
    prompt: "{{ .text }}"
  - name: classify
    prompt: "{{ .extract }}"
`)
	in := testenv.Records(t, n)
	args := []string{"run", wf, "--input", in, "--job", "watched", "--concurrency", "2", "--no-progress"}
	run := start(t, env, args...)
	serverFile := filepath.Join(data, broker.ServerFile)
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := os.Stat(serverFile)
		return err == nil
	}, "jetpool run never wrote %s", serverFile)
	run.waitOutput(t, regexp.MustCompile(`job watched: 40 records dispatched`), 20*time.Second)

	s := jobStatus(t, env, "watched")
	assert.Equal(t, broker.JobRunning, s.Status)
	assert.EqualValues(t, n, s.Total)
	assert.Less(t, s.Succeeded, int64(n))
	assert.Equal(t, 1, s.Workers, "the run's pool answers")
	dl := jetpool(t, env, "dlq", "list")
	require.Zero(t, dl.code, dl.stderr)
	assert.Contains(t, dl.stdout, "0 dead letters")
	res := jetpool(t, env, "results", "watched")
	require.Zero(t, res.code, res.stderr)

	run.signal(t, syscall.SIGINT)
	require.Equal(t, 130, run.wait(t, 30*time.Second), "interrupted")
	assert.Contains(t, run.stderr.String(), "interrupted: in-flight calls were finished or handed back")
	_, err := os.Stat(serverFile)
	require.True(t, errors.Is(err, fs.ErrNotExist), "the server file goes with its server: %v", err)

	again := jetpool(t, env, args...)
	require.Zero(t, again.code, again.stderr)
	assert.Contains(t, again.stdout, "job watched completed: 40 records, 40 succeeded, 0 failed")
	assert.True(t, strings.Contains(again.stderr, "resuming"), again.stderr)
}
