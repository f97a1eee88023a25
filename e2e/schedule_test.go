package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// A job dispatched with --after makes no call before its time, also when
// the worker and the server are killed and started again meanwhile (the
// server on the same data dir, at a new port): the schedule is the job's
// stored consumer pause, not any process's memory. After it, every record
// is called once and ends with one result.
func TestScheduledStartSurvivesRestarts(t *testing.T) {
	t.Parallel()
	const n = 8
	// The start must lie beyond both restarts, which take a few seconds on
	// a loaded host: the margin is several times that.
	const after = 10 * time.Second
	m := newModel(t, 10*time.Millisecond)
	dir, wf := modelWorkflowFile(t, m)
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_LOG_LEVEL": "info"}
	host := func() (*proc, map[string]string) {
		srv := start(t, env, "server", "--port", "-1", "--http-port", "0")
		url := srv.waitOutput(t, regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`), 30*time.Second)
		return srv, workerEnv(url, 10*time.Second, "CHAOS_API_KEY", "k", "JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
	}
	serve := func(cli map[string]string) *proc {
		w := start(t, cli, "worker", "--concurrency", "4")
		w.waitOutput(t, regexp.MustCompile(`"job":"sched".*serving job`), 30*time.Second)
		return w
	}

	srv, cli := host()
	d := jetpool(t, cli, "dispatch", wf, "--input", testenv.Records(t, n), "--job", "sched", "--after", after.String(), "--no-preflight")
	require.Zero(t, d.code, d.stderr)
	startAt := scheduledStart(t, cli, "sched")
	w := serve(cli)

	// Every process goes, hard, and comes back before the start.
	w.signal(t, syscall.SIGKILL)
	w.wait(t, 10*time.Second)
	srv.signal(t, syscall.SIGKILL)
	srv.wait(t, 10*time.Second)
	srv, cli = host()
	require.True(t, startAt.Equal(scheduledStart(t, cli, "sched")), "the restarted server holds the start")
	w = serve(cli)
	restarted := time.Now()
	require.True(t, restarted.Before(startAt),
		"the restarts ended at %s, after the start %s: the test proved nothing (a host this loaded needs a later start)", restarted, startAt)
	require.Zero(t, m.total(), "calls before the start")

	var fin status
	testenv.Eventually(t, after+time.Minute, func() bool {
		fin = jobStatus(t, cli, "sched")
		return fin.Status == "completed"
	}, "job sched completed: %+v", &fin)
	assert.EqualValues(t, n, fin.Succeeded)
	first := time.Time{}
	for i := 1; i <= n; i++ {
		calls := m.callsOf(fmt.Sprintf("answer/r%d", i))
		require.Len(t, calls, 1, "record r%d's calls", i)
		assert.False(t, calls[0].start.Before(startAt), "r%d called at %s, before the start %s", i, calls[0].start, startAt)
		if first.IsZero() || calls[0].start.Before(first) {
			first = calls[0].start
		}
	}
	assert.Equal(t, n, m.total(), "every call is a record's")
	res := jetpool(t, cli, "results", "sched")
	require.Zero(t, res.code, res.stderr)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	ids := map[string]bool{}
	for _, l := range lines {
		var r struct{ ID, Status string }
		require.NoError(t, json.Unmarshal([]byte(l), &r), l)
		assert.Equal(t, "ok", r.Status, l)
		ids[r.ID] = true
	}
	assert.Len(t, lines, n, "one result a record")
	assert.Len(t, ids, n, "one result a record")
	t.Logf("scheduled %s ahead; restarts done %s before the start; first call %s after it",
		after, startAt.Sub(restarted).Round(time.Millisecond), first.Sub(startAt).Round(time.Millisecond))

	w.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, w.wait(t, 10*time.Second))
	srv.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, srv.wait(t, 10*time.Second))
}

// scheduledStart is the job's start as `jetpool status --json` says it.
func scheduledStart(t *testing.T, cli map[string]string, job string) time.Time {
	t.Helper()
	st := jetpool(t, cli, "status", job, "--json")
	require.Zero(t, st.code, st.stderr)
	var s struct {
		Scheduled bool      `json:"scheduled"`
		StartAt   time.Time `json:"start_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	require.True(t, s.Scheduled, st.stdout)
	return s.StartAt
}
