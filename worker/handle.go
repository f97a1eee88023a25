package worker

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/tracing"
	"github.com/jetpool/jetpool/workflow"
)

// handle works one delivery, a short sequence of steps: read it; find what
// earlier deliveries left (an outcome already stored, the record's state);
// check its budget; run its session; decide. Each check may find what
// ends the record instead of passing it on (a verdict); decide maps that or
// the session's end to the outcome, which the completer carries out.
// release hands the delivery's slot on to the next record (at
// the latest when handle returns). handedOver: the completer owns the
// record now and ends it (Pool.handleTask).
//
// pauses is the pause watch's reading when the message was pulled
// (worker/lease.go).
func (jr *jobRunner) handle(ctx context.Context, msg jetstream.Msg, pauses time.Duration, s *slot) (handedOver bool) {
	p := jr.p
	release := s.release
	p.handled.Add(1)
	p.cfg.Metrics.Delivery(jr.id)
	d, err := jr.parse(msg)
	if ue := (*unservableError)(nil); errors.As(err, &ue) {
		jr.cannotServe(msg, err) // worker/serve.go: a revision this worker may not call
		return false
	}
	if err != nil {
		return jr.conclude(ctx, jr.broken(msg), verdict{kind: verdictUnreadable, cause: err}, release)
	}
	if tracing.Enabled() {
		ctx, d.span = tracing.StartDelivery(ctx, msg.Headers(), tracing.Record{Job: d.job, Action: d.action.Name, ID: d.env.ID},
			d.replays, p.id)
	}
	batched := d.action.Mode == workflow.ModeBatch && d.mode != workflow.ModeOnline
	if !batched && !jr.hold(d) {
		// Delivered again to this pool while a delivery of it is handled
		// here (worker/lease.go): that one settles it.
		p.log.Debug().Str("job", d.job).Str("record", d.env.ID).Int("delivery", d.n).
			Msg("delivered again while this worker still handles it (its AckWait ran out: the process was stopped, or its heartbeats were lost): left to the delivery under way")
		return jr.conclude(ctx, d, verdict{kind: verdictYield}, release)
	}
	if v := jr.before(ctx, d); v.kind != verdictRun {
		return jr.conclude(ctx, d, v, release)
	}
	if v := jr.alone(ctx, d); v.kind != verdictRun { // poison.go: a suspect runs alone
		return jr.conclude(ctx, d, v, release)
	}
	if d.alone {
		defer func() { <-p.suspect }()
	}
	if p.cfg.DieOn != nil && p.cfg.DieOn(d.job, d.action.Name, d.env.ID) {
		return jr.conclude(ctx, d, verdict{kind: verdictAbandon}, release) // as if the process died running it: no ack, no nak
	}
	if batched {
		if d.span != nil {
			// Its calls serve many records at once: the delivery's span
			// ends as it joins a batch (docs/tracing.md).
			tracing.EndDelivery(d.span, tracing.Outcome{Kind: "batch", Delivery: d.delivery()})
			d.span = nil
		}
		jr.enqueueBatch(ctx, d, release) // worker/batch.go: the batcher acks it once its batch is recorded
		return false
	}
	jr.attach(d, pauses) // worker/lease.go: its claim kept alive while it calls
	d.slot = s           // worker/slot.go: its backoffs waited off the slot
	run := jr.runSession
	if d.action.IsEmbed() {
		run = jr.runEmbed // worker/embed.go
	} else {
		// Nothing keeps an online session's delivery once the completer
		// is done with it: it is used again (recycle).
		d.reusable = true
	}
	end := run(ctx, d)
	d.run = end
	in := jr.decision(d)
	in.end = end
	o := decide(in)
	if o.kind == outcomeSettled && o.result != nil {
		// Found stored by its fence (worker/lease.go): its cost goes on
		// with the record, as lookUp's.
		d.run, d.account = paidRun(o.result), ownAccount(o.result)
	}
	return jr.complete(ctx, d, o, release)
}

// conclude hands the outcome decide chooses for what a check found (v)
// to the completer.
func (jr *jobRunner) conclude(ctx context.Context, d *delivery, v verdict, release func()) bool {
	in := jr.decision(d)
	in.check = v
	return jr.complete(ctx, d, decide(in), release)
}

// complete hands d's outcome to the completer.
func (jr *jobRunner) complete(ctx context.Context, d *delivery, o outcome, release func()) bool {
	if d != nil && d.span != nil {
		endSpan(d, o)
	}
	return jr.p.done.complete(ctx, d, o, release, jr)
}

// handed and finished count the records the completer took over from a
// handler (jetpool status: storing), and end their in-flight count.
func (jr *jobRunner) handed() { jr.storing.Add(1) }

func (jr *jobRunner) finished() {
	jr.storing.Add(-1)
	jr.p.pulled.Done()
}

// before is every check before the session: each returns what it found
// when there is nothing to run (a verdict decide maps to the outcome).
func (jr *jobRunner) before(ctx context.Context, d *delivery) verdict {
	p := jr.p
	if n := jr.nonce.Load(); d.nonce != "" && n != nil && d.nonce != *n {
		// A late write of a dispatch that lost the job to another, which
		// published every record again (dispatcher/checking.go): dropped,
		// nothing stored, nothing called.
		p.log.Debug().Str("job", d.job).Str("record", d.env.ID).Str("nonce", d.nonce).Msg("dropped a work message of a dispatch that lost the job")
		return verdict{kind: verdictDropped}
	}
	j := jr.current()
	if j.Stopped() && d.replays > 0 {
		// A replayed record: `jetpool retry` reopened the job before it
		// republished, and the watch may be behind it (as workflowAt).
		j = jr.reread(ctx, j)
	}
	if j.Stopped() {
		if v := jr.storedOutcome(ctx, d); v.kind != verdictRun { // worker/failed.go
			return v
		}
		return verdict{kind: verdictJobStopped, job: j}
	}
	// The first delivery of a message whose publisher knew that no result
	// can exist yet (broker.HeaderFirstRun) has nothing to look up.
	if !d.unpaid() {
		if v := jr.lookUp(ctx, d); v.kind != verdictRun {
			return v
		}
		if final := d.poisoned(); final != nil { // poison.go
			return verdict{kind: verdictPoisoned, final: final}
		}
	}
	return verdict{}
}

// decision is the base of a decision about d now.
func (jr *jobRunner) decision(d *delivery) decision {
	return decision{d: d, now: jr.p.cfg.Clock.Now(), jitter: rand.Float64(), worker: jr.p.id, carry: jr.wf.Carry}
}

// lookUp reads what earlier deliveries of the record left: an outcome
// already stored (a redelivery after a crash, or a duplicate, must not pay
// twice) and the record's state. A lookup the store does not answer is
// tried again, the record held (and kept alive) meanwhile: handing it back
// would spend a delivery on the store's fault.
func (jr *jobRunner) lookUp(ctx context.Context, d *delivery) verdict {
	p := jr.p
	var last *broker.Result
	var seq uint64
	held, err := jr.untilAnswered(ctx, "lookup", broker.StreamResults, func(ctx context.Context) (err error) {
		last, seq, err = p.b.LastOutcome(ctx, d.job, d.action.Name, d.env.ID)
		return err
	})
	if err != nil {
		return verdict{kind: verdictAbandon} // stopping: the record is redelivered after AckWait
	}
	switch {
	case last == nil:
	case last.Status == broker.StatusOK:
		d.run = paidRun(last)        // worker/cost.go: its cost goes on with the record
		d.account = ownAccount(last) // forwarded again with the record
		return verdict{kind: verdictStored, result: last}
	case last.Replays >= d.replays:
		// Its outcome was decided and stored, and the worker stopped before
		// the ack: the dead letter went first, so it is there too.
		return verdict{kind: verdictStored, result: last}
	default:
		d.stale = seq // a failure of an earlier generation, which this replay replaces
	}
	if d.n > 1 || d.mode == workflow.ModeOnline {
		var st *broker.RecordState
		heldState, err := jr.untilAnswered(ctx, "state lookup", "KV_"+broker.BucketAttempts, func(ctx context.Context) (err error) {
			st, d.stateRev, err = p.b.LoadStateRev(ctx, d.job, d.action.Name, d.env.ID, d.replays)
			return err
		})
		if err != nil {
			return verdict{kind: verdictAbandon}
		}
		d.state = st
		if st != nil && st.Answer != nil {
			// An answer paid for by a delivery whose worker had to stop
			// before it could store it: stored now, not called again.
			r := *st.Answer
			d.account = ownAccount(&r)
			return verdict{kind: verdictAnswered, result: &r}
		}
		held = held || heldState
	}
	suspect := held || p.done.faults.recent(p.cfg.Clock.Now(), twinWindow)
	return jr.twin(ctx, d, suspect && last == nil)
}

// twin decides whether a record that found no result waits for a twin
// delivery before it calls. An outage, or a leader election of the work
// stream or its consumers, may make JetStream deliver a record twice (a
// work consumer's leader lost before it passed a delivery on delivers it
// again as new), and its twin may be at the same point, about to call,
// calling, or holding its answer unstored (TestChaosLeaderLoss paid
// records again 1 ms after a twin's call, the instant a twin's held write
// landed, and 0.3–3 s after a call that began before the election). So:
//   - suspect (the lookup was held, or its pool met a storage fault or an
//     election a moment ago): the record is parked once for a few seconds,
//     spending nothing of its budget, and looks again;
//   - on a replicated work stream every call is claimed first
//     (broker.Claim), and after an outage on any: of two twins one calls,
//     the other waits, until the winner's result is stored or its claim
//     let go or lapsed. A claim the store does not answer is asked again
//     until it does (TestChaosTwinWaitsOutAFrozenClaimsLeader); one it
//     refuses (the bucket full, say) does not stop the call;
//   - a redelivery claims on a single server too: the delivery before it
//     may be a worker stopped mid-call (worker/lease.go), whose claim,
//     taken at its first heartbeat, stands while it is renewed.
func (jr *jobRunner) twin(ctx context.Context, d *delivery, suspect bool) verdict {
	waited := d.state != nil && d.state.TwinWaited
	if suspect && !waited {
		return verdict{kind: verdictTwin}
	}
	// A redelivery claims everywhere: its last delivery may be a worker
	// stopped or cut off mid-call (worker/lease.go).
	if !suspect && !jr.replicated.Load() && d.n <= 1 {
		return verdict{}
	}
	p := jr.p
	bid := jr.bid(d, 1)
	var c broker.Claimed
	var ok bool
	var refused error
	// A claim the bucket does not answer is asked again, the record held
	// meanwhile (its leader is being elected: the one elected holds a
	// twin's claim, if there is one); only one it refuses lets the call go
	// on without a claim.
	held, err := jr.untilAnswered(ctx, "claim", "KV_"+broker.BucketClaims, func(ctx context.Context) (err error) {
		c, ok, err = p.b.Claim(ctx, bid)
		if err != nil && !broker.Unanswered(err) {
			refused, err = err, nil
		}
		return err
	})
	switch {
	case err != nil:
		return verdict{kind: verdictAbandon} // stopping: the record is redelivered after AckWait
	case refused != nil:
		p.warnClaim(refused)
		return verdict{}
	case !ok:
		return verdict{kind: verdictTwin}
	}
	d.lease.mu.Lock()
	d.lease.rev, d.lease.calls = c.Rev, 1
	d.lease.mu.Unlock()
	if held {
		// Won once the bucket answered again, maybe many seconds on: a
		// twin's claim may have lapsed meanwhile, its result stored. The
		// record lets go and is parked, and its next delivery looks
		// again (CI: a twin held 21 s took over a lapsed claim and paid
		// again for a result stored 18 s before).
		return verdict{kind: verdictTwin}
	}
	if c.LapsedCalls > 0 {
		jr.takeOver(d, c.LapsedCalls)
	}
	return verdict{}
}

// warnClaim logs a claim the store refused, at most once a minute.
func (p *Pool) warnClaim(err error) {
	if !minuteSince(&p.claimWarned) {
		return
	}
	p.log.Warn().Err(err).Str("bucket", broker.BucketClaims).
		Msg("the store refused a call's claim: the call goes on without one, and a twin delivery of its record would call too (docs/durability.md)")
}

// minuteSince reports whether a minute has passed since last (unix ns),
// and if so sets it to now: one caller of many wins.
func minuteSince(last *atomic.Int64) bool {
	now, l := time.Now().UnixNano(), last.Load()
	return now-l >= time.Minute.Nanoseconds() && last.CompareAndSwap(l, now)
}

// twinWait is the least a record whose lookup an outage held waits before
// it looks again (handle.go, lookUp); up to twice that, at random.
// twinWindow is how long after a storage fault its pool's lookups count
// as held.
const (
	twinWait   = 2 * time.Second
	twinWindow = 10 * time.Second
)

// untilAnswered runs a lookup until it answers, with backoff, while ctx
// lasts; the store's failures are reported as faults. held: it failed at
// least once.
func (jr *jobRunner) untilAnswered(ctx context.Context, what, stream string, f func(ctx context.Context) error) (held bool, _ error) {
	c := jr.p.done
	delay := heldRetryMin
	for {
		lctx, cancel := context.WithTimeout(ctx, writeTimeout)
		err := f(lctx)
		cancel()
		if err == nil {
			c.faults.ok(what, c.log)
			return held, nil
		}
		if ctx.Err() != nil {
			return held, ctx.Err()
		}
		held = true
		c.faults.fail(what, stream, err, c.log)
		if err := (retry.SystemClock{}).Sleep(ctx, delay); err != nil {
			return held, err
		}
		delay = min(delay*2, heldRetryMax)
	}
}

// broken is the delivery of a work message the worker cannot even read:
// what its subject and headers say of it.
func (jr *jobRunner) broken(msg jetstream.Msg) *delivery {
	parts := broker.SubjectParts(msg.Subject())
	action := "unknown"
	if len(parts) >= 2 {
		action = parts[1]
	}
	rec := msg.Headers().Get(broker.HeaderRecord)
	if rec == "" {
		rec = "unknown"
	}
	return &delivery{msg: msg, job: jr.id, action: &workflow.Action{Name: action}, env: &broker.Envelope{ID: rec}}
}
