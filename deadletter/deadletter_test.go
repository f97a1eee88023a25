package deadletter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wfYAML = `
providers:
  sim: {kind: sim}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
    retry: {max_attempts: 1, redeliver: {max_deliveries: 1}}
`

// failing makes the records in bad fail with an auth error until fixed.
type failing struct {
	*testenv.Counter
	bad   map[string]bool
	fixed chan struct{}
}

func newFailing(bad ...string) *failing {
	f := &failing{Counter: testenv.NewCounter(), bad: map[string]bool{}, fixed: make(chan struct{})}
	for _, b := range bad {
		f.bad[b] = true
	}
	f.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		select {
		case <-f.fixed:
		default:
			if f.bad[req.RecordID] {
				return provider.Response{}, &retry.Error{Class: retry.ClassAuth, Status: 401, Message: "invalid api key"}
			}
		}
		return next()
	}
	return f
}

func setup(t *testing.T, n int, bad ...string) (*broker.Broker, *broker.Job, *failing) {
	t.Helper()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, wfYAML)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	f := newFailing(bad...)
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: f.New})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, len(bad), p.Failed)
	return b, job, f
}

func TestDeadLetterHeadersReadableAsIs(t *testing.T) {
	t.Parallel()
	b, job, _ := setup(t, 3, "r2")
	s, err := b.Stream(context.Background(), broker.StreamDLQ)
	require.NoError(t, err)
	m, err := s.GetMsg(context.Background(), 1)
	require.NoError(t, err)
	require.Equal(t, "jetpool.dlq."+job.ID+".act", m.Subject)
	h := m.Header
	require.Equal(t, job.ID, h.Get("Jetpool-Job"))
	require.Equal(t, "r2", h.Get("Jetpool-Record"))
	require.Equal(t, "act", h.Get("Jetpool-Action"))
	require.Equal(t, "permanent", h.Get("Jetpool-Reason"))
	require.Equal(t, "auth", h.Get("Jetpool-Error-Class"))
	require.Equal(t, "failed permanently: AuthError: invalid api key", h.Get("Jetpool-Error"))
	require.Equal(t, "1", h.Get("Jetpool-Attempts"))
	require.Equal(t, "1", h.Get("Jetpool-Deliveries"))
	require.Equal(t, "sim", h.Get("Jetpool-Provider"))
	require.Equal(t, "0", h.Get("Jetpool-Replays"))
	_, err = time.Parse(time.RFC3339Nano, h.Get("Jetpool-Failed-At"))
	require.NoError(t, err)
	require.Contains(t, string(m.Data), `"record":{"id":"r2","text":"record 2"}`)
}

// The replay story: fix the cause, replay, every record ends ok, nothing twice.
func TestReplayFixedRecords(t *testing.T) {
	t.Parallel()
	b, job, f := setup(t, 10, "r3", "r7")
	close(f.fixed)
	ctx := context.Background()

	dry, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job.ID}, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, 2, dry.Matched)
	require.Zero(t, dry.Replayed)
	require.Len(t, mustList(t, b, deadletter.Filter{}), 2, "dry run changes nothing")

	res, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job.ID, Reason: "permanent"}})
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	require.Empty(t, mustList(t, b, deadletter.Filter{}))
	job, p := testenv.WaitFinished(t, b, job.ID, 30*time.Second)
	require.EqualValues(t, 10, p.OK)
	require.Zero(t, p.Failed)
	rs := testenv.Results(t, b, job)
	require.Equal(t, 1, rs["r3"].Replays)
	require.Equal(t, 2, f.Calls("r3"), "the failed call, then the replay")
}

func TestReplayFilters(t *testing.T) {
	t.Parallel()
	b, job, _ := setup(t, 6, "r1", "r2", "r3")
	ctx := context.Background()
	require.Len(t, mustList(t, b, deadletter.Filter{Class: "auth"}), 3)
	require.Empty(t, mustList(t, b, deadletter.Filter{Class: "server"}))
	require.Empty(t, mustList(t, b, deadletter.Filter{Reason: "exhausted"}))
	require.Empty(t, mustList(t, b, deadletter.Filter{Job: "other"}))
	require.Empty(t, mustList(t, b, deadletter.Filter{Action: "nope"}))
	require.Len(t, mustList(t, b, deadletter.Filter{Since: time.Hour}), 3)
	res, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job.ID, Limit: 2}})
	require.NoError(t, err)
	require.Equal(t, 2, res.Replayed)
	// Still broken: the two replayed records fail again, as replay generation 1.
	testenv.WaitFinished(t, b, job.ID, 30*time.Second)
	es := mustList(t, b, deadletter.Filter{})
	require.Len(t, es, 3)
	require.Equal(t, 0, es[0].Replays, "the one left alone")
	require.Equal(t, 1, es[1].Replays)
	require.Equal(t, 1, es[2].Replays)
	e, err := deadletter.Get(ctx, b, es[0].Seq)
	require.NoError(t, err)
	require.Equal(t, retry.ReasonPermanent, e.Reason)
	_, err = deadletter.Get(ctx, b, 9999)
	require.ErrorIs(t, err, deadletter.ErrNotFound)
	n, err := deadletter.Purge(ctx, b, deadletter.Filter{Job: job.ID})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Empty(t, mustList(t, b, deadletter.Filter{}))
}

// Crash after the republish, before the DLQ delete: the record is in both
// places; a second retry does not run it twice.
func TestReplayCrashAfterPublish(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, wfYAML)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	f := newFailing("r2")
	ctx := context.Background()
	// Work the job, then stop the pool so the replay's effects can be seen.
	pool := worker.New(b, worker.Config{Concurrency: 2, NewProvider: f.New, Log: testenv.Logger(t)})
	require.NoError(t, pool.Start(ctx))
	testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.NoError(t, pool.Stop(ctx))
	close(f.fixed)

	o := deadletter.ReplayOptions{Filter: deadletter.Filter{Job: res.Job.ID}}
	o.CrashAfterPublish()
	_, err := deadletter.Replay(ctx, b, o)
	require.ErrorIs(t, err, deadletter.ErrCrash)
	require.Len(t, mustList(t, b, deadletter.Filter{}), 1, "still in the DLQ")
	n, err := b.Count(ctx, broker.StreamWork, broker.WorkFilter(res.Job.ID))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "and back in the work stream")

	again, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: res.Job.ID}})
	require.NoError(t, err)
	require.Equal(t, 1, again.Replayed)
	n, err = b.Count(ctx, broker.StreamWork, broker.WorkFilter(res.Job.ID))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the second republish was deduplicated")

	testenv.Pool(t, b, worker.Config{Concurrency: 2, NewProvider: f.New})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 3, p.OK)
	require.Equal(t, 2, f.Calls("r2"), "failed once, replayed once: never twice")
	require.Len(t, testenv.Results(t, b, job), 3)
}

// A DLQ publish that fails is written again until it lands, the record
// held (and kept alive) meanwhile: never lost, never called again.
func TestDeadLetterPublishFailureLosesNothing(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: 2 * time.Second})
	ctx := context.Background()
	wf := testenv.Workflow(t, wfYAML)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 2), dispatcher.Options{})
	require.NoError(t, b.JS.DeleteStream(ctx, broker.StreamDLQ))
	f := newFailing("r1")
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 2, NewProvider: f.New})
	testenv.Eventually(t, 10*time.Second, func() bool { return pool.Snapshot().Held == 1 }, "r1 held: its dead letter cannot be written")
	require.Equal(t, "dead letter", pool.Faults()[0].Write)
	n, err := b.Count(ctx, broker.StreamWork, broker.WorkFilter(res.Job.ID))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "r1 is still in the work stream")
	require.NoError(t, b.Ensure(ctx)) // the DLQ comes back
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	require.EqualValues(t, 1, p.ByReason["permanent"])
	es := mustList(t, b, deadletter.Filter{Job: job.ID})
	require.Len(t, es, 1)
	require.Equal(t, "r1", es[0].Record)
	require.Equal(t, 1, f.Calls("r1"), "called once: the dead letter was written again, not the call")
}

// Two pools on one consumer, a record that kills whichever worker takes it:
// jetpool's own budget (retry.LostDeliveriesMax losses while it ran alone,
// after worker.AloneAfterLost made it a suspect, counted in the record's
// state, no server advisory) moves it to the DLQ exactly once.
func TestPoisonRecordCaughtOnce(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Second})
	wf := testenv.Workflow(t, wfYAML)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 5), dispatcher.Options{})
	b2 := testenv.Connect(t, b)
	die := func(_, _, record string) bool { return record == "r4" }
	testenv.Pool(t, b, worker.Config{Concurrency: 2, DieOn: die})
	testenv.Pool(t, b2, worker.Config{Concurrency: 2, DieOn: die})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 4, p.OK)
	require.EqualValues(t, 1, p.ByReason["max_deliveries"])
	es := mustList(t, b, deadletter.Filter{Job: job.ID})
	require.Len(t, es, 1, "exactly one dead letter")
	require.Equal(t, "r4", es[0].Record)
	require.Equal(t, retry.ReasonMaxDeliveries, es[0].Reason)
	// Its deliveries also count those parked while a lost one's claim
	// still stood (worker/lease.go).
	require.GreaterOrEqual(t, es[0].Deliveries, worker.AloneAfterLost+retry.LostDeliveriesMax+1, "caught on the delivery after its allowance")
	require.Contains(t, es[0].Error, "no word from any worker while it ran alone in its worker")
	n, err := b.Count(context.Background(), broker.StreamWork, broker.WorkFilter(job.ID))
	require.NoError(t, err)
	require.Zero(t, n, "removed from the work stream")
}

// A job dispatched by an older version has a consumer with MaxDeliver: the
// MAX_DELIVERIES advisory catcher still moves its poison records to the DLQ
// exactly once.
func TestCatcherForOlderJobs(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Second})
	wf := testenv.Workflow(t, wfYAML)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	_, err := b.EnsureConsumer(context.Background(), res.Job.ID, 2)
	require.NoError(t, err)
	testenv.Pool(t, b, worker.Config{Concurrency: 2, DieOn: func(_, _, record string) bool { return record == "r2" }})
	c := &deadletter.Catcher{B: b, Log: testenv.Logger(t)}
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(c.Stop)
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 2, p.OK)
	require.EqualValues(t, 1, p.ByReason["max_deliveries"])
	es := mustList(t, b, deadletter.Filter{Job: job.ID})
	require.Len(t, es, 1)
	require.Contains(t, es[0].Error, "no worker acked or nak'ed it")
}

func mustList(t *testing.T, b *broker.Broker, f deadletter.Filter) []*deadletter.Entry {
	t.Helper()
	es, err := deadletter.List(context.Background(), b, f)
	require.NoError(t, err)
	return es
}

// A worker may run a replayed record and store its new result (on the same
// subject as the old one) before the replay deletes the old one: the new
// one stays, and the job ends with every record accounted for. (The replay
// deleted whatever result the subject held then: the record was left with
// none, and its job never finished.)
func TestReplayKeepsResultStoredMeanwhile(t *testing.T) {
	t.Parallel()
	b, job, _ := setup(t, 3, "r2") // the pool runs on; r2 still fails
	ctx := context.Background()
	subj := broker.ResultSubject(job.ID, "act", string(retry.ReasonPermanent), "r2")
	o := deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job.ID}}
	o.AfterPublish(func(*deadletter.Entry) {
		testenv.Eventually(t, 20*time.Second, func() bool {
			m, err := b.LastMsg(ctx, broker.StreamResults, subj)
			var r broker.Result
			return err == nil && m != nil && json.Unmarshal(m.Data, &r) == nil && r.Replays == 1
		}, "the worker stored r2's new result before the replay went on")
	})
	res, err := deadletter.Replay(ctx, b, o)
	require.NoError(t, err)
	require.Equal(t, 1, res.Replayed)
	_, p := testenv.WaitFinished(t, b, job.ID, 30*time.Second)
	require.EqualValues(t, 2, p.OK)
	require.EqualValues(t, 1, p.Failed, "r2's new failed result is kept")
	es := mustList(t, b, deadletter.Filter{})
	require.Len(t, es, 1)
	require.Equal(t, 1, es[0].Replays, "the old dead letter went, the new one stays")
}
