package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// Where every write is synced (sync_interval: always), the work stream
// keeps acked records (limits retention) and the workers purge them, many
// at a time, and results are stored in group commits: one fsync for many
// records instead of two each. The promise is the same: every record one
// result, one call an action.
func TestSyncedStorePurgesAckedWorkAndGroupsResults(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{SyncInterval: "always"})
	require.True(t, b.Cfg.Batched())
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, broker.StreamWork)
	require.NoError(t, err)
	require.Equal(t, jetstream.LimitsPolicy, s.CachedInfo().Config.Retention, "the work stream keeps acked records")
	keeps, err := b.WorkKeepsAcked(ctx)
	require.NoError(t, err)
	require.True(t, keeps)

	wf := testenv.Workflow(t, pipelineWorkflow)
	const n = 300
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	counter := testenv.NewCounter()
	p := testenv.Pool(t, b, worker.Config{Concurrency: 32, NewProvider: counter.New})
	job, prog := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	require.EqualValues(t, n, prog.OK)
	results := testenv.Results(t, b, job)
	require.Len(t, results, n)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		require.Equal(t, broker.StatusOK, results[id].Status, id)
		require.Equal(t, 2, counter.Calls(id), "%s: one call an action", id)
	}
	// 2n results (one an action) in fewer commits.
	batches := p.ResultBatches()
	require.Positive(t, batches)
	require.Less(t, batches, int64(2*n), "results grouped")
	// The acked work goes: purged once the job is done, if not before.
	testenv.Eventually(t, 20*time.Second, func() bool {
		info, err := s.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, "the job's acked work purged")
	t.Logf("%d results in %d commits", 2*n, batches)
}
