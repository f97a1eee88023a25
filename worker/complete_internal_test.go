package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// The completer's rules, table-tested without NATS (river's executor tests
// with an inline completer are the model): a fake store that fails writes
// on a script, fake messages, and one log of everything both were asked to
// do, in order.

// journal is the ordered log of a test's writes and acks.
type journal struct {
	mu  sync.Mutex
	ops []string
}

func (j *journal) add(op string) {
	j.mu.Lock()
	j.ops = append(j.ops, op)
	j.mu.Unlock()
}

func (j *journal) list() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.ops...)
}

// fakeMsg is a work message that records its acks and naks.
type fakeMsg struct {
	jetstream.Msg
	id   string
	data []byte
	j    *journal
}

func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Subject() string      { return "jetpool.work.job.act" }
func (m *fakeMsg) Headers() nats.Header { return nats.Header{} }
func (m *fakeMsg) note(op string) error {
	if m.j != nil {
		m.j.add(op)
	}
	return nil
}
func (m *fakeMsg) Ack() error                         { return m.note("ack") }
func (m *fakeMsg) Nak() error                         { return m.note("nak") }
func (m *fakeMsg) NakWithDelay(d time.Duration) error { return m.note("nak " + d.String()) }
func (m *fakeMsg) InProgress() error                  { return m.note("beat") }
func (m *fakeMsg) Term() error                        { return m.note("term") }

// fakeStore fails each kind of write as scripted: fail[what] is how many
// times it fails before it lands (-1: for ever), with err (a transient
// error by default).
type fakeStore struct {
	j    *journal
	mu   sync.Mutex
	fail map[string]int
	err  map[string]error
	// results counts the result writes of each record, when not nil.
	results map[string]int
}

func (s *fakeStore) countResult(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.results != nil {
		s.results[id]++
	}
}

func (s *fakeStore) resultsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.results[id]
}

func (s *fakeStore) setFail(what string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail[what] = n
}

var errStoreDown = errors.New("nats: no response from stream")

func (s *fakeStore) try(what string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.fail[what]; n != 0 {
		if n > 0 {
			s.fail[what] = n - 1
		}
		err := s.err[what]
		if err == nil {
			err = errStoreDown
		}
		s.j.add(what + " refused")
		return err
	}
	s.j.add(what)
	return nil
}

type doneFuture struct{ err error }

func (f doneFuture) wait(context.Context) error { return f.err }
func (f doneFuture) release()                   {}

func (s *fakeStore) publishResult(r *broker.Result) (future, error) {
	s.countResult(r.ID)
	return doneFuture{s.try("result:" + r.Status)}, nil
}
func (s *fakeStore) forward(d *delivery, output any) (future, error) {
	return doneFuture{s.try("forward")}, nil
}
func (s *fakeStore) deadLetter(_ context.Context, e *deadletter.Entry) error {
	return s.try("dead letter " + string(e.Reason))
}
func (s *fakeStore) writeResult(_ context.Context, r *broker.Result) error {
	s.countResult(r.ID)
	return s.try("result:" + r.Status)
}
func (s *fakeStore) saveState(_ context.Context, _ *delivery, st *broker.RecordState) error {
	if st.Answer != nil {
		return s.try("state with answer")
	}
	return s.try("state")
}
func (s *fakeStore) clearState(context.Context, *delivery) error { return s.try("clear state") }
func (s *fakeStore) unclaim(context.Context, *delivery) error    { return s.try("unclaim") }
func (s *fakeStore) deleteResult(_ context.Context, seq uint64) error {
	return s.try(fmt.Sprintf("delete result %d", seq))
}
func (s *fakeStore) failJob(context.Context, *delivery, string) error { return s.try("fail job") }
func (s *fakeStore) ack(msg jetstream.Msg)                            { _ = msg.Ack() }

type fakeOwner struct{ handed, finished chan struct{} }

func newOwner() *fakeOwner {
	return &fakeOwner{handed: make(chan struct{}, 8), finished: make(chan struct{}, 8)}
}

type owned struct{ o *fakeOwner }

func (w owned) handed()   { w.o.handed <- struct{}{} }
func (w owned) finished() { w.o.finished <- struct{}{} }

func testDelivery(j *journal, next string) *delivery {
	a := &workflow.Action{Name: "act", Provider: "p", Retry: retry.Policy{Enabled: true}.WithDefaults()}
	return &delivery{msg: &fakeMsg{id: "r1", data: []byte(`{"id":"r1","record":{}}`), j: j}, job: "job", action: a,
		env: &broker.Envelope{ID: "r1"}, n: 1, next: next}
}

func okOutcome() outcome {
	return outcome{kind: outcomeDone, result: &broker.Result{ID: "r1", Status: broker.StatusOK, Output: "answer", Action: "act", Job: "job"}}
}

func deadOutcome(d *delivery, raise bool) outcome {
	o := deadLetterOutcome(decision{d: d, now: time.Now()}, &retry.Error{Class: retry.ClassAuth, Message: "invalid api key"},
		retry.ReasonPermanent, "failed permanently: AuthError: invalid api key", nil, nil)
	if raise {
		o.raise = "failed permanently"
	}
	return o
}

func tooLarge() error { return fmt.Errorf("publish: %w", nats.ErrMaxPayload) }

func TestCompleter(t *testing.T) {
	for _, tc := range []struct {
		name    string
		next    string
		fail    map[string]int
		err     map[string]error
		outcome func(d *delivery) outcome
		// want is the journal once the record is settled, beats left out.
		want []string
		held bool // the record was held after a failed write
	}{
		{name: "a success is stored, forwarded, acked", next: "second", outcome: func(*delivery) outcome { return okOutcome() },
			want: []string{"result:ok", "forward", "ack"}},
		{name: "a result the store refuses is written again until it lands, then acked; nothing is called again",
			fail: map[string]int{"result:ok": 3}, outcome: func(*delivery) outcome { return okOutcome() }, held: true,
			want: []string{"result:ok refused", "result:ok refused", "result:ok refused", "result:ok", "ack"}},
		{name: "a next action's message the store refuses is written again, with the result",
			next: "second", fail: map[string]int{"forward": 1}, outcome: func(*delivery) outcome { return okOutcome() }, held: true,
			want: []string{"result:ok", "forward refused", "result:ok", "forward", "ack"}},
		{name: "an answer over max_payload can never be stored: dead-lettered too_large",
			fail: map[string]int{"result:ok": 1}, err: map[string]error{"result:ok": tooLarge()},
			outcome: func(*delivery) outcome { return okOutcome() }, held: true,
			want: []string{"result:ok refused", "dead letter too_large", "result:failed", "ack"}},
		{name: "a retry saves the state, then naks with its delay",
			outcome: func(d *delivery) outcome {
				return outcome{kind: outcomeRetry, state: d.nextState(nil), delay: 3 * time.Second}
			},
			want: []string{"state", "nak 3s"}},
		{name: "a state the store refuses holds the record; the nak comes after it lands",
			fail: map[string]int{"state": 2},
			outcome: func(d *delivery) outcome {
				return outcome{kind: outcomePark, state: d.nextState(nil), delay: time.Minute}
			},
			held: true, want: []string{"state refused", "state refused", "state", "nak 1m0s"}},
		{name: "a dead letter goes before its failed result, both before the ack",
			fail:    map[string]int{"dead letter permanent": 2},
			outcome: func(d *delivery) outcome { return deadOutcome(d, false) }, held: true,
			want: []string{"dead letter permanent refused", "dead letter permanent refused", "dead letter permanent", "result:failed", "ack"}},
		{name: "raise fails the job after the ack",
			outcome: func(d *delivery) outcome { return deadOutcome(d, true) },
			want:    []string{"dead letter permanent", "result:failed", "ack", "fail job"}},
		{name: "a settled success is forwarded again and acked", next: "second",
			outcome: func(*delivery) outcome { r := okOutcome(); r.kind = outcomeSettled; return r },
			want:    []string{"forward", "ack"}},
		{name: "abandoned: nothing at all", outcome: func(*delivery) outcome { return outcome{kind: outcomeAbandon} }, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			st := &fakeStore{j: j, fail: tc.fail, err: tc.err}
			if st.fail == nil {
				st.fail = map[string]int{}
			}
			c, b, ctx := running(t, st, 0)
			d := testDelivery(j, tc.next)
			b.hold(d.msg, time.Hour, time.Now())
			own := newOwner()
			released := false
			handed := c.complete(ctx, d, tc.outcome(d), func() { released = true }, owned{own})
			if handed {
				require.True(t, released, "a record handed over gives its slot on")
				select {
				case <-own.finished:
				case <-time.After(10 * time.Second):
					t.Fatalf("not settled: %v", j.list())
				}
			}
			require.Equal(t, tc.want, j.list())
			require.Equal(t, tc.held, containsFailed(j.list()))
			require.Zero(t, b.count(), "no longer kept alive once settled")
			require.Empty(t, c.faults.list(), "the fault ended when the write landed")
			// The ack or nak comes once, after every write of the outcome;
			// only what may fail without harm comes after it.
			ops := j.list()
			for i, op := range ops {
				if op == "ack" || strings.HasPrefix(op, "nak") {
					for _, after := range ops[i+1:] {
						require.Contains(t, []string{"fail job", "clear state"}, after, "after the ack: %v", ops)
					}
					break
				}
			}
		})
	}
}

func containsFailed(ops []string) bool {
	for _, op := range ops {
		if strings.HasSuffix(op, " refused") {
			return true
		}
	}
	return false
}

// A pool that must stop with an answer it could not store parks it in the
// record's state for the next delivery and hands the record back; when even
// that fails, the record is left to be redelivered (and said, by record).
func TestCompleterParksAnswersAtStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail map[string]int
		want []string
	}{
		{"parked", map[string]int{"result:ok": -1}, []string{"state with answer", "nak"}},
		{"nothing to park it in", map[string]int{"result:ok": -1, "state with answer": -1}, []string{"state with answer refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			st := &fakeStore{j: j, fail: tc.fail}
			b := newBeats(time.Hour)
			c := newCompleter(st, b, zerolog.Nop(), nopMetrics{}, 4)
			ctx, cancel := context.WithCancel(context.Background())
			quit := make(chan struct{})
			defer close(quit)
			go c.commitLoop(quit)
			done := make(chan struct{})
			go func() { c.heldLoop(ctx); close(done) }()
			d := testDelivery(j, "")
			b.hold(d.msg, time.Hour, time.Now())
			own := newOwner()
			require.True(t, c.complete(ctx, d, okOutcome(), func() {}, owned{own}))
			require.Eventually(t, func() bool { return c.heldCount() == 1 }, 10*time.Second, 10*time.Millisecond)
			cancel() // the drain deadline passed
			<-done
			<-own.finished
			var got []string
			for _, op := range j.list() {
				if op != "result:ok refused" {
					got = append(got, op)
				}
			}
			require.Equal(t, tc.want, got)
			require.Zero(t, b.count())
		})
	}
}

// A pass over the held records tries a stream that is failing once: the
// other records bound for it wait for the next pass, instead of costing a
// write timeout apiece, and a record bound for another stream lands.
func TestHeldPassTriesAFailingStreamOnce(t *testing.T) {
	j := &journal{}
	st := &fakeStore{j: j, fail: map[string]int{"result:ok": -1, "state": 1}, results: map[string]int{}}
	b := newBeats(time.Hour)
	c := newCompleter(st, b, zerolog.Nop(), nopMetrics{}, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quit := make(chan struct{})
	defer close(quit)
	go c.commitLoop(quit)

	var owners []*fakeOwner
	settle := func(id string, o func(d *delivery) outcome) {
		d := testDelivery(j, "")
		d.env.ID = id
		b.hold(d.msg, time.Hour, time.Now())
		own := newOwner()
		out := o(d)
		if out.result != nil {
			out.result.ID = id
		}
		require.True(t, c.complete(ctx, d, out, func() {}, owned{own}), "%s is held", id)
		<-own.handed
		owners = append(owners, own)
	}
	for _, id := range []string{"r0", "r1", "r2"} {
		settle(id, func(*delivery) outcome { return okOutcome() })
	}
	settle("r3", func(d *delivery) outcome {
		return outcome{kind: outcomeRetry, state: d.nextState(nil), delay: time.Second}
	})
	require.Eventually(t, func() bool { return c.heldCount() == 4 }, 10*time.Second, 5*time.Millisecond, "all four held")

	go c.heldLoop(ctx)
	select { // the state lands while the results stream still fails
	case <-owners[3].finished:
	case <-time.After(10 * time.Second):
		t.Fatalf("the record bound for the attempts bucket did not land: %v", j.list())
	}
	require.Eventually(t, func() bool { return st.resultsOf("r0") >= 3 }, 10*time.Second, 5*time.Millisecond, "r0's write tried pass after pass")
	require.Equal(t, 1, st.resultsOf("r1"), "not tried while the stream fails")
	require.Equal(t, 1, st.resultsOf("r2"), "not tried while the stream fails")

	st.setFail("result:ok", 0)
	for _, own := range owners[:3] {
		select {
		case <-own.finished:
		case <-time.After(10 * time.Second):
			t.Fatalf("not settled once the stream is back: %v", j.list())
		}
	}
	require.Equal(t, 2, st.resultsOf("r1"))
	require.Equal(t, 2, st.resultsOf("r2"))
}

// A paid answer held unstored for longer than parkAfter is parked in its
// record's state too, once, while its result write goes on being tried: a
// redelivery meanwhile stores it from there instead of calling again. When
// the write lands the record is acked and the parked state cleared. A park
// that fails is tried again in a later pass, and costs the pass no more.
func TestCompleterParksLongHeldAnswers(t *testing.T) {
	j := &journal{}
	st := &fakeStore{j: j, fail: map[string]int{"result:ok": -1, "state with answer": 1}}
	c, b, ctx := running(t, st, time.Nanosecond)
	d := testDelivery(j, "")
	b.hold(d.msg, time.Hour, time.Now())
	own := newOwner()
	require.True(t, c.complete(ctx, d, okOutcome(), func() {}, owned{own}))
	<-own.handed
	parked := func() bool { return slices.Contains(j.list(), "state with answer") }
	require.Eventually(t, parked, 10*time.Second, 5*time.Millisecond, "parked while held: %v", j.list())
	st.setFail("result:ok", 0)
	select {
	case <-own.finished:
	case <-time.After(10 * time.Second):
		t.Fatalf("not settled once the stream is back: %v", j.list())
	}
	var got []string
	for _, op := range j.list() {
		if op != "result:ok refused" {
			got = append(got, op)
		}
	}
	require.Equal(t, []string{"state with answer refused", "state with answer", "result:ok", "ack", "clear state"}, got)
}

// running is a completer over st with its commit and held loops running
// until the test ends.
func running(t *testing.T, st *fakeStore, parkAfter time.Duration) (*completer, *beats, context.Context) {
	b := newBeats(time.Hour)
	c := newCompleter(st, b, zerolog.Nop(), nopMetrics{}, 4)
	c.parkAfter = parkAfter
	ctx, cancel := context.WithCancel(context.Background())
	quit := make(chan struct{})
	t.Cleanup(func() { cancel(); close(quit) })
	go c.commitLoop(quit)
	go c.heldLoop(ctx)
	return c, b, ctx
}
