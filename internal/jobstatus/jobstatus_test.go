package jobstatus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// Of the records delivered and not acked, those the workers report as
// read ahead (pulled, not started) count as queued, those in flight as in
// flight, and those storing (called, result being stored) as storing; only
// the rest wait for a redelivery.
// simWorkflow is a one-action workflow on the sim provider.
const simWorkflow = "providers:\n  sim: {kind: sim}\ndefaults:\n  provider: sim\nactions:\n  - name: a\n    prompt: \"{{ .text }}\"\n"

func TestStatusCountsReadAheadAsQueued(t *testing.T) {
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Minute})
	wf := testenv.Workflow(t, simWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 6), dispatcher.Options{})
	cons, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(res.Job.ID))
	require.NoError(t, err)
	batch, err := cons.Fetch(4, jetstream.FetchMaxWait(5*time.Second)) // delivered, never acked
	require.NoError(t, err)
	got := 0
	for range batch.Messages() {
		got++
	}
	require.Equal(t, 4, got)
	j, _, err := b.GetJob(ctx, res.Job.ID)
	require.NoError(t, err)
	id := res.Job.ID
	info, err := cons.Info(ctx)
	require.NoError(t, err)

	s := of(ctx, b, NewReads(Bound), j, info, workerCounts{inFlight: map[string]int64{id: 1}, storing: map[string]int64{},
		readAhead: map[string]int64{id: 2}}, false)
	require.EqualValues(t, 2+2, s.Queued, "two never delivered, two read ahead")
	require.EqualValues(t, 1, s.InFlight)
	require.EqualValues(t, 1, s.Waiting)

	s = of(ctx, b, NewReads(Bound), j, info, workerCounts{inFlight: map[string]int64{id: 1}, storing: map[string]int64{id: 1},
		readAhead: map[string]int64{id: 2}}, false)
	require.EqualValues(t, 1, s.InFlight)
	require.EqualValues(t, 1, s.Storing, "called, its result being stored")
	require.Zero(t, s.Waiting)

	s = of(ctx, b, NewReads(Bound), j, info, workerCounts{inFlight: map[string]int64{}, storing: map[string]int64{}, readAhead: map[string]int64{}}, false)
	require.EqualValues(t, 2, s.Queued)
	require.Zero(t, s.InFlight)
	require.EqualValues(t, 4, s.Waiting, "no worker answered: all four wait for AckWait")
}

// Read gathers the live workers' answers: none without a pool (at once, by
// the server's no-responders status), one with a pool.
func TestReadGathersWorkers(t *testing.T) {
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	out, stats, err := Read(ctx, b, []*broker.Job{res.Job}, true)
	require.NoError(t, err)
	require.Empty(t, stats)
	require.Len(t, out, 1)
	require.EqualValues(t, 3, out[0].Total)

	testenv.Pool(t, b, worker.Config{})
	testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	out, stats, err = Read(ctx, b, []*broker.Job{res.Job}, true)
	require.NoError(t, err)
	require.Len(t, stats, 1, "the pool answers on jetpool.ctl.stats")
	require.Equal(t, 1, out[0].Workers)
	require.EqualValues(t, 3, out[0].Succeeded)
	require.Equal(t, broker.JobCompleted, out[0].Status, "the first status that sees the job finished completes it")

	// A finished job's rate is over its own duration: the same however
	// late it is read.
	j, _, err := b.GetJob(ctx, res.Job.ID)
	require.NoError(t, err)
	require.False(t, j.Finished.IsZero())
	require.False(t, j.Finished.After(time.Now()))
	want := 3 / j.Finished.Sub(j.Created).Seconds()
	out, _, err = Read(ctx, b, []*broker.Job{j}, true)
	require.NoError(t, err)
	require.InDelta(t, want, out[0].Rate, want*1e-9)
}

// A record whose result is stored while its worker still holds it (a group
// commit stored, its ack not sent yet; a write whose ack was lost, tried
// again) counts as done, not as storing too: every record is in one column.
func TestOneColumn(t *testing.T) {
	s := Job{Total: 3000, Queued: 1094, InFlight: 16, Storing: 500, Waiting: 3, Succeeded: 1489}
	s.oneColumn()
	require.EqualValues(t, 398, s.Storing, "the 102 counted twice come out of storing")
	require.EqualValues(t, 3, s.Waiting)
	s = Job{Total: 10, Queued: 2, InFlight: 1, Storing: 1, Waiting: 3, Succeeded: 6}
	s.oneColumn()
	require.EqualValues(t, 0, s.Storing)
	require.EqualValues(t, 1, s.Waiting)
	s = Job{Total: 10, Queued: 2, Storing: 1, Succeeded: 3}
	s.oneColumn()
	require.EqualValues(t, 1, s.Storing, "a count under the total is left alone")
}
