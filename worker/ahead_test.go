package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

const oneActionWorkflow = `
providers:
  sim: {kind: sim, sim: {reply: "ok", latency: %s}}
defaults:
  provider: sim
actions:
  - name: only
    prompt: "{{ .text }}"
`

// Records read ahead were never started: Stop hands them back at once, while
// the record being worked is still let finish, and another pool runs them
// without waiting for their AckWait. Each record is called once.
func TestReadAheadStopHandsBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Minute})
	wf := testenv.Workflow(t, fmt.Sprintf(oneActionWorkflow, "0s"))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 6), dispatcher.Options{})
	job := res.Job.ID
	counter := testenv.NewCounter()
	gate := &gated{open: make(chan struct{}), started: make(chan string, 10), next: counter.New}
	conA := testenv.Connect(t, b)
	poolA := worker.New(conA, worker.Config{Concurrency: 1, ReadAhead: 3, Log: testenv.Logger(t), NewProvider: gate.New})
	require.NoError(t, poolA.Start(ctx))
	<-gate.started
	testenv.Eventually(t, 10*time.Second, func() bool { return poolA.Snapshot().ReadAhead[job] == 3 },
		"three records read ahead of the one being worked")
	cons, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(job))
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, info.NumAckPending, "four delivered: one in its slot, three read ahead")
	require.EqualValues(t, 2, info.NumPending)

	stopped := make(chan error, 1)
	go func() { stopped <- poolA.Stop(ctx) }()
	// While poolA's call is held, another pool runs the other five records:
	// the three read ahead were handed back at once (AckWait is a minute).
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New})
	j, _, err := b.GetJob(ctx, job)
	require.NoError(t, err)
	testenv.Eventually(t, 20*time.Second, func() bool {
		c, err := b.JobCounts(ctx, j, false)
		return err == nil && c.OK == 5
	}, "five records done while the sixth is still held by the stopping pool")
	require.Empty(t, poolA.Snapshot().ReadAhead)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) before the record in its slot was done", err)
	default:
	}
	close(gate.open)
	require.NoError(t, <-stopped, "the record in its slot finished")
	j, p := testenv.WaitFinished(t, b, job, 20*time.Second)
	require.EqualValues(t, 6, p.OK)
	for id := range testenv.Results(t, b, j) {
		require.Equal(t, 1, counter.Calls(id), "%s called once", id)
	}
}

// Records read ahead by a pool that then stalls (its calls take longer than
// AckWait) get heartbeats like records being worked: none is redelivered.
func TestReadAheadKeepsRecordsAlive(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: 2 * time.Second})
	wf := testenv.Workflow(t, fmt.Sprintf(oneActionWorkflow, "2500ms"))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	counter := testenv.NewCounter()
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 1, ReadAhead: 2, NewProvider: counter.New})
	testenv.Eventually(t, 10*time.Second, func() bool { return pool.Snapshot().ReadAhead[res.Job.ID] == 2 },
		"two records read ahead of the one being worked")
	j, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 3, p.OK)
	// A delivery that expired would come again (caught by the result
	// lookup, not called twice, but handled twice).
	cons, err := b.JS.Consumer(context.Background(), broker.StreamWork, broker.ConsumerName(res.Job.ID))
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumAckPending == 0
	}, "every delivery acked")
	require.EqualValues(t, 3, pool.Snapshot().Handled, "three deliveries handled, none expired")
	for id, r := range testenv.Results(t, b, j) {
		require.Equal(t, 1, r.Recovery.Deliveries, "%s: waited 2.5–5 s in the read-ahead, AckWait 2 s", id)
		require.Equal(t, 1, counter.Calls(id), id)
	}
}
