package steer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/steer"
	"github.com/jetpool/jetpool/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// held is a provider whose calls wait at the door until opened: the test
// knows which calls were in flight when it steered the job.
type held struct {
	*testenv.Counter
	mu   sync.Mutex
	open chan struct{}
}

func newHeld() *held {
	h := &held{Counter: testenv.NewCounter(), open: make(chan struct{})}
	h.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		h.mu.Lock()
		open := h.open
		h.mu.Unlock()
		<-open
		return next()
	}
	return h
}

// release lets every call through, from now on.
func (h *held) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-h.open:
	default:
		close(h.open)
	}
}

// setup dispatches a job of n records through a two-action pipeline and
// starts a pool of conc slots whose calls wait until released.
func setup(t *testing.T, n, conc int) (*broker.Broker, string, *held) {
	t.Helper()
	b := testenv.Broker(t)
	job := dispatchPipeline(t, b, n, dispatcher.Options{})
	h := newHeld()
	t.Cleanup(h.release) // the pool stops at cleanup: its calls must not wait
	testenv.Pool(t, b, worker.Config{Concurrency: conc, NewProvider: h.New})
	return b, job, h
}

// A cancel mid-job: no call starts after it returns, the calls in flight
// finish and are stored, every other record ends cancelled (counted,
// dead-lettered with reason cancelled), the job ends cancelled; a replay of
// the cancelled dead letters runs them to the end.
func TestCancelStopsNewCalls(t *testing.T) {
	t.Parallel()
	const n, conc = 30, 4
	b, job, h := setup(t, n, conc)
	ctx := context.Background()
	testenv.Eventually(t, 20*time.Second, func() bool { return h.Total() == conc }, "every slot in a call")

	rep, err := steer.Cancel(ctx, b, job, steer.CancelOptions{Reason: "wrong prompt"})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Workers)
	require.Empty(t, rep.Calling)
	require.False(t, rep.Already)
	calls := h.Total()
	require.Equal(t, conc, calls, "the calls in flight at the cancel")
	h.release()

	j, p := testenv.WaitFinished(t, b, job, 30*time.Second)
	require.Equal(t, broker.JobCancelled, j.Status)
	require.Equal(t, "wrong prompt", j.Reason)
	require.Equal(t, calls, h.Total(), "no call started after the cancel returned")
	require.EqualValues(t, n, p.Done, "every record has its final result: %+v", p)
	require.EqualValues(t, n, p.ByReason["cancelled"], "in-flight records' next action, and the queued ones, ended cancelled: %+v", p)

	// The answers of the calls in flight are stored (the first action's).
	var firstOK int
	require.NoError(t, b.EachResult(ctx, job, func(r *broker.Result) error {
		if r.Action == "first" && r.Status == broker.StatusOK {
			firstOK++
		}
		if r.Reason == "cancelled" {
			require.Equal(t, broker.StatusCancelled, r.Status, r.ID)
			require.True(t, r.Error.Retryable, "%s: replayable with retry --reason cancelled", r.ID)
			require.Contains(t, r.Error.Message, "job cancelled: the job was cancelled before this record's call: wrong prompt")
		}
		return nil
	}))
	require.Equal(t, conc, firstOK, "the answers of the calls in flight")

	// Cancelling again changes nothing; so does pausing an ended job.
	rep, err = steer.Cancel(ctx, b, job, steer.CancelOptions{})
	require.NoError(t, err)
	require.True(t, rep.Already)
	_, err = steer.Pause(ctx, b, job, time.Time{})
	require.ErrorIs(t, err, broker.ErrJobEnded)

	// retry --reason cancelled: every record runs to the end.
	res, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job, Reason: "cancelled"}})
	require.NoError(t, err)
	require.Equal(t, n, res.Replayed)
	j, p = testenv.WaitFinished(t, b, job, 30*time.Second)
	require.Equal(t, broker.JobRunning, j.Status, "reopened by the replay")
	require.EqualValues(t, n, p.OK, "%+v", p)
	require.Equal(t, 2*n, h.Total(), "each action called once a record: the answers before the cancel were kept")
}

// A cancel of a job that completed is refused; of a missing job too.
func TestCancelEndedJob(t *testing.T) {
	t.Parallel()
	b, job, h := setup(t, 3, 2)
	h.release()
	testenv.WaitFinished(t, b, job, 20*time.Second)
	_, err := steer.Cancel(context.Background(), b, job, steer.CancelOptions{})
	require.ErrorIs(t, err, broker.ErrJobEnded)
	_, err = steer.Cancel(context.Background(), b, "nope", steer.CancelOptions{})
	require.ErrorIs(t, err, broker.ErrJobNotFound)
}

// A pause holds every call while it lasts, also across a restart of the
// worker; the calls in flight when it came finish; a resume runs the rest
// with no record paid twice.
func TestPauseHoldsCallsAcrossRestart(t *testing.T) {
	t.Parallel()
	const n, conc = 20, 3
	b := testenv.Broker(t)
	job := dispatchPipeline(t, b, n, dispatcher.Options{})
	h := newHeld()
	t.Cleanup(h.release)
	ctx := context.Background()
	first := startPool(t, b, conc, h)
	testenv.Eventually(t, 20*time.Second, func() bool { return h.Total() == conc }, "every slot in a call")

	rep, err := steer.Pause(ctx, b, job, time.Time{})
	require.NoError(t, err)
	require.True(t, rep.Paused)
	require.Equal(t, broker.PauseForever, rep.Until)
	h.release() // the calls in flight finish; their next actions wait with the rest
	testenv.Eventually(t, 20*time.Second, func() bool {
		bl, err := b.Backlog(ctx, job)
		return err == nil && bl.AckPending == 0
	}, "the records delivered before the pause settled")
	calls := h.Total()
	require.Equal(t, conc, calls)

	stopPool(t, first)
	second := startPool(t, b, conc, h)
	defer stopPool(t, second)
	// The new worker serves the job, sees it paused (it calls for none),
	// and asks for its records meanwhile.
	for range 3 {
		testenv.Eventually(t, 20*time.Second, func() bool {
			stats, _ := worker.Gather(b)
			return len(stats) == 1 && len(stats[0].Paused) == 1 && len(stats[0].Calling) == 0
		}, "the restarted worker serves the job, paused")
	}
	p, err := b.JobPause(ctx, job)
	require.NoError(t, err)
	require.True(t, p.Paused, "the pause outlives the worker")
	require.Equal(t, calls, h.Total(), "no call while paused")

	rep, err = steer.Resume(ctx, b, job)
	require.NoError(t, err)
	require.False(t, rep.Paused)
	j, prog := testenv.WaitFinished(t, b, job, 30*time.Second)
	require.EqualValues(t, n, prog.OK, "%+v", prog)
	require.NotEqual(t, broker.JobCancelled, j.Status)
	require.Equal(t, 2*n, h.Total(), "one call a record and action: none paid twice")
}

// A job scheduled ahead makes no call before its time, and runs from then.
func TestScheduledStart(t *testing.T) {
	t.Parallel()
	const n = 5
	b := testenv.Broker(t)
	start := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	var mu sync.Mutex
	var firstCall time.Time
	h := newHeld()
	h.release()
	h.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		mu.Lock()
		if firstCall.IsZero() {
			firstCall = time.Now()
		}
		mu.Unlock()
		return next()
	}
	job := dispatchPipeline(t, b, n, dispatcher.Options{StartAt: start})
	j, _, err := b.GetJob(context.Background(), job)
	require.NoError(t, err)
	require.True(t, j.StartAt.Equal(start), "%s vs %s", j.StartAt, start)
	p, err := b.JobPause(context.Background(), job)
	require.NoError(t, err)
	require.True(t, p.Paused)
	require.True(t, p.Until.Equal(start), "paused until its start: %s", p.Until)
	defer stopPool(t, startPool(t, b, 2, h))
	_, prog := testenv.WaitFinished(t, b, job, 30*time.Second)
	require.EqualValues(t, n, prog.OK)
	mu.Lock()
	defer mu.Unlock()
	require.False(t, firstCall.Before(start), "first call %s, scheduled %s", firstCall, start)
}

func dispatchPipeline(t *testing.T, b *broker.Broker, n int, o dispatcher.Options) string {
	t.Helper()
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {latency: 1ms}}
actions:
  - name: first
    provider: sim
    prompt: "do {{ .text }}"
  - name: second
    provider: sim
    prompt: "then {{ .first }}"
`)
	return testenv.Dispatch(t, b, wf, testenv.Records(t, n), o).Job.ID
}

func startPool(t *testing.T, b *broker.Broker, conc int, h *held) *worker.Pool {
	t.Helper()
	p := worker.New(b, worker.Config{Concurrency: conc, NewProvider: h.New, Log: testenv.Logger(t)})
	require.NoError(t, p.Start(context.Background()))
	return p
}

func stopPool(t *testing.T, p *worker.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Stop(ctx))
}
