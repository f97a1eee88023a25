package dispatcher_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// workCount is the job's messages in the work stream.
func workCount(t *testing.T, b *broker.Broker, job string) uint64 {
	t.Helper()
	n, err := b.Count(context.Background(), broker.StreamWork, broker.WorkFilter(job))
	require.NoError(t, err)
	return n
}

// records is n JSONL records r1…rn, then the lines of tail.
func records(n int, tail ...string) string {
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":\"record %d\"}\n", i, i)
	}
	for _, l := range tail {
		sb.WriteString(l + "\n")
	}
	return sb.String()
}

// A new job's dispatch reads its input once, publishing each record as it
// validates it, and nothing serves a record until the whole input is found
// good: all through the pass the job is "checking" and has no work
// consumer, so a pool already running calls nothing. A bad last line
// refuses the input as before (every bad line named, nothing left of the
// job), with the pool having made no call.
func TestDispatchChecksWhilePublishingAndServesNothingBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	testenv.Pool(t, b, worker.Config{Concurrency: 16})
	in := testenv.WriteFile(t, "in.jsonl", records(3000, `{"id":"bad","text":`))
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	var seen []string
	_, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: "late-bad", MaxPending: 100, Progress: func(n int64) {
		j, _, err := b.GetJob(ctx, "late-bad")
		require.NoError(t, err)
		_, cerr := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName("late-bad"))
		require.ErrorIs(t, cerr, jetstream.ErrConsumerNotFound, "served while checking, at %d published", n)
		seen = append(seen, j.Status)
	}})
	var bie *dispatcher.BadInputError
	require.ErrorAs(t, err, &bie)
	require.ErrorContains(t, err, "in.jsonl:3001: malformed JSON")
	require.NotEmpty(t, seen, "published while checking")
	for _, s := range seen {
		require.Equal(t, broker.JobChecking, s)
	}
	// Nothing is left of the job, and nothing of it ran.
	_, _, err = b.GetJob(ctx, "late-bad")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
	require.Zero(t, workCount(t, b, "late-bad"))
	n, err := b.Count(ctx, broker.StreamResults, "jetpool.results.late-bad.>")
	require.NoError(t, err)
	require.Zero(t, n, "a record of a refused input ran")

	// The same input with --skip-bad, under the same job id: every good
	// record runs (the refused attempt's message ids, which the server
	// keeps for its dedupe window, are not theirs), the bad line is
	// dead-lettered.
	res, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: "late-bad", SkipBad: true})
	require.NoError(t, err)
	require.EqualValues(t, 3000, res.Published)
	require.EqualValues(t, 1, res.BadLines)
	_, p := testenv.WaitFinished(t, b, "late-bad", 60*time.Second)
	require.EqualValues(t, 3000, p.OK)
	require.EqualValues(t, 1, p.Failed)
}

// An input refused twice, then fixed, under one job id: each attempt
// publishes under ids of its own, so the fixed one publishes every record
// (without a nonce a purged attempt's ids would drop them as duplicates for
// the server's dedupe window), and each record runs once.
func TestDispatchRefusedTwiceThenFixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.WriteFile(t, "in.jsonl", records(500, `{"id":"r501","body":"no text"}`))
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	for range 2 {
		_, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: "fixed"})
		require.ErrorContains(t, err, `in.jsonl:501: action "summarize": prompt template uses field "text", which the record lacks`)
	}
	require.NoError(t, os.WriteFile(in, []byte(records(501)), 0o600))
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{JobID: "fixed"})
	require.EqualValues(t, 501, res.Published)
	require.Zero(t, res.Duplicates)
	require.EqualValues(t, 501, workCount(t, b, "fixed"))
	testenv.Pool(t, b, worker.Config{Concurrency: 16})
	_, p := testenv.WaitFinished(t, b, "fixed", 60*time.Second)
	require.EqualValues(t, 501, p.OK)
}

// A dispatch cancelled while it checks and publishes (Ctrl-C) removes
// what it published, none of which ran: the next dispatch is a new one,
// and every record is stored and run exactly once.
func TestDispatchCancelledWhileCheckingLeavesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.Records(t, 2000)
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	cctx, cancel := context.WithCancel(ctx)
	_, err := d.Dispatch(cctx, wf, dispatcher.Options{Input: in, IDField: "id", JobID: "cancelled", MaxPending: 100,
		Progress: func(n int64) {
			if n >= 500 {
				cancel()
			}
		}})
	require.ErrorIs(t, err, context.Canceled)
	_, _, err = b.GetJob(ctx, "cancelled")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
	count := func() uint64 { return workCount(t, b, "cancelled") }
	require.Zero(t, count())

	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{JobID: "cancelled"})
	require.EqualValues(t, 2000, res.Published)
	require.EqualValues(t, 2000, count(), "each record once")
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 16, NewProvider: counter.New})
	_, p := testenv.WaitFinished(t, b, "cancelled", 60*time.Second)
	require.EqualValues(t, 2000, p.OK)
	require.Equal(t, 2000, counter.Total())
}

// A dispatch stopped mid-pass (SIGSTOP, a lost connection: it renews its
// lease no more) is taken over by the next dispatch of the job once the
// lease has gone unrenewed for a while: that one purges what was published
// and publishes the input again under a nonce of its own. The stopped one,
// woken, publishes nothing more (it cannot renew) and ends with the lease
// lost, leaving the job alone; a write of its that arrives late (buffered
// before it stopped) carries its old nonce and workers drop it. Every
// record runs exactly once.
func TestDispatchTakesOverAStoppedOne(t *testing.T) { // not parallel: it sets the lease's times
	defer dispatcher.SetLeaseTimes(10*time.Millisecond, 300*time.Millisecond, time.Second, 20*time.Millisecond)()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.Records(t, 2000)
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 16, NewProvider: counter.New})

	stopped, wake := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
		once := false
		_, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, IDField: "id", JobID: "stopped", MaxPending: 100,
			Progress: func(n int64) {
				if n >= 500 && !once {
					once = true
					close(stopped)
					<-wake // as SIGSTOP: no renewal, no publish
				}
			}})
		first <- err
	}()
	<-stopped
	j, _, err := b.GetJob(ctx, "stopped")
	require.NoError(t, err)
	require.Equal(t, broker.JobChecking, j.Status)
	require.False(t, j.Lease.IsZero())
	oldNonce := j.Nonce

	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{JobID: "stopped"})
	require.EqualValues(t, 2000, res.Published)
	require.NotEqual(t, oldNonce, res.Job.Nonce)
	require.True(t, res.Job.Lease.IsZero())

	// A write of the stopped dispatch's, arriving late.
	late := &broker.Job{ID: "stopped", Nonce: oldNonce, Lease: time.Now()}
	m, err := broker.NewDispatchMsg(late, "summarize", &broker.Envelope{ID: "r7", RawRecord: []byte(`{"id":"r7","text":"record 7"}`)}, 0)
	require.NoError(t, err)
	m.Header.Set(broker.HeaderFirstRun, "1")
	_, err = b.JS.PublishMsg(ctx, m)
	require.NoError(t, err)

	close(wake)
	select {
	case err := <-first:
		require.ErrorContains(t, err, "another dispatch took the job over")
	case <-time.After(30 * time.Second):
		t.Fatal("the stopped dispatch did not end")
	}
	_, p := testenv.WaitFinished(t, b, "stopped", 60*time.Second)
	require.EqualValues(t, 2000, p.OK)
	require.Zero(t, p.Failed)
	testenv.Eventually(t, 10*time.Second, func() bool {
		n, err := b.Count(ctx, broker.StreamWork, broker.WorkFilter("stopped"))
		return err == nil && n == 0
	}, "the late write dropped")
	for i := 1; i <= 2000; i++ {
		require.Equal(t, 1, counter.Calls(fmt.Sprintf("r%d", i)), "r%d", i)
	}
	require.Equal(t, 2000, counter.Total())
}

// A dispatch whose lease renewals came late (slow synced writes held its
// publishes past the fence) but that nobody took over still owns the job:
// it serves it, instead of ending with "another dispatch took the job
// over" and leaving it checking, served by nobody. Here every renewal is
// late: the fence is shorter than any write.
func TestDispatchLateRenewalStillServes(t *testing.T) { // not parallel: it sets the lease's times
	defer dispatcher.SetLeaseTimes(time.Millisecond, time.Microsecond, time.Minute, 20*time.Millisecond)()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	res, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: testenv.Records(t, 300), JobID: "late", MaxPending: 50})
	require.NoError(t, err)
	require.EqualValues(t, 300, res.Published)
	j, _, err := b.GetJob(ctx, "late")
	require.NoError(t, err)
	require.Equal(t, broker.JobRunning, j.Status)
	require.True(t, j.Lease.IsZero())
}
