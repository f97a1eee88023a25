package broker_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A job's counts come from its two counting consumers: made on first use
// for results already stored (an older job), kept exact as results are
// stored, replaced and split by reason.
func TestJobCountsFromCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	j := &broker.Job{ID: "cnt", Actions: []string{"a1", "a2"}, Total: 5}
	write := func(id, action, status, reason string) {
		t.Helper()
		require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: id, Job: j.ID, Action: action, Status: status, Reason: reason}))
	}
	write("r1", "a2", broker.StatusOK, "")
	write("r2", "a1", broker.StatusOK, "") // not final: a1 is not the last action
	write("r3", "a1", broker.StatusFailed, "permanent")

	want := func(ok, failed int64, byReason map[string]int64) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool {
			c, err := b.JobCounts(ctx, j, byReason != nil)
			require.NoError(t, err)
			return c.OK == ok && c.Failed == failed && c.Done == ok+failed && (byReason == nil || maps.Equal(c.ByReason, byReason))
		}, "counts ok=%d failed=%d %v", ok, failed, byReason)
	}
	want(1, 1, nil) // counters made now, over what is stored
	for _, name := range []string{broker.CounterName(j.ID, "ok"), broker.CounterName(j.ID, "failed")} {
		_, err := b.JS.Consumer(ctx, broker.StreamResults, name)
		require.NoError(t, err, name)
	}
	write("r1", "a2", broker.StatusOK, "") // written again: still one
	write("r2", "a2", broker.StatusOK, "")
	write("r4", "a2", broker.StatusFailed, "schema_violation")
	want(2, 2, nil)
	want(2, 2, map[string]int64{"permanent": 1, "schema_violation": 1})

	// They lapse after CounterIdle (never pulled); the next count makes
	// them again, exact.
	c, err := b.JS.Consumer(ctx, broker.StreamResults, broker.CounterName(j.ID, "ok"))
	require.NoError(t, err)
	require.Equal(t, broker.CounterIdle, c.CachedInfo().Config.InactiveThreshold)
	require.NoError(t, b.JS.DeleteConsumer(ctx, broker.StreamResults, broker.CounterName(j.ID, "ok")))
	want(2, 2, nil)
}
