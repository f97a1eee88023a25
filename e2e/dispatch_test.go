package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// A `jetpool dispatch` of a new job on a cluster (R3), SIGSTOPped while it
// publishes the input as it validates it (the job leased to it, served by
// no one), is taken over by a second `jetpool dispatch` of the job once the
// lease has gone unrenewed for its 15 s: the second purges what was
// published and publishes the input again. The first, woken with SIGCONT,
// cannot renew its lease, publishes nothing more and exits with why; what
// it had buffered carries its old nonce, and the workers drop it. The
// promise holds: every record has one result and was called once.
func TestChaosDispatchStoppedMidPassIsTakenOver(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 5000
	c := startNATSCluster(t, natsOpts{})
	admin := readyURLs(t, c.urls(), 10*time.Second)
	dir := t.TempDir()
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(simYAML(0, "")), 0o600))
	in := testenv.Records(t, n)
	env := map[string]string{"JETPOOL_NATS_URL": c.urls(), "JETPOOL_REPLICAS": "3"}
	counter := testenv.NewCounter()
	testenv.Pool(t, admin, worker.Config{Concurrency: 32, NewProvider: counter.New})

	ctx := context.Background()
	first := start(t, env, "dispatch", wf, "--input", in, "--job", "stopped")
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, err := admin.Count(ctx, broker.StreamWork, broker.WorkFilter("stopped"))
		return err == nil && got > 0
	}, "the first dispatch published nothing")
	first.signal(t, syscall.SIGSTOP)
	j, _, err := admin.GetJob(ctx, "stopped")
	require.NoError(t, err)
	require.Equal(t, broker.JobChecking, j.Status, "stopped mid-pass")
	require.False(t, j.Lease.IsZero())
	published, err := admin.Count(ctx, broker.StreamWork, broker.WorkFilter("stopped"))
	require.NoError(t, err)
	require.Less(t, published, uint64(n), "stopped mid-pass")
	require.Zero(t, counter.Total(), "a record of a job being checked was called")

	begin := time.Now()
	second := jetpool(t, env, "dispatch", wf, "--input", in, "--job", "stopped")
	require.Zero(t, second.code, second.stderr)
	require.Contains(t, second.stderr, "took the job over")
	took := time.Since(begin)

	first.signal(t, syscall.SIGCONT)
	require.NotZero(t, first.wait(t, 30*time.Second))
	require.Contains(t, first.stderr.String(), "another dispatch took the job over")

	job, p := waitFinished(t, admin, "stopped", 120*time.Second)
	require.EqualValues(t, n, p.OK)
	require.Zero(t, p.Failed)
	checkResults(t, admin, job, n)
	testenv.Eventually(t, 30*time.Second, func() bool {
		left, err := admin.Count(ctx, broker.StreamWork, broker.WorkFilter("stopped"))
		return err == nil && left == 0
	}, "work left in the stream")
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		require.Equal(t, 1, counter.Calls(id), id)
	}
	require.Equal(t, n, counter.Total())
	t.Logf("first dispatch stopped after %d of %d records; the second took over and published all in %.1fs", published, n, took.Seconds())
}
