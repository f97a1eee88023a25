package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// gateClock is the system clock, except that a wait of a minute or more
// (a session backoff in these tests) lasts until the gate opens.
type gateClock struct {
	retry.SystemClock
	mu      sync.Mutex
	waiting int
	open    chan struct{}
}

func (c *gateClock) Sleep(ctx context.Context, d time.Duration) error {
	if d < time.Minute {
		return c.SystemClock.Sleep(ctx, d)
	}
	c.mu.Lock()
	c.waiting++
	c.mu.Unlock()
	select {
	case <-c.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *gateClock) resting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiting
}

// A record waiting out its session backoff lets its call slot go: with one
// slot, every record makes its first call while the others wait, and each
// takes a slot again when its wait ends, its attempts and calls those of
// a session that slept in its slot.
func TestBackoffWaitsOffSlot(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	const n = 6 // one slot, room for this many resting
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {fail_first: 1, fail_class: server}}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
    retry: {max_attempts: 3, backoff: 10m, max_backoff: 10m, redeliver: {max_deliveries: 1}}
`)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	counter := testenv.NewCounter()
	clock := &gateClock{open: make(chan struct{})}
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 1, Resting: n, Clock: clock, NewProvider: counter.New})

	testenv.Eventually(t, 30*time.Second, func() bool { return clock.resting() == n },
		"every record waits out its backoff at once: %d of %d (calls %d)", clock.resting(), n, counter.Total())
	require.Equal(t, n, counter.Total(), "one call each so far")
	for job, in := range pool.Snapshot().InFlight {
		require.LessOrEqual(t, in, int64(1), job)
	}
	close(clock.open)

	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, n, p.OK)
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, 2, counter.Calls(id), id)
		require.Equal(t, 2, r.Recovery.Attempts, id)
		require.Equal(t, 1, r.Recovery.Deliveries, id)
	}
}

// Past the room for resting records, a record waits in its slot: the
// records resting never exceed Config.Resting, and none is lost or called
// twice for it.
func TestBackoffRestingIsBounded(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	const resting = 4
	const n = resting + 2
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {fail_first: 1, fail_class: server}}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
    retry: {max_attempts: 2, backoff: 10m, max_backoff: 10m, redeliver: {max_deliveries: 1}}
`)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	counter := testenv.NewCounter()
	clock := &gateClock{open: make(chan struct{})}
	testenv.Pool(t, b, worker.Config{Concurrency: 1, Resting: resting, Clock: clock, NewProvider: counter.New})

	// The resting ones and the one that waits in the slot: the last
	// record has no slot to call from.
	want := resting + 1
	testenv.Eventually(t, 30*time.Second, func() bool { return clock.resting() == want },
		"waits: %d of %d", clock.resting(), want)
	require.Equal(t, want, counter.Total(), fmt.Sprintf("one call each but the last record's (%d)", n))
	close(clock.open)

	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, n, p.OK)
	for id := range testenv.Results(t, b, job) {
		require.Equal(t, 2, counter.Calls(id), id)
	}
}

func TestRestingMax(t *testing.T) {
	t.Parallel()
	require.Equal(t, worker.RestingMin, worker.RestingMax(1))
	require.Equal(t, worker.RestingMin, worker.RestingMax(256))
	require.Equal(t, 5000*worker.RestingPerSlot, worker.RestingMax(5000))
}
