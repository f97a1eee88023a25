package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// `jetpool run` SIGKILLed mid-job where every write is synced
// (JETPOOL_SYNC_INTERVAL=always: the work stream keeps acked records until
// they are purged, results go in group commits), with the embedded server
// it hosts: run again, it resumes; every record ends with one result, and
// none answered and stored before the kill is called again — acked records
// not purged yet, and acks the killed server had not written, are
// delivered again and find their results. What the kill may cost is the
// answers the process had paid for and not stored: its slots' and those
// waiting for a group commit (worker.CommitRoom) — how many depends on how
// many answers came in while the last batch was being stored (4–14 on an
// idle machine, 18–26 with its cores busy, against 16 slots).
func TestChaosRunKilledWhereEveryWriteIsSynced(t *testing.T) {
	t.Parallel()
	const n, slots = 600, 16
	m := newModel(t, 20*time.Millisecond)
	dir, wfPath := modelWorkflowFile(t, m)
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_ACK_WAIT": "3s", "CHAOS_API_KEY": "k",
		"JETPOOL_LOG_LEVEL": "warn", "JETPOOL_SYNC_INTERVAL": "always"}
	input := testenv.Records(t, n)
	args := []string{"run", wfPath, "--input", input, "--no-progress", "--job", "synced", "--concurrency", fmt.Sprint(slots)}
	first := start(t, env, args...)
	testenv.Eventually(t, 60*time.Second, func() bool { return m.total() >= n/2 }, "half the records called")
	first.signal(t, syscall.SIGKILL)
	killed := time.Now()
	first.wait(t, 10*time.Second)
	atKill := m.total()

	second := time.Now()
	again := jetpool(t, env, args...)
	require.Equal(t, 0, again.code, again.stdout+again.stderr)
	require.Contains(t, again.stderr+again.stdout, "resuming it")
	require.Contains(t, again.stdout, fmt.Sprintf("%d records, %d succeeded, 0 failed", n, n))

	repeats := 0
	at := func(t time.Time) string { return t.Format(time.TimeOnly + ".000") }
	for _, id := range okResults(t, env, "synced", n) {
		calls := m.callsOf("answer/" + id)
		for i := 0; i+1 < len(calls); i++ {
			if calls[i].status != 200 {
				continue
			}
			// Called again after an answer: only an answer the killed
			// process had not stored yet explains it — one it answered a
			// moment before the kill.
			repeats++
			require.True(t, calls[i].start.Before(second) && !calls[i+1].start.Before(second) && calls[i].end.After(killed.Add(-time.Second)),
				"%s: answered at %s and called again at %s; the first run was killed at %s, the second started at %s",
				id, at(calls[i].end), at(calls[i+1].start), at(killed), at(second))
		}
	}
	bound := slots + worker.CommitRoom(slots, true)
	require.LessOrEqual(t, repeats, bound, "at most the killed run's slots (%d) and its answers waiting to be stored (%d) called again",
		slots, worker.CommitRoom(slots, true))
	t.Logf("run killed after %d calls; the second run made %d; %d records called again (their answers unstored at the kill)",
		atKill, m.total()-atKill, repeats)
}

// A cluster that syncs every write, with batched writes asked for
// (JETPOOL_BATCH_WRITES=on): the work stream is made keeping acked records,
// results go in group commits on R3, and the workers purge what the job's
// consumer has acked. The leaders of the work stream and of the results
// are killed mid-job in turn: the promise holds, and the acked work is
// purged by the end.
func TestChaosBatchedWritesKeepThePromise(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 1000
	c := startNATSCluster(t, natsOpts{SyncAlways: true})
	admin := readyURLsWith(t, c.urls(), 10*time.Second, func(cfg *broker.Config) { cfg.BatchWrites = "on" })
	ctx := context.Background()
	s, err := admin.JS.Stream(ctx, broker.StreamWork)
	require.NoError(t, err)
	require.Equal(t, jetstream.LimitsPolicy, s.CachedInfo().Config.Retention)
	m := newModel(t, 30*time.Millisecond)
	wf := modelWorkflow(t, m, "{max_attempts: 3, backoff: 100ms}", "answer")
	res := testenv.Dispatch(t, admin, wf, testenv.Records(t, n), dispatcher.Options{JobID: "batched"})
	env := workerEnv(c.urls(), 10*time.Second, "JETPOOL_REPLICAS", "3", "CHAOS_API_KEY", "k", "JETPOOL_BATCH_WRITES", "on",
		"JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
	for range 2 {
		start(t, env, "worker", "--concurrency", "8", "--job", res.Job.ID)
	}
	var killed []time.Time
	for i, stream := range []string{broker.StreamWork, broker.StreamResults} {
		at := int64((i + 1) * n / 3)
		testenv.Eventually(t, 90*time.Second, func() bool { return doneSoFar(admin, res.Job.ID) >= at }, "%d records done", at)
		leader := c.leader(admin, stream)
		c.kill(leader)
		killed = append(killed, time.Now())
		testenv.Eventually(t, 60*time.Second, func() bool { return doneSoFar(admin, res.Job.ID) >= at+50 }, "progress without %s", c.nodes[leader].name)
		c.start(leader)
		c.healthy(leader)
		c.current(admin, stream)
	}
	j, _ := waitFinished(t, admin, res.Job.ID, 120*time.Second)
	t.Log(checkPromise(t, admin, j, m, promise{n: n, bound: callBound(wf), serverKills: killed, serverWindow: 10 * time.Second}))
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, err := admin.Count(ctx, broker.StreamWork, broker.WorkFilter(res.Job.ID))
		return err == nil && n == 0
	}, "the job's acked work purged")
}
