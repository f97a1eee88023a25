package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// A worker stopped mid-call is played in one process: pool A's call of r1
// blocks until the test lets it end, and A's heartbeats and claim renewals
// stop while it is "frozen" (Config.Frozen), as a stopped process sends
// none. Its AckWait runs out, and JetStream delivers r1 again, to pool B.

// frozenCall is pool A: its call of r1 under way, held until thaw.
type frozenCall struct {
	counter *testenv.Counter
	pool    *worker.Pool
	frozen  atomic.Bool
	calling chan struct{}
	answer  chan error // nil: the model's answer; else this error
}

// frozenSetup dispatches one record r1 of a sim action with session
// retries, under AckWait ackWait, and starts pool A calling it.
func frozenSetup(t *testing.T, ackWait time.Duration, concurrency int) (*broker.Broker, *broker.Job, *frozenCall) {
	t.Helper()
	b := testenv.Broker(t, testenv.Options{AckWait: ackWait})
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {latency: 1ms}}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
    retry: {max_attempts: 3, backoff: 10ms, redeliver: {max_deliveries: 3, backoff: 10ms}}
`)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 1), dispatcher.Options{JobID: "frozen"})
	a := &frozenCall{counter: testenv.NewCounter(), calling: make(chan struct{}, 1), answer: make(chan error, 1)}
	a.counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		if a.counter.Calls(req.RecordID) == 1 {
			a.calling <- struct{}{}
			if err := <-a.answer; err != nil {
				return provider.Response{}, err
			}
		}
		return next()
	}
	a.pool = testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: concurrency, ReadAhead: -1,
		NewProvider: a.counter.New, Frozen: a.frozen.Load})
	<-a.calling
	return b, res.Job, a
}

// claimed waits until r1's call is claimed (a single server claims a
// first delivery's call at its first heartbeat).
func claimed(t *testing.T, b *broker.Broker, job string) {
	t.Helper()
	kv, err := b.KV(context.Background(), broker.BucketClaims)
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, err := kv.Get(context.Background(), broker.StateKey(job, "act", "r1"))
		return err == nil
	}, "r1's call claimed")
}

// Stopped for less than its claim stands (2 × AckWait): the delivery made
// again waits for the claim, the thawed worker's answer is stored, and the
// record is paid once.
func TestFrozenWithinTheClaimPaysOnce(t *testing.T) {
	t.Parallel()
	b, job, a := frozenSetup(t, 3*time.Second, 1)
	claimed(t, b, job.ID)
	a.frozen.Store(true)
	other := testenv.NewCounter()
	pb := testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 1, NewProvider: other.New})
	testenv.Eventually(t, 20*time.Second, func() bool { return pb.Handled() >= 1 }, "r1 delivered again to B (AckWait ran out)")
	require.Zero(t, other.Total(), "B waits for A's claim")
	a.answer <- nil // the answer arrived while A was stopped
	a.frozen.Store(false)
	j, p := testenv.WaitFinished(t, b, job.ID, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	require.Equal(t, 1, a.counter.Calls("r1"))
	require.Zero(t, other.Calls("r1"), "paid once")
	require.Len(t, testenv.Results(t, b, j), 1)
}

// Stopped longer: the delivery made again takes the lapsed claim over,
// counts the silent worker's call as the record's, and calls.
// The thawed worker makes no further call for the record, whether its
// call failed (its session would retry) or its answer is there (stored:
// it was paid for).
func TestFrozenPastTheClaimCallsNoMore(t *testing.T) {
	t.Parallel()
	for name, thaw := range map[string]error{
		"its call failed": &retry.Error{Class: retry.ClassServer, Status: 503, TypeName: "InternalServerError", Message: "overloaded"},
		"its answer came": nil,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, job, a := frozenSetup(t, time.Second, 1)
			claimed(t, b, job.ID)
			a.frozen.Store(true)
			other := testenv.NewCounter()
			testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 1, NewProvider: other.New})
			j, p := testenv.WaitFinished(t, b, job.ID, 30*time.Second)
			require.EqualValues(t, 1, p.OK)
			require.Equal(t, 1, other.Calls("r1"), "B took the lapsed claim over and called")
			r := testenv.Results(t, b, j)["r1"]
			require.Equal(t, 2, r.Recovery.Attempts, "A's call counts: B's result says 2 calls")
			require.Equal(t, 1, r.Recovery.Deliveries, "A's lost delivery spends none of the record's (poison.go bounds such losses)")

			a.answer <- thaw
			a.frozen.Store(false)
			testenv.Eventually(t, 20*time.Second, func() bool { return a.pool.InFlightCount() == 0 && a.pool.Snapshot().Storing["frozen"] == 0 }, "A let go of r1")
			require.Equal(t, 1, a.counter.Calls("r1"), "A called no more")
			require.Equal(t, 1, other.Calls("r1"))
			require.Len(t, testenv.Results(t, b, j), 1, "one final result")
		})
	}
}

// A message delivered again to the pool that still handles it (its
// AckWait ran out while the process was stopped, the embedded server with
// it, as a stopped `jetpool run`) is left to the delivery under way: one
// call.
func TestDeliveredAgainToItsOwnPoolPaysOnce(t *testing.T) {
	t.Parallel()
	b, job, a := frozenSetup(t, time.Second, 2)
	a.frozen.Store(true)
	testenv.Eventually(t, 20*time.Second, func() bool { return a.pool.Handled() >= 2 }, "r1 delivered again to the same pool")
	a.answer <- nil
	a.frozen.Store(false)
	_, p := testenv.WaitFinished(t, b, job.ID, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	require.Equal(t, 1, a.counter.Calls("r1"), "paid once")
}
