package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// budgetRig is a job with a budget in a real JetStream, and budgets of
// several "workers" (holders) on it, each with its own runner: what two
// processes would be.
type budgetRig struct {
	t   *testing.T
	b   *broker.Broker
	job string
}

func newBudgetRig(t *testing.T, maxCost float64) *budgetRig {
	// A real embedded JetStream (internal/testenv imports this package).
	cfg := broker.Config{DataDir: t.TempDir(), Replicas: 1, LogLevel: "warn", Concurrency: 16, SyncInterval: "1s",
		AckWait: 5 * time.Second, MaxAckPending: 1000, DedupeWindow: time.Hour}
	b, err := broker.StartEmbedded(context.Background(), cfg, zerolog.Nop(), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.Ensure(context.Background()))
	r := &budgetRig{t: t, b: b, job: "budget-rig"}
	require.NoError(t, b.PutJob(context.Background(), &broker.Job{ID: r.job, Status: broker.JobRunning, MaxCost: maxCost, Workflow: []byte(`{}`)}))
	return r
}

// worker is a budget of a holder of its own, its runner following the
// job's entry as a pool's watch does.
func (r *budgetRig) worker(name string) *budget {
	r.t.Helper()
	j := r.read()
	p := &Pool{b: r.b, id: name, log: zerolog.Nop()}
	jr := &jobRunner{p: p, id: r.job}
	jr.setJob(j)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := r.b.WatchJobs(ctx)
	require.NoError(r.t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.Each(ctx, func(j *broker.Job) {
			if j.ID == r.job && !j.Deleted {
				jr.setJob(j)
			}
		})
	}()
	r.t.Cleanup(func() { cancel(); w.Stop(); wg.Wait() })
	bu := jr.budget()
	r.t.Cleanup(func() { bu.Close(context.Background()) })
	return bu
}

func (r *budgetRig) read() *broker.Job {
	r.t.Helper()
	j, _, err := r.b.GetJob(context.Background(), r.job)
	require.NoError(r.t, err)
	return j
}

// backdate makes holder's lease look unrenewed for longer than LeaseTTL,
// as a worker frozen (SIGSTOP) or killed leaves it.
func (r *budgetRig) backdate(holder string) {
	r.t.Helper()
	_, err := r.b.UpdateState(context.Background(), r.job, func(j *broker.Job) bool {
		x, ok := j.Ledger.Leases[holder]
		require.True(r.t, ok, "%s holds a lease", holder)
		x.Renewed = x.Renewed.Add(-broker.LeaseTTL - time.Second)
		j.Ledger.SetLease(holder, x)
		return true
	})
	require.NoError(r.t, err)
}

// Many calls at once from two holders: a call goes only while what is
// spent and set aside is below max_cost, so the spend passes it by at most
// one call's worst case, and stops only once it has reached it.
func TestBudgetOvershootsByOneCallAtMost(t *testing.T) {
	t.Parallel()
	const maxCost, worst, cost = 1.0, 0.03, 0.01
	rig := newBudgetRig(t, maxCost)
	a, b := rig.worker("a"), rig.worker("b")
	var calls, stopped atomic.Int64
	var wg sync.WaitGroup
	for i := range 128 {
		bu := a
		if i%2 == 1 {
			bu = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				res, err := bu.reserve(context.Background(), worst)
				if err != nil {
					require.NotNil(t, asBudgetStop(err), "%v", err)
					stopped.Add(1)
					return
				}
				calls.Add(1)
				res.settle(cost)
			}
		}()
	}
	wg.Wait()
	a.Close(context.Background())
	b.Close(context.Background())
	j := rig.read()
	require.InDelta(t, float64(calls.Load())*cost, j.Cost, 1e-9, "the ledger is what the calls cost")
	require.GreaterOrEqual(t, j.Cost, maxCost-dust, "it stops only once the spend reached max_cost")
	require.LessOrEqual(t, j.Cost, maxCost+worst, "and passes it by one call's worst case at most")
	require.Zero(t, j.Ledger.Held(), "every lease handed back")
	require.True(t, j.OverBudget())
	require.Equal(t, broker.JobFailed, j.Status)
	require.Contains(t, j.Reason, "max_cost $1.00 reached: $")
	require.Equal(t, int64(128), stopped.Load())
}

// A worker that stops renewing its lease (killed, frozen) has it taken
// back into doubt by the next worker that writes the ledger: the budget
// it held stays spoken for (it may have been spent), the rest of the
// budget goes on being used, and when the worker comes back its spend
// replaces the doubt.
func TestBudgetLeaseOfAFrozenWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := newBudgetRig(t, 1.0)
	frozen, live := rig.worker("frozen"), rig.worker("live")

	// The frozen worker holds a lease with a call under way.
	inFlight, err := frozen.reserve(ctx, 0.4)
	require.NoError(t, err)
	require.InDelta(t, 0.4, rig.read().Ledger.Held(), 1e-9)
	rig.backdate(frozen.holder)

	// The live worker takes it back: 0.4 in doubt, 0.6 left for it.
	r1, err := live.reserve(ctx, 0.5)
	require.NoError(t, err)
	j := rig.read()
	require.InDelta(t, 0.4, j.Ledger.InDoubt(), 1e-9, "the frozen worker's lease, in doubt")
	require.NotContains(t, j.Ledger.Leases, frozen.holder)
	r1.settle(0.5)
	// 0.4 in doubt and 0.5 spent leave 0.1: one more call may take it.
	r2, err := live.reserve(ctx, 0.2)
	require.NoError(t, err)
	r2.settle(0.2)
	_, err = live.reserve(ctx, 0.2)
	require.NotNil(t, asBudgetStop(err), "0.7 spent and 0.4 in doubt: the budget is reached (%v)", err)
	require.LessOrEqual(t, rig.read().Committed(), 1.0+0.2, "what is spent and in doubt passes the cap by one call's worst case at most")

	// The frozen worker thaws: its call is answered ($0.15), and what it
	// spent replaces the doubt.
	inFlight.settle(0.15)
	frozen.flush(ctx)
	live.flush(ctx)
	j = rig.read()
	require.Zero(t, j.Ledger.InDoubt(), "the doubt is resolved")
	require.InDelta(t, 0.85, j.Cost, 1e-9, "both workers' spend")
	// The job was stopped by its budget: what the leases keep goes back
	// once each worker sees it.
	require.Eventually(t, func() bool { return rig.read().Ledger.Held() == 0 }, 10*time.Second, 10*time.Millisecond, "leases handed back")
}

// A killed worker never comes back: its lease stays in doubt, counted
// against the budget, and the other workers go on with the rest of it —
// nothing is locked beyond what the dead worker held.
func TestBudgetLeaseOfAKilledWorker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := newBudgetRig(t, 1.0)
	dead, live := rig.worker("dead"), rig.worker("live")
	_, err := dead.reserve(ctx, 0.25)
	require.NoError(t, err)
	dead.mu.Lock()
	dead.closed = true // it writes nothing more: as a killed process
	dead.mu.Unlock()
	rig.backdate(dead.holder)
	spent := 0.0
	for {
		r, err := live.reserve(ctx, 0.1)
		if err != nil {
			require.NotNil(t, asBudgetStop(err), "%v", err)
			break
		}
		r.settle(0.05)
		spent += 0.05
	}
	live.flush(ctx)
	j := rig.read()
	require.InDelta(t, 0.25, j.Ledger.InDoubt(), 1e-9)
	require.InDelta(t, spent, j.Cost, 1e-9)
	require.InDelta(t, 0.75, j.Cost, 1e-9, "the live worker used the rest of the budget, to the cent")
	require.LessOrEqual(t, j.Cost+j.Ledger.InDoubt(), 1.0+0.1)
}

// A write that lands although its answer is lost is not counted twice by
// the next: the spend is written as what the holder spent beyond what the
// ledger says it reported.
func TestBudgetWriteIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rig := newBudgetRig(t, 0) // no budget: the spend alone
	w := rig.worker("w")
	r, err := w.reserve(ctx, 0)
	require.NoError(t, err)
	r.settle(0.3)
	w.flush(ctx)
	// As if the write had landed and its answer been lost: the holder
	// believes nothing was reported.
	w.mu.Lock()
	w.reported = 0
	w.mu.Unlock()
	w.flush(ctx)
	require.InDelta(t, 0.3, rig.read().Cost, 1e-12)
	require.False(t, errors.Is(err, context.Canceled))
}
