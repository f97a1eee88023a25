//go:build chaos

package e2e

import (
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// A `jetpool worker` attached to the store a `jetpool run` hosts (through
// the data dir's server file): the run interrupted and started again, its
// server on another port, the worker reconnects to the new one and works
// on; the job completes with one result a record.
func TestChaosWorkerBesideRunRestarted(t *testing.T) {
	t.Parallel()
	const n = 600
	m := newModel(t, 50*time.Millisecond)
	dir, wfPath := modelWorkflowFile(t, m)
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_ACK_WAIT": "10s", "CHAOS_API_KEY": "k",
		"JETPOOL_KEY_HOSTS": "CHAOS_API_KEY=" + m.Listener.Addr().String()}
	input := testenv.Records(t, n)
	args := []string{"run", wfPath, "--input", input, "--no-progress", "--concurrency", "8", "--job", "beside"}
	run := start(t, env, args...)
	run.waitOutput(t, regexp.MustCompile(`serving job`), time.Minute)
	w := start(t, env, "worker", "--concurrency", "8", "--job", "beside")
	testenv.Eventually(t, time.Minute, func() bool { return m.total() >= n/4 }, "a quarter called")
	run.signal(t, syscall.SIGINT)
	require.Equal(t, 130, run.wait(t, time.Minute))

	again := start(t, env, args...)
	w.waitOutput(t, regexp.MustCompile(`nats reconnected`), time.Minute)
	require.Equal(t, 0, again.wait(t, 2*time.Minute), "the run started again completes")
	require.Contains(t, again.stdout.String(), "600 records, 600 succeeded, 0 failed")
	twice := 0
	for i := 1; i <= n; i++ {
		if c := len(m.callsOf("answer/r" + strconv.Itoa(i))); c > 1 {
			twice++
		}
	}
	t.Logf("%d calls for %d records, %d records called more than once", m.total(), n, twice)
	w.signal(t, syscall.SIGTERM)
	w.wait(t, time.Minute)
}
