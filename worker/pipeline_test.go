package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
)

func TestMain(m *testing.M) {
	testenv.ParallelWaits(8)
	goleak.VerifyTestMain(m)
}

const pipelineWorkflow = `
providers:
  sim: {kind: sim, sim: {reply: "{{.Prompt}}!"}}
defaults:
  provider: sim
actions:
  - name: upper
    prompt: "A({{ .text }})"
  - name: wrap
    prompt: "B({{ .upper }})"
`

// N records in, N results out, ids match, outputs of a two-action pipeline.
// A delivery, its conversation, its result and the result's buffer are
// used again for a later record once the completer is done with them
// (worker/delivery.go recycle, broker.ReleaseResult): under many slots and
// records each result is still its own record's, whole (its output, its
// line, both actions' accounts and their totals).
func TestPipelineEndToEnd(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, pipelineWorkflow)
	const n = 1000
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 64, NewProvider: counter.New})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	require.EqualValues(t, n, p.OK)
	require.Zero(t, p.Failed)
	results := testenv.Results(t, b, job)
	require.Len(t, results, n)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		r := results[id]
		require.NotNil(t, r, id)
		require.Equal(t, broker.StatusOK, r.Status)
		require.Equal(t, "wrap", r.Action)
		require.Equal(t, fmt.Sprintf("B(A(record %d)!)!", i), r.Output)
		require.Equal(t, fmt.Sprintf("A(record %d)!", i), r.Outputs["upper"], "later actions see earlier outputs")
		require.Equal(t, 1, r.Recovery.Attempts)
		require.Equal(t, 1, r.Recovery.Deliveries)
		require.Equal(t, 2, counter.Calls(id), "one call per action")
		require.Equal(t, i, r.Line, id)
		require.Len(t, r.Actions, 2, id)
		require.Equal(t, []string{"upper", "wrap"}, []string{r.Actions[0].Action, r.Actions[1].Action}, id)
		require.NotNil(t, r.Totals, id)
		require.Equal(t, 2, r.Totals.Calls, id)
		require.Positive(t, r.Actions[0].Usage.InputTokens, id)
		require.Equal(t, r.Actions[0].Usage.InputTokens+r.Actions[1].Usage.InputTokens, r.Totals.Usage.InputTokens, id)
		require.Equal(t, r.Totals.Usage, r.Usage, id)
	}
}

// Dispatching the same file twice runs each record once.
func TestDispatchTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, pipelineWorkflow)
	in := testenv.Records(t, 40)
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 8, NewProvider: counter.New})
	testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	again := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	require.True(t, again.Existing, "the same job, dispatched already: nothing published")
	// Force a full re-dispatch of the same job, as if it had never been
	// marked dispatched: the first one's records carry no Nats-Msg-Id (a
	// new job's pass leases it: dispatcher/checking.go), so they are
	// published again, without the first-run mark, and workers find that
	// every record succeeded already.
	_, err := b.UpdateJobSpec(context.Background(), res.Job.ID, func(j *broker.Job) bool { j.Dispatched, j.Total = false, 0; return true })
	require.NoError(t, err)
	again = testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	require.EqualValues(t, 40, again.Published)
	testenv.Eventually(t, 30*time.Second, func() bool {
		n, err := b.Count(context.Background(), broker.StreamWork, broker.WorkFilter(res.Job.ID))
		return err == nil && n == 0
	}, "the records dispatched again are settled")
	testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.Equal(t, 80, counter.Total(), "40 records × 2 actions, each called once")
}

// A redelivered record that already has its result is not paid for again.
func TestRedeliveryAfterResultDoesNotPayTwice(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Second})
	wf := testenv.Workflow(t, pipelineWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 5), dispatcher.Options{})
	// The first delivery of r1's "upper" writes its result and dies before
	// acking: the redelivery must find the result and go on to "wrap".
	var died atomic.Bool
	die := func(job, action, record string) bool {
		if action != "upper" || record != "r1" || !died.CompareAndSwap(false, true) {
			return false
		}
		require.NoError(t, b.WriteResult(context.Background(), &broker.Result{ID: "r1", Status: broker.StatusOK, Output: "A(record 1)!",
			Action: "upper", Job: job}))
		return true
	}
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New, DieOn: die})
	job, _ := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.True(t, died.Load())
	require.Equal(t, 1, counter.Calls("r1"), "only action wrap was called for r1")
	require.Equal(t, "B(A(record 1)!)!", testenv.Results(t, b, job)["r1"].Output)
}

// Only a job's first dispatch lets first deliveries skip the result lookup.
// Results left from an earlier life of the job id (its entry removed by
// hand) or from a crashed dispatch make every delivery look first.
func TestFirstDeliveryLooksUpWhenResultsMayExist(t *testing.T) {
	t.Parallel()
	for _, crashed := range []bool{false, true} {
		b := testenv.Broker(t)
		wf := testenv.Workflow(t, pipelineWorkflow)
		in := testenv.Records(t, 5)
		jobID, _, _, err := dispatcher.Check(wf, dispatcher.Options{Input: in, IDField: "id"})
		require.NoError(t, err)
		if crashed { // the entry of a dispatch that died before publishing
			require.NoError(t, b.PutJob(context.Background(), &broker.Job{ID: jobID, Status: broker.JobDispatching}))
		}
		require.NoError(t, b.WriteResult(context.Background(), &broker.Result{ID: "r1", Status: broker.StatusOK, Output: "A(record 1)!",
			Action: "upper", Job: jobID}))
		res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
		counter := testenv.NewCounter()
		testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New})
		job, _ := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
		require.Equal(t, 1, counter.Calls("r1"), "crashed=%v: only action wrap was called for r1", crashed)
		require.Equal(t, 2, counter.Calls("r2"))
		require.Equal(t, "B(A(record 1)!)!", testenv.Results(t, b, job)["r1"].Output)
	}
}

// A worker killed mid-call (its connection gone, no ack) → the record is
// redelivered to another worker and finishes once.
func TestWorkerKilledMidCall(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: 2 * time.Second})
	wf := testenv.Workflow(t, pipelineWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 10), dispatcher.Options{})

	// Process A: its calls hang until the test ends.
	conA := testenv.Connect(t, b)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	started := make(chan struct{}, 100)
	hang := testenv.NewCounter()
	hang.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		started <- struct{}{}
		<-release
		return next()
	}
	poolA := worker.New(conA, worker.Config{Concurrency: 3, NewProvider: hang.New, Log: testenv.Logger(t)})
	require.NoError(t, poolA.Start(context.Background()))
	for range 3 {
		<-started
	}
	// Kill A: the connection goes, no ack, no nak.
	conA.NC.Close()

	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 8, NewProvider: counter.New})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 10, p.OK)
	results := testenv.Results(t, b, job)
	require.Len(t, results, 10)
	require.Equal(t, 3, hang.Total(), "A took three records and died with them")
	for id, r := range results {
		require.Equal(t, 2, counter.Calls(id), "%s: B ran both actions, A's three records after their AckWait", id)
		require.Equal(t, 1, r.Recovery.Deliveries, "%s: a delivery lost with a process is not the record's retry", id)
	}
	once.Do(func() { close(release) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = poolA.Stop(ctx)
}

// A graceful stop hands in-flight records back at once (no AckWait wait).
func TestStopHandsBackInFlight(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Minute})
	wf := testenv.Workflow(t, pipelineWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 6), dispatcher.Options{})
	conA := testenv.Connect(t, b)
	blocker := &gated{started: make(chan string, 100)} // calls block until their context ends
	poolA := worker.New(conA, worker.Config{Concurrency: 2, Log: testenv.Logger(t), NewProvider: blocker.New})
	require.NoError(t, poolA.Start(context.Background()))
	<-blocker.started
	<-blocker.started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	require.Error(t, poolA.Stop(ctx), "the deadline passes with calls in flight: they are handed back")

	start := time.Now()
	testenv.Pool(t, b, worker.Config{Concurrency: 8})
	_, p := testenv.WaitFinished(t, b, res.Job.ID, 20*time.Second)
	require.EqualValues(t, 6, p.OK)
	require.Less(t, time.Since(start), 30*time.Second, "nothing waited for the 1m AckWait")
}

// gated is a provider whose calls, once started is told, wait until open
// is closed (never, when nil) or their context ends, then go to next's
// provider (provider.New when nil).
type gated struct {
	open    chan struct{}
	started chan string
	next    func(provider.Config) (provider.Provider, error)
}

func (g *gated) New(cfg provider.Config) (provider.Provider, error) {
	next := g.next
	if next == nil {
		next = provider.New
	}
	p, err := next(cfg)
	if err != nil {
		return nil, err
	}
	return &gatedProvider{Provider: p, g: g}, nil
}

type gatedProvider struct {
	provider.Provider
	g *gated
}

func (p *gatedProvider) Call(ctx context.Context, req provider.Request) (provider.Response, error) {
	p.g.started <- req.RecordID
	select {
	case <-p.g.open:
	case <-ctx.Done():
		return provider.Response{}, ctx.Err()
	}
	return p.Provider.Call(ctx, req)
}

// A result that cannot be stored is held, and written again until it
// lands: the work message stays (kept alive) meanwhile, and the model is
// never called again for it; the pool pulls nothing more while it holds
// answers it cannot store.
func TestResultStoreFailureLosesNothing(t *testing.T) {
	t.Parallel()
	const n, ackWait = 20, 2 * time.Second
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{AckWait: ackWait})
	wf := testenv.Workflow(t, pipelineWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	require.NoError(t, b.JS.DeleteStream(ctx, broker.StreamResults))
	counter := testenv.NewCounter()
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 2, NewProvider: counter.New})
	testenv.Eventually(t, 20*time.Second, func() bool { return len(pool.Faults()) > 0 && pool.Snapshot().Held > 0 }, "answers held, the fault reported")
	// Three AckWaits pass with the store down: the held records are kept
	// alive, not redelivered, and hardly anything more is pulled: at most
	// what the slots and the completer's room (Concurrency each) hold.
	since := pool.Faults()[0].Since
	testenv.Eventually(t, 20*time.Second, func() bool { return time.Since(since) > 3*ackWait }, "three AckWaits of the fault")
	paid := counter.Total()
	require.LessOrEqual(t, paid, 4, "pulling paused")
	cons, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(res.Job.ID))
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumRedelivered, "no held record ran out its AckWait")
	require.NoError(t, b.Ensure(ctx)) // the results stream comes back
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	require.EqualValues(t, n, p.OK)
	require.Len(t, testenv.Results(t, b, job), n)
	for i := 1; i <= n; i++ {
		require.Equal(t, 2, counter.Calls(fmt.Sprintf("r%d", i)), "r%d: each action called once", i)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return len(pool.Faults()) == 0 }, "the fault ends")
}

// JobDone ends the pull that waits on a finished job at once (IdlePoll:
// 1h here), so the pool stops without waiting for it; `jetpool run` calls it
// once its job is done.
func TestJobDoneEndsIdlePull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	res := testenv.Dispatch(t, b, testenv.Workflow(t, pipelineWorkflow), testenv.Records(t, 2), dispatcher.Options{})
	pool := worker.New(testenv.Connect(t, b), worker.Config{Concurrency: 4, Log: testenv.Logger(t), IdlePoll: time.Hour, Jobs: []string{res.Job.ID}})
	require.NoError(t, pool.Start(ctx))
	testenv.WaitFinished(t, b, res.Job.ID, 20*time.Second)
	waitIdlePull(t, b, res.Job.ID)

	stopped := make(chan error, 1)
	go func() {
		pool.JobDone(res.Job.ID)
		stopped <- pool.Stop(ctx)
	}()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for the idle pull of a job said done (IdlePoll: 1h)")
	}
}

// Stop lets a pull on an idle job expire rather than end it: a record
// stored after the stop is still there for the next pull, not delivered to
// a pull that is gone (where it would wait out its AckWait).
func TestStopLetsIdlePullExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Minute})
	res := testenv.Dispatch(t, b, testenv.Workflow(t, pipelineWorkflow), testenv.Records(t, 2), dispatcher.Options{})
	pool := worker.New(testenv.Connect(t, b), worker.Config{Concurrency: 4, Log: testenv.Logger(t), IdlePoll: 300 * time.Millisecond, Jobs: []string{res.Job.ID}})
	require.NoError(t, pool.Start(ctx))
	testenv.WaitFinished(t, b, res.Job.ID, 20*time.Second)
	cons := waitIdlePull(t, b, res.Job.ID)
	require.NoError(t, pool.Stop(ctx))

	_, err := b.JS.Publish(ctx, broker.WorkSubject(res.Job.ID, "upper"), []byte("after the stop"))
	require.NoError(t, err)
	batch, err := cons.FetchNoWait(1)
	require.NoError(t, err)
	var got []string
	for m := range batch.Messages() {
		got = append(got, string(m.Data()))
		require.NoError(t, m.Term())
	}
	require.NoError(t, batch.Error())
	require.Equal(t, []string{"after the stop"}, got, "the message went to the next pull, not the stopped pool's")
}

// waitIdlePull waits until a pool long-polls job's consumer.
func waitIdlePull(t *testing.T, b *broker.Broker, job string) jetstream.Consumer {
	t.Helper()
	cons, err := b.JS.Consumer(context.Background(), broker.StreamWork, broker.ConsumerName(job))
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, func() bool {
		info, err := cons.Info(context.Background())
		return err == nil && info.NumWaiting == 1
	}, "the pool long-polls the finished job")
	return cons
}

// A pool pulls on a connection of its own, closed by Stop (none is left
// behind), and gone with the pool's main connection (TestWorkerKilledMidCall).
func TestPoolPullsConnection(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	before := b.Server().NumClients()
	pool := worker.New(b, worker.Config{Concurrency: 2, Log: testenv.Logger(t)})
	require.NoError(t, pool.Start(context.Background()))
	testenv.Eventually(t, 10*time.Second, func() bool { return b.Server().NumClients() == before+1 }, "one more connection, for pulls")
	connz, err := b.Server().Connz(&server.ConnzOptions{})
	require.NoError(t, err)
	var names []string
	for _, c := range connz.Conns {
		names = append(names, c.Name)
	}
	require.Contains(t, names, "jetpool pulls", "named for operators")
	require.NoError(t, pool.Stop(context.Background()))
	testenv.Eventually(t, 10*time.Second, func() bool { return b.Server().NumClients() == before }, "Stop closes it")
}

// A record whose next action's message can never be published (with its
// answer it is over the server's max payload) is dead-lettered as too_large
// — not handed back to be paid for again — and holds nothing up: with
// concurrency 1 the records after it still run through both actions.
func TestForwardTooLargeDeadLetters(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {reply: "{{.Prompt}}"}}
defaults:
  provider: sim
actions:
  - name: echo
    prompt: "{{ .text }}"
  - name: short
    prompt: "short"
`)
	big := strings.Repeat("x", 4<<20+512<<10) // the record and its echo: 9 MiB, over 8
	input := testenv.WriteFile(t, "records.jsonl",
		fmt.Sprintf("{\"id\":\"big\",\"text\":%q}\n{\"id\":\"r1\",\"text\":\"a\"}\n{\"id\":\"r2\",\"text\":\"b\"}\n", big))
	res := testenv.Dispatch(t, b, wf, input, dispatcher.Options{})
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 1, NewProvider: counter.New})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 2, p.OK)
	require.Equal(t, map[string]int64{"too_large": 1}, p.ByReason)
	require.Equal(t, 1, counter.Calls("big"), "paid once: never handed back to be paid again")
	require.Equal(t, 2, counter.Calls("r1"))
	require.Equal(t, 2, counter.Calls("r2"))
	dl, err := deadletter.List(context.Background(), b, deadletter.Filter{Job: job.ID})
	require.NoError(t, err)
	require.Len(t, dl, 1)
	require.Regexp(t, `the record with the outputs of its actions so far is a \d+-byte work message for action short, more than the NATS server's max_payload of 8388608 bytes \(raise max_payload`, dl[0].Error)
}

// A worker killed after a record's outcome was stored (its dead letter and
// failed result, or its ok result) but before its ack: the redelivery finds
// the stored outcome and settles it, so the record is called once, has one
// final result and one dead letter.
func TestKilledBetweenStoreAndAck(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Second})
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {fail_first: 100, fail_class: auth}}
actions:
  - name: act
    provider: sim
    prompt: "{{ .text }}"
`)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	counter := testenv.NewCounter()
	died := make(chan string, 8)
	a := worker.New(testenv.Connect(t, b), worker.Config{Concurrency: 4, Log: testenv.Logger(t), NewProvider: counter.New,
		DieAfterWrites: func(_, _, record string) bool { died <- record; return true }})
	require.NoError(t, a.Start(context.Background()))
	for range 3 {
		select {
		case <-died:
		case <-time.After(20 * time.Second):
			t.Fatal("the records' outcomes were not stored")
		}
	}
	require.NoError(t, a.Stop(context.Background()))
	// Another worker gets the three records after their AckWait.
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 3, p.Failed)
	require.Len(t, testenv.Results(t, b, job), 3, "one final result a record")
	for i := 1; i <= 3; i++ {
		require.Equal(t, 1, counter.Calls(fmt.Sprintf("r%d", i)), "r%d: called once, settled by the redelivery", i)
	}
	dl, err := deadletter.List(context.Background(), b, deadletter.Filter{Job: job.ID})
	require.NoError(t, err)
	require.Len(t, dl, 3, "one dead letter a record (the redelivery wrote none)")
}

// A record whose lookup an outage held is not called the moment the store
// answers "nothing stored": the outage may have made JetStream deliver it
// twice, and its twin may be about to call. It is parked for a few seconds,
// spending nothing of its budget, and its next delivery looks again and
// calls: each record is called once, after one more delivery.
func TestHeldLookupWaitsForATwin(t *testing.T) {
	t.Parallel()
	const n = 4
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{AckWait: time.Second})
	wf := testenv.Workflow(t, oneSimAction)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	var mu sync.Mutex
	died := map[string]bool{}
	counter := testenv.NewCounter()
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New,
		DieOn: func(_, _, record string) bool { // each record's first delivery is lost with its worker
			mu.Lock()
			defer mu.Unlock()
			first := !died[record]
			died[record] = true
			return first
		}})
	testenv.Eventually(t, 10*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(died) == n }, "every first delivery lost")
	require.NoError(t, b.JS.DeleteStream(ctx, broker.StreamResults)) // the redeliveries' lookups are held
	testenv.Eventually(t, 30*time.Second, func() bool { return len(pool.Faults()) > 0 }, "lookups held")
	require.NoError(t, b.Ensure(ctx))
	requireEachOKOnce(t, b, res.Job.ID, counter, n, 60*time.Second)
	require.GreaterOrEqual(t, pool.Snapshot().Handled, int64(3*n), "lost, parked after the held lookup, then called")
}

// oneSimAction is a workflow of one action on a 1 ms sim.
const oneSimAction = `
providers:
  sim: {kind: sim, sim: {latency: 1ms}}
defaults: {provider: sim, model: sim-1}
actions:
  - {name: a, prompt: "{{ .text }}"}
`

// requireEachOKOnce waits for job's n records r1…rn to finish, and
// requires each ok, with one result, called once.
func requireEachOKOnce(t *testing.T, b *broker.Broker, job string, counter *testenv.Counter, n int, timeout time.Duration) {
	t.Helper()
	j, p := testenv.WaitFinished(t, b, job, timeout)
	require.EqualValues(t, n, p.OK)
	require.Len(t, testenv.Results(t, b, j), n)
	for i := 1; i <= n; i++ {
		require.Equal(t, 1, counter.Calls(fmt.Sprintf("r%d", i)), "r%d called once", i)
	}
}

// A leader election of the work stream or of a job's consumer that has
// delivered records may deliver one of them again, as new, while its twin
// is being called (docs/durability.md, Twin deliveries): for a moment after
// one, a record without a result waits for a possible twin before it calls.
// A consumer's first election — it was just made and delivered nothing —
// is not one.
func TestElectionMakesRecordsWaitForATwin(t *testing.T) {
	t.Parallel()
	const n = 3
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, oneSimAction)
	counter := testenv.NewCounter()
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New})
	// The job's consumer, made before its dispatch (which then does not
	// mark its records as first runs: they look for a result, as on a
	// cluster, where every record does).
	_, err := b.EnsureConsumer(ctx, "elect", 3)
	require.NoError(t, err)
	// Its election, having delivered nothing; then one of a consumer the
	// server does not know (its info unanswered: counted, to be safe): in
	// order, on one subscription.
	for _, c := range []string{broker.ConsumerName("elect"), "jetpool-gone"} {
		require.NoError(t, b.NC.Publish(broker.ElectionSubjects[0][:len(broker.ElectionSubjects[0])-1]+c, []byte(`{}`)))
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return pool.Snapshot().Elections >= 1 }, "the election heard")
	require.EqualValues(t, 1, pool.Snapshot().Elections, "a fresh consumer's election is not a risk")

	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{JobID: "elect"})
	requireEachOKOnce(t, b, res.Job.ID, counter, n, 30*time.Second)
	require.GreaterOrEqual(t, pool.Snapshot().Handled, int64(2*n), "each record parked once for a possible twin, then called")
	require.EqualValues(t, 1, pool.Snapshot().Elections)
}
