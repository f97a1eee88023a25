package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A lease not renewed for LeaseTTL is taken back into doubt, keyed by its
// holder and id, the maps of the Job it came from left as they were; its
// holder resolves it when it comes back.
func TestLedgerReclaimAndResolve(t *testing.T) {
	t.Parallel()
	now := time.Now()
	j := &broker.Job{MaxCost: 1, Cost: 0.2}
	j.Ledger.Leases = map[string]broker.Lease{
		"live": {ID: "l1", Amount: 0.1, Reserved: 0.05, Renewed: now.Add(-time.Second)},
		"gone": {ID: "g1", Amount: 0.3, Reported: 0.1, Renewed: now.Add(-broker.LeaseTTL - time.Second)},
		"idle": {ID: "i1", Renewed: now.Add(-broker.LeaseTTL - time.Second)},
	}
	seen := j.Ledger.Leases
	require.InDelta(t, 0.6, j.Committed(), 1e-12)
	require.InDelta(t, 0.4, j.Left(), 1e-12)

	l := j.Ledger
	require.True(t, l.Reclaim(now))
	require.Len(t, seen, 3, "the Job's own maps are not changed")
	require.Equal(t, []string{"live"}, keys(l.Leases), "an expired lease of amount 0 goes without doubt")
	require.Equal(t, broker.Lease{ID: "g1", Amount: 0.3, Reported: 0.1, Renewed: now.Add(-broker.LeaseTTL - time.Second)},
		l.Doubt[broker.DoubtKey("gone", "g1")])
	require.InDelta(t, 0.3, l.InDoubt(), 1e-12)
	require.InDelta(t, 0.05, l.Reserved(), 1e-12)
	require.False(t, l.Reclaim(now), "nothing more to take back")

	j.Ledger = l
	require.InDelta(t, 0.6, j.Committed(), 1e-12, "what the lease held is still spoken for")
	require.False(t, j.OverBudget())
	j.Cost = 0.7
	require.True(t, j.OverBudget(), "spent and in doubt reach max_cost")
	j.Cost, j.Ledger.Reached = 0.2, true
	require.True(t, j.OverBudget(), "a call's worst case no longer fit")

	l.Resolve(broker.DoubtKey("gone", "g1"))
	require.Zero(t, l.InDoubt())
	require.Len(t, j.Ledger.Doubt, 1, "resolved in a copy")
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// UpdateState writes the ledger with the rest of the job's state, and the
// job read back carries it.
func TestUpdateStateKeepsTheLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	require.NoError(t, b.PutJob(ctx, &broker.Job{ID: "j1", Status: broker.JobRunning, MaxCost: 2, Workflow: []byte(`{}`)}))
	st, err := b.UpdateState(ctx, "j1", func(j *broker.Job) bool {
		j.Cost += 0.5
		j.Ledger.SetLease("h", broker.Lease{ID: "x", Amount: 0.25, Reserved: 0.1, Reported: 0.5, Renewed: time.Now()})
		return true
	})
	require.NoError(t, err)
	require.Equal(t, 0.5, st.Cost)
	j, _, err := b.GetJob(ctx, "j1")
	require.NoError(t, err)
	require.Equal(t, 0.5, j.Cost)
	require.Equal(t, 2.0, j.MaxCost)
	require.Equal(t, broker.JobRunning, j.Status)
	require.InDelta(t, 0.25, j.Ledger.Held(), 1e-12)
	require.InDelta(t, 1.25, j.Left(), 1e-12)
	merged := (&broker.Job{ID: "j1", Actions: []string{"a"}}).WithState(st)
	require.Equal(t, []string{"a"}, merged.Actions)
	require.InDelta(t, 0.25, merged.Ledger.Held(), 1e-12)
}

// A replica's batched direct get reads every job as the leader's reads do,
// with its state; a deleted job is not among them.
func TestJobsFromReplica(t *testing.T) {
	b := testenv.Broker(t)
	ctx := context.Background()
	for _, id := range []string{"j1", "j2", "j3"} {
		require.NoError(t, b.PutJob(ctx, &broker.Job{ID: id, Status: broker.JobRunning, Total: 3}))
	}
	_, err := b.UpdateState(ctx, "j2", func(j *broker.Job) bool { j.Cost = 1.5; j.Status = broker.JobFailed; return true })
	require.NoError(t, err)
	_, err = b.DeleteJob(ctx, "j3")
	require.NoError(t, err)
	want, err := b.ListJobs(ctx)
	require.NoError(t, err)
	got, err := b.JobsFromReplica(ctx, "")
	require.NoError(t, err)
	require.Len(t, got, len(want))
	byID := map[string]*broker.Job{}
	for _, j := range got {
		byID[j.ID] = j
	}
	for _, w := range want {
		require.Equal(t, w.Status, byID[w.ID].Status, w.ID)
		require.Equal(t, w.Cost, byID[w.ID].Cost, w.ID)
	}
	one, err := b.JobsFromReplica(ctx, "j2")
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, 1.5, one[0].Cost)
	_, err = b.JobsFromReplica(ctx, "nope")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
}
