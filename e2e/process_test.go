package e2e

import (
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// A `jetpool worker` process killed with SIGKILL mid-job: its in-flight
// records are redelivered after AckWait to a second worker and finish; none
// is lost, none has two results.
func TestWorkerKilledMidJob(t *testing.T) {
	t.Parallel()
	const (
		n       = 60
		ackWait = 2 * time.Second
		conc    = 6
	)
	b, url := embeddedServer(t, ackWait)
	job := dispatch(t, b, simWorkflow(t, 200*time.Millisecond, ""), n, "killed")

	a := start(t, workerEnv(url, ackWait), "worker", "--concurrency", "6", "--job", job.ID)
	// Mid-job: the child has finished some records and holds a full set in flight.
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, ackPending := consumerState(t, b, job.ID)
		return done(t, b, job.ID) >= conc && ackPending == conc
	}, "worker child never had %d records in flight", conc)
	a.signal(t, syscall.SIGKILL)
	a.wait(t, 5*time.Second)
	_, lost := consumerState(t, b, job.ID)
	finishedByA := done(t, b, job.ID)
	require.Positive(t, lost, "the killed worker held records")

	// The second worker, in this process, counts its calls per record.
	counter := testenv.NewCounter()
	pb := testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 16, NewProvider: counter.New})
	begin := time.Now()
	j, p := testenv.WaitFinished(t, b, job.ID, 30*time.Second)
	took := time.Since(begin)

	res := checkResults(t, b, j, n)
	require.EqualValues(t, n, p.OK)
	redelivered := 0
	for id, r := range res {
		if r.Recovery.Lost > 0 {
			redelivered++
			require.Equal(t, 1, r.Recovery.Lost, id)
			require.Equal(t, 1, counter.Calls(id), "record %s: redelivered to the second worker, which called once", id)
		}
	}
	// Exactly the records the dead worker held come back on a second delivery
	// (in flight when it died; it may also have finished one or two of them
	// between our look and the kill, whose results are then kept).
	require.Positive(t, redelivered)
	require.LessOrEqual(t, redelivered, lost)
	require.LessOrEqual(t, took, 20*time.Second)
	t.Logf("SIGKILL: worker A finished %d, held %d at the kill; %d redelivered after AckWait %s and finished by B; "+
		"B made %d calls for %d records; job done %.1fs after B started", finishedByA, lost, redelivered, ackWait,
		pb.Calls(), int64(n)-finishedByA, took.Seconds())
}

// SIGTERM to a `jetpool worker` with long calls in flight and a short
// --drain: it exits promptly and hands its records back (Nak), so another
// worker finishes them long before the 60s AckWait would have expired.
func TestWorkerGracefulShutdown(t *testing.T) {
	t.Parallel()
	const (
		n       = 8
		ackWait = 60 * time.Second
		latency = 3 * time.Second
	)
	b, url := embeddedServer(t, ackWait)
	job := dispatch(t, b, simWorkflow(t, latency, ""), n, "drained")

	a := start(t, workerEnv(url, ackWait), "worker", "--concurrency", "4", "--drain", "300ms", "--job", job.ID)
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, ackPending := consumerState(t, b, job.ID)
		return ackPending == 4
	}, "worker child never had 4 long calls in flight")
	require.Zero(t, done(t, b, job.ID), "calls of %s cannot have finished yet", latency)

	term := time.Now()
	a.signal(t, syscall.SIGTERM)
	code := a.wait(t, 10*time.Second)
	exited := time.Since(term)
	require.Equal(t, 0, code, "worker exits 0 on SIGTERM")
	require.Less(t, exited, 3*time.Second, "the drain is 300ms: the worker must not wait for its %s calls", latency)
	a.waitOutput(t, regexp.MustCompile(`handed back`), time.Second)

	// A Nak'ed message stays in the consumer's ack-pending set until it is
	// delivered again, so the proof of the hand-back is the clock: the next
	// worker gets the records at once, not after AckWait.
	pending, ackPending := consumerState(t, b, job.ID)
	require.EqualValues(t, n-4, pending)
	require.Equal(t, 4, ackPending)

	counter := testenv.NewCounter()
	testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: n, NewProvider: counter.New})
	j, p := testenv.WaitFinished(t, b, job.ID, 20*time.Second)
	took := time.Since(term)
	require.Less(t, took, ackWait/3, "the job completes far sooner than AckWait")
	res := checkResults(t, b, j, n)
	require.EqualValues(t, n, p.OK)
	second := 0
	for _, r := range res {
		if r.Recovery.HandBacks == 1 {
			second++
			require.Equal(t, 1, r.Recovery.Deliveries, "a hand-back spends none of the record's deliveries")
		}
	}
	require.Equal(t, 4, second, "the 4 handed-back records finished after one hand-back")
	t.Logf("SIGTERM: worker exited in %s with 4 calls of %s in flight; job finished %.1fs after SIGTERM (AckWait %s); %d calls by the second worker",
		exited.Round(time.Millisecond), latency, took.Seconds(), ackWait, counter.Total())
}
