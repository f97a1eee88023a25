package worker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/tracing"
	"github.com/jetpool/jetpool/workflow"
)

// outcomeKind is what happens to a delivery once its session is over, or
// instead of one. Exactly one per delivery: chosen by decide, from how the
// session ended or from what a check found instead of running it
// (verdict), and carried out by the completer (complete.go).
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
	// outcomeHandBack: the worker is stopping, or the job is paused: back
	// to the stream at once (a paused consumer delivers it after the
	// resume).
	outcomeHandBack
	// outcomeDeadLetter: dead-letter the record, store its failed result,
	// ack; fail the job when the action says raise.
	outcomeDeadLetter
	// outcomeAbandon: nothing at all, as a process that died would
	// (Config.DieOn, for tests and drills).
	outcomeAbandon
	// outcomeYield: another delivery holds the record's call (worker/
	// lease.go): this one lets go of its message with no write, no ack and
	// no nak; the other's ack or nak settles it, and the calls this one
	// made are in its claim, which the other took over.
	outcomeYield
)

func (k outcomeKind) String() string {
	return [...]string{"done", "settled", "retry", "park", "hand back", "dead letter", "abandon", "yield"}[k]
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

// verdict is what a check before the session found instead of running it
// (handle.go, failed.go, poison.go, batch.go), or what the completer met
// after it (complete.go): a fact, which decide maps to the record's
// outcome. The zero verdict found nothing: the session runs.
type verdict struct {
	kind   verdictKind
	result *broker.Result // stored: the outcome found; answered: the answer
	job    *broker.Job    // jobStopped: the job as the worker knows it
	final  *retry.Error   // poisoned, unbatchable, overBudget, tooLarge: why
	cause  error          // unreadable: why
	calls  int            // tooLarge: the calls its answer took, in all
}

type verdictKind int

const (
	// verdictRun: nothing found; the session runs (never decided).
	verdictRun verdictKind = iota
	// verdictYield: another delivery of the record is handled in this
	// pool (worker/lease.go): that one settles it.
	verdictYield
	// verdictAbandon: the worker stopped while a check waited for the
	// store, or Config.DieOn chose the record: no write, no ack, no nak —
	// the record is redelivered after AckWait.
	verdictAbandon
	// verdictDropped: a late work message of a dispatch that lost the job
	// to another (dispatcher/checking.go): acked, nothing stored.
	verdictDropped
	// verdictStored: the record's outcome is stored already (a worker
	// stopped between storing it and acking): settled with it.
	verdictStored
	// verdictAnswered: an answer a delivery paid for and parked in the
	// record's state, its worker stopping: stored now, not called again.
	verdictAnswered
	// verdictJobStopped: the job was cancelled or failed (a budget, a
	// raise) before the record ran: dead-lettered, the reason and the
	// diagnostic the job's (stopOutcome, worker/steer.go).
	verdictJobStopped
	// verdictPoisoned: too many of its deliveries ended with no word from
	// a worker (poison.go): dead-lettered, max_deliveries.
	verdictPoisoned
	// verdictUnbatchable: a batch-mode record that cannot go in a batch
	// (its request cannot be built, the provider has no batch client):
	// dead-lettered bad_input (an image it names that cannot be sent) or
	// programming_error. It made no call here: none is listed.
	verdictUnbatchable
	// verdictOverBudget: a batch-mode record the job's budget refuses a
	// place in a batch: dead-lettered budget.
	verdictOverBudget
	// verdictUnreadable: a work message the worker cannot even read:
	// dead-lettered programming_error, with no result, since it names no
	// record to count.
	verdictUnreadable
	// verdictTooLarge: a paid answer the store can never take, as it is
	// or with the record for the next action (the completer met it):
	// dead-lettered too_large, its calls counted, its diagnostic the
	// write's alone (the calls before it were not why it failed).
	verdictTooLarge
	// verdictTwin: a twin delivery may be about to call, or calling
	// (worker/handle.go twin): parked once for twinWait and up to as much
	// again, spending nothing, to look again.
	verdictTwin
	// verdictSuspect: a suspect, while another runs alone in this process
	// (poison.go): parked for suspectPark and up to as much again.
	verdictSuspect
	// verdictBatchLater: a batch-mode record that cannot join a batch now
	// (its batcher not running yet, or the worker stopping): back in a
	// second, spending nothing.
	verdictBatchLater
)

// decision is what decide reads: the delivery, how its session ended (or
// what a check found instead), and the moment.
type decision struct {
	d      *delivery
	end    *sessionEnd // nil: check says why the session did not run
	check  verdict
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
//   - a delivery fenced before a call (worker/lease.go) settles a result
//     stored meanwhile, or yields to the delivery that holds the call now;
//   - a worker stopping, or a paused job, hands the record back, its
//     attempts kept;
//   - a call that could not go (a wait) is not an attempt: the record is
//     parked until the provider takes calls again, its delivery not spent
//     — a session that had made calls in it is cut short, and the next
//     delivery continues it with the calls it had left (worker/resume.go)
//     — and it is dead-lettered with reason max_wait once its waits pass
//     the action's max_wait, the diagnostic naming what it waited for;
//   - a success is stored;
//   - a session that ended the record itself (max_calls, a template or
//     configuration error) dead-letters it with its reason;
//   - otherwise the exec layer decides (retry.Policy.Decide) on the
//     deliveries that made calls.
//
// A delivery that ran no session is decided on its check's verdict
// (decideCheck).
func decide(in decision) outcome {
	if in.end == nil {
		return decideCheck(in)
	}
	d, end := in.d, in.end
	if f := end.fence; f != nil {
		// Stopped before a call it may not make (worker/lease.go).
		if f.settled != nil {
			return outcome{kind: outcomeSettled, result: f.settled}
		}
		return outcome{kind: outcomeYield}
	}
	if end.canceled || end.paused {
		st := d.nextState(end.attempts)
		keepSpend(st, end) // worker/ledger.go
		st.HandBacks++
		cutShort(st, end)
		return outcome{kind: outcomeHandBack, state: st}
	}
	if w := end.wait; w != nil {
		return decideWait(in, w)
	}
	if end.err == nil {
		return outcome{kind: outcomeDone, result: okResult(d, end, in.now, in.carry)}
	}
	exec := retry.Decision{Verdict: retry.VerdictDeadLetter, Reason: end.reason}
	if end.reason == "" {
		exec = d.action.Retry.Decide(retry.Outcome{Err: end.err, HandOver: end.handOver}, d.delivery())
	}
	if exec.Verdict == retry.VerdictRedeliver {
		st := d.nextState(end.attempts)
		keepSpend(st, end)
		spent(st)
		return outcome{kind: outcomeRetry, state: st, delay: exec.Delay}
	}
	all := append(append([]retry.Attempt(nil), d.prior()...), end.attempts...)
	diag := ""
	if end.explain != nil {
		diag = end.explain(all)
	}
	if diag == "" {
		diag = retry.Diagnose(end.err, all, d.delivery())
	}
	return deadLetterOutcome(in, end.err, exec.Reason, diag, all, end)
}

// decideCheck is the outcome of a delivery whose session did not run, or
// whose outcome a write that cannot land changed, by what was found.
func decideCheck(in decision) outcome {
	d, v := in.d, in.check
	switch v.kind {
	case verdictYield:
		return outcome{kind: outcomeYield}
	case verdictAbandon:
		return outcome{kind: outcomeAbandon}
	case verdictDropped:
		return outcome{kind: outcomeSettled}
	case verdictStored:
		return outcome{kind: outcomeSettled, result: v.result}
	case verdictAnswered:
		return outcome{kind: outcomeDone, result: v.result}
	case verdictJobStopped:
		final, reason, diag := stopOutcome(v.job) // worker/steer.go
		return deadLetterOutcome(in, final, reason, diag, d.prior(), nil)
	case verdictPoisoned:
		return deadLetterOutcome(in, v.final, retry.ReasonMaxDeliveries, retry.Diagnose(v.final, d.prior(), d.delivery()), d.prior(), nil)
	case verdictUnbatchable:
		reason := retry.ReasonProgrammingError
		if errors.Is(v.final, workflow.ErrBadInput) {
			reason = retry.ReasonBadInput
		}
		return deadLetterOutcome(in, v.final, reason, retry.Diagnose(v.final, nil, d.delivery()), nil, nil)
	case verdictOverBudget:
		return deadLetterOutcome(in, v.final, retry.ReasonBudget, retry.Diagnose(v.final, nil, d.delivery()), nil, nil)
	case verdictUnreadable:
		e := &deadletter.Entry{Job: d.job, Record: d.env.ID, Action: d.action.Name, Reason: retry.ReasonProgrammingError,
			Trace: tracing.Traceparent(d.span, d.msg.Headers()), Class: retry.ClassProgramming,
			Error: "failed permanently: ProgrammingError: " + v.cause.Error(), Data: d.msg.Data(), FailedAt: in.now.UTC(), Worker: in.worker}
		return outcome{kind: outcomeDeadLetter, entry: e}
	case verdictTooLarge:
		return deadLetterOutcome(in, v.final, retry.ReasonTooLarge, retry.Diagnose(v.final, nil, d.delivery()), d.prior(),
			&sessionEnd{calls: v.calls - len(d.prior())})
	case verdictTwin:
		st := d.nextState(nil)
		st.TwinWaited = true
		return outcome{kind: outcomePark, state: st, delay: jittered(twinWait, in.jitter)}
	case verdictSuspect:
		return outcome{kind: outcomePark, state: d.nextState(nil), delay: jittered(suspectPark, in.jitter)}
	case verdictBatchLater:
		return outcome{kind: outcomePark, state: d.nextState(nil), delay: time.Second}
	}
	panic(fmt.Sprintf("worker: no outcome for verdict %d: a check that found nothing runs the session", v.kind))
}

// jittered is d and up to d more, by jitter ([0,1)).
func jittered(d time.Duration, jitter float64) time.Duration {
	return d + time.Duration(jitter*float64(d))
}

// decideWait parks a record whose call could not go, or dead-letters it
// once it has waited max_wait in all.
//
// A cooldown the provider says outlasts what is left of max_wait is still
// waited, up to max_wait: it may end before it said (`jetpool limits
// reset`), and the park holds no slot. An open circuit is not (see below).
// Only a record that has waited all of max_wait and still finds the
// provider closed is dead-lettered, its diagnostic saying how long it
// waited and how long the provider would still take.
func decideWait(in decision, w *waitFor) outcome {
	d, end := in.d, in.end
	delay := max(w.until.Sub(in.now), 0)
	delay += time.Duration(in.jitter * float64(min(max(delay/10, 100*time.Millisecond), parkJitterMax)))
	st := d.nextState(end.attempts)
	keepSpend(st, end)
	waited := time.Duration(0)
	if d.state != nil {
		waited = d.state.Waited
	}
	limit := d.action.Retry.WaitLimit()
	left := limit - waited
	// An open circuit is not waited past max_wait: the pool pulls none of
	// its provider's work until the probe is due, so a record parked for
	// less would not come back before it anyway.
	circuitOutlasts := w.kind == ratelimit.WaitCircuit && w.until.Sub(in.now) > left
	if left <= 0 || circuitOutlasts {
		all := append(append([]retry.Attempt(nil), d.prior()...), end.attempts...)
		final := &retry.Error{Class: w.class, TypeName: "MaxWaitError", Provider: w.provider,
			Message: fmt.Sprintf("provider %s: %s: %s", w.provider, w.what(), w.cause)}
		return deadLetterOutcome(in, final, retry.ReasonMaxWait, waitDiag(w, waited, limit, w.until.Sub(in.now), all, d.action), all, end)
	} else if delay > left {
		delay = left // back when max_wait is up: called if the provider opened meanwhile, dead-lettered if not
	}
	st.Waits++
	st.Waited = waited + delay
	cutShort(st, end) // calls made in this delivery: the next continues it
	return outcome{kind: outcomePark, state: st, delay: delay}
}

// waitDiag explains a record dead-lettered for waiting too long: what it
// waited for (the provider's open circuit, its cooldown, its schedule), how
// long, how much longer the provider said it would take (ahead), and that
// the wait, not the record's retry budget, ended it.
func waitDiag(w *waitFor, waited, limit, ahead time.Duration, all []retry.Attempt, a *workflow.Action) string {
	var s string
	if waited < limit { // dead-lettered before max_wait was up: the provider said it stays closed past it
		s = fmt.Sprintf("waited %s in all for provider %s: %s, and takes no calls for another %s, past max_wait %s",
			roundWait(waited), w.provider, w.what(), roundWait(ahead), limit)
	} else {
		s = fmt.Sprintf("waited %s in all for provider %s, up to max_wait %s: %s", roundWait(waited), w.provider, limit, w.what())
		if ahead > 0 {
			s += fmt.Sprintf(", which takes no calls for another %s", roundWait(ahead))
		}
	}
	s += " (" + w.cause + ")"
	if len(all) == 0 {
		return s + "; no call was made"
	}
	budget := a.Retry.Attempts() * a.Retry.Deliveries()
	if a.MaxCalls > 0 {
		budget = min(budget, a.MaxCalls)
	}
	return s + fmt.Sprintf("; %d of the %d calls its retry budget allows made before: ", len(all), budget) +
		retry.Diagnose(&retry.Error{Class: retry.ClassUnknown}, all, 0)
}

// roundWait rounds a wait for a diagnostic, finer the shorter it is (a
// short max_wait must read as itself, not as "0s" or "2s").
func roundWait(d time.Duration) time.Duration {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond)
	case d < time.Minute:
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Second)
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
		Trace: tracing.Traceparent(d.span, d.msg.Headers()),
	}
	res := &broker.Result{
		ID: d.env.ID, Status: failedStatus(reason), Reason: string(reason), Action: d.action.Name, Job: d.job,
		Error:   &broker.ResultError{Class: string(final.Class), Retryable: retryable(reason, final.Class), Message: diag},
		Outputs: d.env.Outputs, Provider: d.action.Provider, Model: e.Model, Replays: d.replays,
		Recovery: recovery(all, calls, d.delivery(), repairsOf(all, true)), Finished: e.FailedAt,
	}
	if end == nil {
		end = d.priorRun() // worker/ledger.go: what earlier deliveries spent
	}
	answered(res, d, end, in.carry) // worker/cost.go: usage, cost, finish reason, latency, line, carry
	res.Deployment = end.deployment
	if end.text != "" {
		// return_last: the last answer the model gave, when it gave one
		// (an answer that failed the expectation, say).
		res.Output = end.text
	}
	story(&res.Recovery, d)
	account(res, d, all, in.now)
	o := outcome{kind: outcomeDeadLetter, entry: e, result: res}
	if reason != retry.ReasonJobFailed && reason != retry.ReasonCancelled && reason != retry.ReasonBadInput && exhaustedPolicy(d.action, reason, final) == retry.Raise {
		o.raise = diag
	}
	return o
}

// retryable is a failed result's `retryable`: whether the record may
// succeed if it runs again as it is (jetpool retry replays it). A transient
// or unknown failure may; a permanent one (a bad request, a bad key, the
// budget) fails again until the input, the key or the workflow changes. A
// record a cancel stopped did not fail at all: `retry --reason cancelled`
// runs it, so it is retryable whatever its last error's class.
func retryable(reason retry.Reason, class retry.Class) bool {
	if reason == retry.ReasonCancelled {
		return true
	}
	return class.Transient() || class == retry.ClassUnknown
}

// failedStatus is the status of a record that ended for reason: cancelled,
// or failed.
func failedStatus(reason retry.Reason) string {
	if reason == retry.ReasonCancelled {
		return broker.StatusCancelled
	}
	return broker.StatusFailed
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
		Outputs: d.env.Outputs, Provider: d.action.Provider, Model: end.model, Deployment: end.deployment, Replays: d.replays,
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
		Repairs: r.Recovery.Repairs, Usage: r.Usage, Cost: r.Cost}
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
	if d.run != nil {
		rec.Routes = d.run.routes // worker/fallback.go
	}
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
