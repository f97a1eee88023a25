package worker

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
)

// outcomeKind is what happens to a delivery once its session is over, or
// instead of one. Exactly one per delivery: chosen by decide and the steps
// of handle, carried out by the completer (complete.go).
type outcomeKind int

const (
	// outcomeDone: the action succeeded: store the result, forward the
	// record to the next action, ack.
	outcomeDone outcomeKind = iota
	// outcomeSettled: the record's outcome is stored already (a worker
	// stopped between storing it and acking): forward a success again (the
	// next action's message is deduplicated) and ack.
	outcomeSettled
	// outcomeRetry: the exec layer redelivers after delay: a delivery of the
	// record's budget is spent.
	outcomeRetry
	// outcomePark: no call could go (a shared cooldown, an open circuit): back
	// to the stream until delay has passed, spending no attempt and no
	// delivery of the record's budget.
	outcomePark
	// outcomeHandBack: the worker is stopping: back to the stream at once.
	outcomeHandBack
	// outcomeDeadLetter: dead-letter the record, store its failed result,
	// ack; fail the job when the action says raise.
	outcomeDeadLetter
	// outcomeAbandon: nothing at all, as a process that died would
	// (Config.DieOn, for tests and drills).
	outcomeAbandon
)

func (k outcomeKind) String() string {
	return [...]string{"done", "settled", "retry", "park", "hand back", "dead letter", "abandon"}[k]
}

// outcome is a delivery's fate, with everything the completer writes.
type outcome struct {
	kind   outcomeKind
	result *broker.Result      // done, deadLetter; settled: the stored one
	entry  *deadletter.Entry   // deadLetter
	state  *broker.RecordState // retry, park, handBack: saved before the nak
	delay  time.Duration       // retry, park
	raise  string              // deadLetter: the job fails with this diagnostic
}

// decision is what decide reads: the delivery, how its session ended, and
// the moment.
type decision struct {
	d      *delivery
	end    *sessionEnd
	now    time.Time
	jitter float64  // [0,1): spreads parked records' return
	worker string   // names the worker in a dead letter
	carry  []string // the record fields results carry (workflow carry:)
}

// parkJitterMax caps the spread of parked records' return, so that the
// records of a provider in a cooldown do not all come back at once.
const parkJitterMax = 5 * time.Second

// decide turns how a delivery's session ended into its outcome. It is the
// whole of the rules of docs/design.md §9 for a record that ran (pure, and
// table-tested in decide_test.go without NATS):
//
//   - a worker stopping hands the record back, its attempts kept;
//   - a call that could not go (a wait) is not an attempt: the record is
//     parked until the provider takes calls again, its delivery not spent
//     — unless the session had made calls in this delivery, which then
//     spent it like a session that gave up — and it is dead-lettered with
//     reason max_wait once its waits pass the action's max_wait;
//   - a success is stored;
//   - a session that ended the record itself (max_calls, a template or
//     configuration error) dead-letters it with its reason;
//   - otherwise the exec layer decides (retry.Policy.Decide) on the
//     deliveries that made calls.
func decide(in decision) outcome {
	d, end := in.d, in.end
	if end.canceled {
		st := d.nextState(end.attempts)
		st.HandBacks++
		return outcome{kind: outcomeHandBack, state: st}
	}
	if w := end.wait; w != nil {
		return decideWait(in, w)
	}
	if end.err == nil {
		return outcome{kind: outcomeDone, result: okResult(d, end, in.now, in.carry)}
	}
	verdict := retry.Decision{Verdict: retry.VerdictDeadLetter, Reason: end.reason}
	if end.reason == "" {
		verdict = d.action.Retry.Decide(retry.Outcome{Err: end.err, HandOver: end.handOver}, d.delivery())
	}
	if verdict.Verdict == retry.VerdictRedeliver {
		st := d.nextState(end.attempts)
		st.Deliveries++
		return outcome{kind: outcomeRetry, state: st, delay: verdict.Delay}
	}
	all := append(append([]retry.Attempt(nil), d.prior()...), end.attempts...)
	diag := ""
	if end.explain != nil {
		diag = end.explain(all)
	}
	if diag == "" {
		diag = retry.Diagnose(end.err, all, d.delivery())
	}
	return deadLetterOutcome(in, end.err, verdict.Reason, diag, all, end)
}

// decideWait parks a record whose call could not go, or dead-letters it
// once its waits pass max_wait.
func decideWait(in decision, w *waitFor) outcome {
	d, end := in.d, in.end
	delay := max(w.until.Sub(in.now), 0)
	delay += time.Duration(in.jitter * float64(min(max(delay/10, 100*time.Millisecond), parkJitterMax)))
	st := d.nextState(end.attempts)
	waited := time.Duration(0)
	if d.state != nil {
		waited = d.state.Waited
	}
	if limit := d.action.Retry.WaitLimit(); waited+delay > limit {
		all := append(append([]retry.Attempt(nil), d.prior()...), end.attempts...)
		final := &retry.Error{Class: w.class, TypeName: "MaxWaitError", Provider: w.provider,
			Message: fmt.Sprintf("provider %s: %s", w.provider, w.cause)}
		return deadLetterOutcome(in, final, retry.ReasonMaxWait, waitDiag(w, waited, limit, all), all, end)
	}
	st.Waits++
	st.Waited = waited + delay
	if end.calls > 0 {
		// Calls made in this delivery spent it, as a session that gave up
		// would have: the worst case stays attempts × deliveries.
		st.Deliveries++
		if st.Deliveries >= d.action.Retry.Deliveries() {
			final := cmp.Or(end.err, &retry.Error{Class: w.class, Message: w.cause})
			all := append(append([]retry.Attempt(nil), d.prior()...), end.attempts...)
			diag := retry.Diagnose(final, all, d.delivery()) + "; then provider " + w.provider + " stopped taking calls: " + w.cause
			return deadLetterOutcome(in, final, retry.ReasonExhausted, diag, all, end)
		}
	}
	return outcome{kind: outcomePark, state: st, delay: delay}
}

// waitDiag explains a record dead-lettered for waiting too long.
func waitDiag(w *waitFor, waited, limit time.Duration, all []retry.Attempt) string {
	s := fmt.Sprintf("waited %s in all for provider %s, past max_wait %s (%s)", waited.Round(time.Second), w.provider, limit, w.cause)
	if len(all) == 0 {
		return s + "; no call was made"
	}
	return s + "; before: " + retry.Diagnose(&retry.Error{Class: retry.ClassUnknown}, all, 0)
}

// deadLetterOutcome is the dead letter and failed result of a record
// that failed with final for reason.
func deadLetterOutcome(in decision, final *retry.Error, reason retry.Reason, diag string, all []retry.Attempt, end *sessionEnd) outcome {
	d := in.d
	if final == nil {
		final = &retry.Error{Class: retry.ClassUnknown}
	}
	calls := len(d.prior())
	if end != nil {
		calls += end.calls
	}
	e := &deadletter.Entry{
		Job: d.job, Record: d.env.ID, Action: d.action.Name, Reason: reason, Class: final.Class, Error: diag,
		Attempts: calls, Deliveries: d.n, Provider: d.action.Provider, Model: cmp.Or(final.Model, d.action.Model),
		Replays: d.replays, Data: d.msg.Data(), FailedAt: in.now.UTC(), Worker: in.worker,
	}
	res := &broker.Result{
		ID: d.env.ID, Status: broker.StatusFailed, Reason: string(reason), Action: d.action.Name, Job: d.job,
		Error:   &broker.ResultError{Class: string(final.Class), Retryable: final.Class.Transient() || final.Class == retry.ClassUnknown, Message: diag},
		Outputs: d.env.Outputs, Provider: d.action.Provider, Model: e.Model, Replays: d.replays,
		Recovery: recovery(all, calls, d.delivery(), repairsOf(all, true)), Finished: e.FailedAt,
	}
	if end != nil {
		answered(res, d, end, in.carry) // worker/cost.go: usage, cost, finish reason, latency, line, carry
		if end.text != "" {
			// return_last: the last answer the model gave, when it gave one
			// (an answer that failed the expectation, say).
			res.Output = end.text
		}
	}
	story(&res.Recovery, d)
	account(res, d, all, in.now)
	o := outcome{kind: outcomeDeadLetter, entry: e, result: res}
	if reason != retry.ReasonJobFailed && reason != retry.ReasonBadInput && exhaustedPolicy(d.action, reason, final) == retry.Raise {
		o.raise = diag
	}
	return o
}

// okResult is the result of a delivery whose session succeeded.
func okResult(d *delivery, end *sessionEnd, now time.Time, carry []string) *broker.Result {
	all := end.attempts // read only below
	if prior := d.prior(); len(prior) > 0 {
		all = append(append([]retry.Attempt(nil), prior...), end.attempts...)
	}
	// In a reusable delivery, with its accounting (account): used again
	// with it once the completer is done (recycle).
	r := &d.ok.r
	if !d.reusable {
		r = new(broker.Result)
	}
	*r = broker.Result{
		ID: d.env.ID, Status: broker.StatusOK, Output: end.output, Action: d.action.Name, Job: d.job,
		Outputs: d.env.Outputs, Provider: d.action.Provider, Model: end.model, Replays: d.replays,
		Finished: now.UTC(),
	}
	answered(r, d, end, carry) // worker/cost.go
	r.Recovery = recovery(all, len(d.prior())+end.calls, d.delivery(), end.repairs)
	story(&r.Recovery, d)
	account(r, d, all, now)
	return r
}

// account fills r's accounting (broker.Result.Actions): the earlier
// actions' entries the record carries, then this action's, and their
// totals; r.Usage becomes the record's. The delivery keeps its entry to
// forward with the record.
func account(r *broker.Result, d *delivery, all []retry.Attempt, now time.Time) {
	own := broker.Account{Action: r.Action, Revision: d.revision, Status: r.Status,
		Attempts: r.Recovery.Attempts, Calls: r.Recovery.Attempts, Deliveries: r.Recovery.Deliveries,
		Repairs: r.Recovery.Repairs, Usage: r.Usage}
	if !d.started.IsZero() {
		own.LatencyMS = max(now.Sub(d.started), 0).Milliseconds()
	}
	r.Revision = d.revision
	r.RecordSum = d.env.Sum
	// The delivery's own result (okResult) keeps its accounting in the
	// delivery too: its totals, and a first action's account.
	inDelivery := r == &d.ok.r
	if inDelivery && len(d.env.Accounts) == 0 {
		d.ok.own[0] = own
		r.Actions = d.ok.own[:]
	} else {
		r.Actions = append(slices.Clip(d.env.Accounts), own)
	}
	if inDelivery {
		r.Totals = &d.ok.totals
	} else {
		r.Totals = new(broker.Totals)
	}
	*r.Totals = broker.Sum(r.Actions)
	r.Usage = r.Totals.Usage
	d.account = &r.Actions[len(r.Actions)-1] // own's copy: own stays on the stack
}

// okBlock is a success's result and its accounting, in its delivery
// (delivery.ok): three allocations a record less.
type okBlock struct {
	r      broker.Result
	totals broker.Totals
	own    [1]broker.Account
}

// ownAccount is the entry of r's own action in its accounting (nil for a
// result stored before results carried one).
func ownAccount(r *broker.Result) *broker.Account {
	if r == nil || len(r.Actions) == 0 {
		return nil
	}
	a := r.Actions[len(r.Actions)-1]
	return &a
}

// story adds what the record's deliveries went through besides its calls:
// its waits, the deliveries lost with a process and those handed back, and
// what compaction did.
func story(rec *broker.Recovery, d *delivery) {
	rec.Lost = d.lost()
	if st := d.state; st != nil {
		rec.Waits, rec.Waited, rec.HandBacks = st.Waits, st.Waited, st.HandBacks
	}
	rec.Compacted = d.run.compactions() // worker/overflow.go
}

// recovery is how a record got to its result: calls made, deliveries that
// made them, and every failure on the way.
func recovery(all []retry.Attempt, calls, deliveries, repairs int) broker.Recovery {
	rec := broker.Recovery{Attempts: calls, Deliveries: deliveries, Repairs: repairs}
	seen := map[retry.Class]bool{}
	for _, a := range all {
		rec.Failures = append(rec.Failures, broker.Failure{N: a.N, Delivery: a.Delivery, Class: string(a.Class), Error: a.Error,
			Repair: a.Class == retry.ClassSchemaViolation})
		if a.Class != "" && !seen[a.Class] {
			seen[a.Class] = true
			rec.Classes = append(rec.Classes, string(a.Class))
		}
	}
	return rec
}
