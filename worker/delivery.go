package worker

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jetpool/jetpool/internal/jspull"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// delivery is one work message being handled.
type delivery struct {
	// mark is set when the delivery is recycled, in the jetpool_poison
	// build only (empty elsewhere; first, so that it adds no padding).
	mark    recycledMark
	msg     jetstream.Msg
	job     string
	action  *workflow.Action
	index   int
	env     *broker.Envelope
	replays int
	n       int // JetStream's delivery count: every delivery, whatever ended it
	mode    string
	// firstRun: the publisher knew no result of this action could exist
	// for the record yet (broker.HeaderFirstRun), the job's consumer is
	// not replicated (jobRunner.replicated), and the work stream does not
	// keep acked records (jobRunner.keepsAcked: there, an ack the killed
	// embedded server had not written yet makes a stored record come back
	// as a first delivery; TestChaosRunKilledWhereEveryWriteIsSynced).
	firstRun bool
	// nonce is the dispatch's (broker.HeaderNonce), "" on other messages.
	nonce string
	// state is what earlier deliveries passed on (broker.RecordState);
	// nil when there were none, or none needed one.
	state *broker.RecordState
	// stale is the sequence of a failed result of an earlier replay
	// generation, which this delivery's result replaces.
	stale uint64
	// lease is this delivery's claim of the call (broker.Claim; worker/
	// handle.go twin), kept alive while the call runs (worker/lease.go).
	lease lease
	// seq is the work message's stream sequence: a second delivery of it
	// to this pool while the first is handled waits for the first
	// (jobRunner.hold); heldIn is where it is held.
	seq    uint64
	heldIn *heldSet
	// stateRev is the revision of the record's state entry as it was read
	// (lookUp) or last written by this delivery (saved), 0 when none was
	// read or there is none: the completer's write of the next state is
	// made on it (worker/statemerge.go).
	stateRev uint64
	saved    *broker.RecordState
	// next is the action after this one ("" for the last).
	next string
	// run is the delivery's session once it ran (or stands for the paid run
	// of a stored success): its cost goes on with the record (worker/cost.go).
	run *sessionEnd
	// revision is the revision of the job's workflow the record runs
	// under (broker.HeaderRevision); started, when its handling began.
	revision int
	started  time.Time
	// account is this action's entry of the record's accounting, once
	// its result is known: forwarded with the record (store.go).
	account *broker.Account
	// settle is the completer's hold on the delivery's outcome
	// (completer.complete), allocated with it.
	settle settling
	// conv is the delivery's conversation with the model (jobRunner.
	// converse), allocated with it too.
	conv conversationBlock
	// ok is its result when it succeeds (okResult), with its accounting.
	ok okBlock
	// reusable: once the completer is done with the delivery nothing else
	// holds it, and it goes back to deliveries (recycle).
	reusable bool
	// slot is the handler's hold on the delivery's call slot, the session's
	// clock (worker/slot.go); nil outside a handler.
	slot *slot
	// alone: the delivery holds its pool's place for a suspect record
	// (poison.go).
	alone bool
	// span is the delivery's trace span (package tracing): nil while
	// tracing is off; ended with the delivery's outcome (jobRunner.complete)
	// and carried on to the next action's work message and a dead letter.
	span trace.Span
}

// deliveries keeps the deliveries the completer is done with, for the
// records after them. A delivery with its conversation and result is
// about 2 KiB; what a worker allocated a record beyond a plain work loop
// doing the same work was most of its gap to that loop at zero latency
// (docs/performance.md, docs/decisions.md).
var deliveries = sync.Pool{New: func() any { return new(delivery) }}

// recycle gives d back to deliveries when it is reusable: called by the
// completer when it is done with d, which nothing else holds then (see
// jobRunner.handle, which marks the deliveries for which that is so).
func recycle(d *delivery) {
	if d == nil {
		return
	}
	d.live() // recycled twice
	if !d.reusable {
		return
	}
	*d = delivery{}
	if poisonRecycled {
		// Never reused: whoever still holds d finds the poison, not the
		// next record.
		poison(d)
		return
	}
	deliveries.Put(d)
}

// live panics when d was recycled, in the jetpool_poison build; in others
// poisonRecycled is false and the check compiles away. The accessors
// below call it; direct field reads meet the poison's nil pointers.
func (d *delivery) live() {
	if poisonRecycled && d.isRecycled() {
		panic("worker: delivery of job " + d.job + " used after recycle")
	}
}

// unpaid reports whether this is the first delivery of a first-run message:
// the one run of the action for the record, so no result can exist yet.
func (d *delivery) unpaid() bool {
	d.live()
	return d.firstRun && d.n == 1
}

// prior is the attempts of earlier deliveries.
func (d *delivery) prior() []retry.Attempt {
	d.live()
	if d.state == nil {
		return nil
	}
	return d.state.Attempts
}

// delivery is the exec layer's number of this delivery, 1-based: the
// deliveries that made calls before it, plus one. Deliveries spent waiting
// (parked for a provider), handed back at a stop or lost with a process are
// not the record's retries and do not count here (RecordState).
func (d *delivery) delivery() int {
	d.live()
	if d.state == nil {
		return 1
	}
	return d.state.Deliveries + 1
}

// unaccounted is the earlier deliveries of the record that ended with no
// word from a worker (killed, hung: AckWait ran out), as far as its state
// knows: JetStream's count minus what jetpool handed back itself.
func (d *delivery) unaccounted() int {
	d.live()
	handled := 0
	if d.state != nil {
		handled = d.state.Handled
	}
	return max(d.n-1-handled, 0)
}

// nextState is the state to pass on when this delivery hands the record
// back: the earlier state, this delivery counted as handled, and its
// attempts added.
func (d *delivery) nextState(attempts []retry.Attempt) *broker.RecordState {
	d.live()
	st := &broker.RecordState{Replays: d.replays}
	if d.state != nil {
		*st = *d.state
		st.Attempts = append([]retry.Attempt(nil), d.state.Attempts...)
	}
	st.Replays = d.replays
	st.Attempts = append(st.Attempts, attempts...)
	// Every delivery so far is now accounted for: the earlier ones the
	// state did not know were lost with a process, and among them the one
	// it last ran alone in (poison.go).
	st.Lost += d.unaccounted()
	st.Blamed, st.Alone = d.blamed(), 0
	st.Handled = d.n
	st.Answer = nil
	return st
}

// lost is the deliveries of the record lost with a process so far,
// this delivery's predecessors included.
func (d *delivery) lost() int {
	d.live()
	n := d.unaccounted()
	if d.state != nil {
		n += d.state.Lost
	}
	return n
}

// parse reads a work message of the job.
func (jr *jobRunner) parse(msg jetstream.Msg) (*delivery, error) {
	action, ok := strings.CutPrefix(msg.Subject(), jr.workPrefix)
	if !ok || action == "" || strings.IndexByte(action, '.') >= 0 {
		return nil, fmt.Errorf("unexpected subject %s", msg.Subject())
	}
	rev := revisionOf(msg.Headers())
	wf, err := jr.workflowAt(rev)
	if err != nil {
		return nil, err
	}
	a, idx := wf.Action(action)
	if a == nil {
		return nil, fmt.Errorf("revision %d of the workflow has no action %q", rev, action)
	}
	env, err := broker.ParseEnvelope(msg.Data())
	if err != nil {
		return nil, fmt.Errorf("malformed work message: %w", err)
	}
	if env.ID == "" {
		return nil, fmt.Errorf("work message without a record id")
	}
	delivered, seq, err := numDelivered(msg)
	if err != nil {
		return nil, err
	}
	d := deliveries.Get().(*delivery)
	*d = delivery{msg: msg, job: jr.id, action: a, index: idx, env: env, n: int(delivered), seq: seq,
		revision: rev, started: jr.p.cfg.Clock.Now()}
	if idx+1 < len(wf.Actions) {
		d.next = wf.Actions[idx+1].Name
	}
	h := msg.Headers()
	d.replays = headerInt(h.Get(broker.HeaderReplays))
	d.mode = h.Get(broker.HeaderMode)
	d.firstRun = h.Get(broker.HeaderFirstRun) == "1" && d.replays == 0 && !jr.replicated.Load() && !jr.keepsAcked.Load()
	d.nonce = h.Get(broker.HeaderNonce)
	return d, nil
}

// numDelivered is JetStream's delivery count of msg and its stream
// sequence, read from its ack subject without the metadata's allocation
// where msg is the pool's own.
func numDelivered(msg jetstream.Msg) (delivered, seq uint64, _ error) {
	if m, ok := msg.(*jspull.Msg); ok {
		f, err := m.Fields()
		return f.Delivered, f.Sseq, err
	}
	meta, err := msg.Metadata()
	if err != nil {
		return 0, 0, err
	}
	return meta.NumDelivered, meta.Sequence.Stream, nil
}

// clock is the clock of the delivery's sessions: its slot, whose backoffs
// are waited off the slot, or the pool's.
func (d *delivery) clock(p *Pool) retry.Clock {
	d.live()
	if d.slot != nil {
		return d.slot
	}
	return p.cfg.Clock
}
