package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// A delivery's lease is its right to call the model for its record: its
// claim in JETPOOL_CLAIMS (broker.Claim), which every other delivery of the
// record respects while it stands. A worker can stop without dying — SIGSTOP,
// Ctrl-Z, docker pause, a VM migrated, a partition that leaves it the model
// but not NATS — and come back holding a call's answer, or about to make
// its next call, while JetStream, its AckWait run out, has delivered the
// record again elsewhere. So:
//
//   - the claim is renewed on every heartbeat while its delivery holds the
//     message (beats), so that it stands however long the call runs; a
//     delivery without one (a single server claims before a first call
//     only after an outage) takes one at its first heartbeat;
//   - every call is recorded in the claim before it is made (the first
//     by the claim taken before it, each later one by fence): a delivery
//     that takes a lapsed claim over knows what its silent holder spent
//     (takeOver), and a holder that cannot reach the store makes no call
//     it could not record;
//   - before a call, a delivery that was paused (a thawed process: the
//     pause watch saw the clocks jump), or whose claim was taken late or
//     taken over, checks its right first: a claim another delivery holds
//     now ends it without a call (outcomeYield), a result stored meanwhile
//     settles it;
//   - an answer that arrived before or during a pause is used: it was
//     paid for (a provider's timeout that fell due during the pause
//     waits a grace first: internal/pause).
type lease struct {
	// io is held while the claim is written (taken, renewed): one write at
	// a time; a heartbeat's renewal skips a lease its handler is writing.
	io sync.Mutex
	mu sync.Mutex // the fields below
	jr *jobRunner // nil: not attached (no claim is kept alive)
	// holder names the delivery in its claim; rev is the claim's
	// revision (0: none taken); calls the calls recorded in it.
	holder string
	rev    uint64
	calls  int
	// pauses is the pause watch's reading when the delivery last knew its
	// right to call (pulled, or the claim last written).
	pauses time.Duration
	// taken: another delivery holds the claim now; look: the claim was
	// taken late (or again, after it vanished), so a twin may have stored
	// a result meanwhile; watch: it was taken over from a silent delivery,
	// which may come back and store the answer it holds (looked up before
	// every call).
	taken, look, watch bool
}

// claimRev is the revision of d's claim, 0 when it holds none.
func (d *delivery) claimRev() uint64 {
	d.lease.mu.Lock()
	defer d.lease.mu.Unlock()
	return d.lease.rev
}

// claimTaken reports whether another delivery took d's claim over.
func (d *delivery) claimTaken() bool {
	d.lease.mu.Lock()
	defer d.lease.mu.Unlock()
	return d.lease.taken
}

// attach keeps d's claim alive with its message's heartbeats while the
// delivery holds it (released by the completer).
func (jr *jobRunner) attach(d *delivery, pauses time.Duration) {
	l := &d.lease
	l.mu.Lock()
	l.jr = jr
	l.pauses = pauses
	l.mu.Unlock()
	jr.p.beats.attach(d.msg, d)
}

// holders numbers the deliveries' claims in the process: a claim's holder
// is unique even between two pools of one process.
var holders atomic.Int64

// bid is d's bid for its record's call, with calls made under it.
func (jr *jobRunner) bid(d *delivery, calls int) broker.Bid {
	l := &d.lease
	l.mu.Lock()
	if l.holder == "" {
		l.holder = fmt.Sprintf("%s/%d", jr.p.id, holders.Add(1))
	}
	holder := l.holder
	l.mu.Unlock()
	return broker.Bid{Job: d.job, Action: d.action.Name, Record: d.env.ID, Replays: d.replays,
		Holder: holder, Delivery: d.n, Calls: calls, TTL: jr.claimTTL()}
}

// claimTTL is how long a claim stands after it was taken or last renewed:
// twice the job consumer's AckWait (a dozen heartbeats). A holder silent
// that long — stopped, cut off, killed — is taken for dead, and a later
// delivery of its record takes the claim over.
func (jr *jobRunner) claimTTL() time.Duration {
	aw := time.Duration(jr.ackWait.Load())
	return 2 * cmp.Or(aw, jr.p.b.Cfg.AckWait, broker.AckWaitDefault)
}

// renewLease renews d's claim on a heartbeat (beats.renew), or takes one
// for a delivery that has none yet; a claim another delivery holds now is
// marked taken, and its delivery makes no further call. A renewal the
// store does not answer is tried again at the next heartbeat.
func (p *Pool) renewLease(d *delivery) {
	l := &d.lease
	if !l.io.TryLock() {
		return // its handler is writing it
	}
	defer l.io.Unlock()
	l.mu.Lock()
	jr, rev, calls, taken := l.jr, l.rev, l.calls, l.taken
	l.mu.Unlock()
	if jr == nil || taken {
		return
	}
	p.noticePause()
	mark := p.pauses.Lost()
	ctx, cancel := context.WithTimeout(context.Background(), min(jr.heartbeatEvery(), writeTimeout))
	defer cancel()
	// A claim taken on a heartbeat is of a call under way: at least one.
	bid := jr.bid(d, max(calls, 1))
	var err error
	look, watch := false, false
	if rev == 0 {
		var c broker.Claimed
		var ok bool
		c, ok, err = p.b.Claim(ctx, bid)
		switch {
		case err == nil && !ok:
			err = broker.ErrClaimTaken
		case err == nil:
			rev, look = c.Rev, true
			// Over a silent holder's lapsed claim: it may come back with
			// what it holds (its calls go uncounted here, in a call under
			// way: docs/durability.md, Known gaps).
			watch = c.LapsedCalls > 0
		}
	} else {
		rev, look, err = p.b.RenewClaim(ctx, bid, rev)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case errors.Is(err, broker.ErrClaimTaken):
		l.taken = true
		p.log.Info().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).
			Msg("another delivery holds this record's call now (this worker was silent longer than its claim stands): it makes no further call for it")
	case err == nil:
		l.rev, l.calls, l.pauses = rev, bid.Calls, mark
		l.look = l.look || look
		l.watch = l.watch || watch
	}
}

// noticePause logs a pause of the process the watch saw since the last
// one logged: what the worker's records do about it follows.
func (p *Pool) noticePause() {
	lost := int64(p.pauses.Lost())
	last := p.pauseLogged.Load()
	if lost <= last || !p.pauseLogged.CompareAndSwap(last, lost) {
		return
	}
	// A second or two unscheduled on a loaded machine is no news.
	ev := p.log.Debug()
	if time.Duration(lost-last) >= pauseWarnMin {
		ev = p.log.Warn()
	}
	ev.Dur("did_not_run", time.Duration(lost-last).Round(time.Millisecond)).
		Msg("this process did not run for a while (stopped, suspended, or starved): its records check their claims before any further call, and answers that arrived meanwhile are used")
}

// pauseWarnMin is the least pause noticePause warns of.
const pauseWarnMin = 5 * time.Second

// fenceError ends a session before a call that d may not make.
type fenceError struct {
	// settled is a result of the record stored meanwhile; taken, that
	// another delivery holds the record's call now.
	settled *broker.Result
	taken   bool
}

func (e *fenceError) Error() string {
	if e.settled != nil {
		return "the record's result was stored meanwhile"
	}
	return "another delivery holds the record's call now"
}

// fence runs before every call of a session, once the call may go: the
// call is recorded in d's claim before it is made (the delivery's first
// call is recorded by the claim taken before it, where one is), and a
// delivery that was paused, or whose claim was taken late or over, checks
// its right first. It returns a *retry.NotCalled when no call may go: a
// *fenceError, or the context's error when the pool stops while the store
// does not answer.
func (jr *jobRunner) fence(ctx context.Context, d *delivery, calls int) error {
	p := jr.p
	l := &d.lease
	l.mu.Lock()
	attached, taken, look, watch, mark := l.jr != nil, l.taken, l.look, l.watch, l.pauses
	l.mu.Unlock()
	switch {
	case !attached:
		return nil
	case taken:
		return &retry.NotCalled{Err: &fenceError{taken: true}}
	}
	paused := p.pauses.Lost() != mark
	if calls == 0 && !paused && !look && !watch {
		return nil
	}
	if calls > 0 || paused {
		p.noticePause()
		retaken, err := jr.record(ctx, d, calls+1)
		switch {
		case err != nil:
			return &retry.NotCalled{Err: err}
		case d.claimTaken():
			return &retry.NotCalled{Err: &fenceError{taken: true}}
		}
		look = look || retaken
	}
	if !look && !watch {
		return nil
	}
	l.mu.Lock()
	l.look = false
	l.mu.Unlock()
	// A claim taken late, or over from a silent delivery: a twin may have
	// called and stored its result before it, or the silent one, back,
	// may store what it holds.
	var last *broker.Result
	if _, err := jr.untilAnswered(ctx, "lookup", broker.StreamResults, func(ctx context.Context) (err error) {
		last, _, err = p.b.LastOutcome(ctx, d.job, d.action.Name, d.env.ID)
		return err
	}); err != nil {
		return &retry.NotCalled{Err: err}
	}
	// As lookUp: an ok, or a failure of this replay generation, settles it.
	if last != nil && (last.Status == broker.StatusOK || last.Replays >= d.replays) {
		return &retry.NotCalled{Err: &fenceError{settled: last}}
	}
	return nil
}

// record writes calls, the delivery's calls once the next is made, into
// d's claim (or takes one, for a delivery without), asked again while the
// store does not answer; a claim another delivery holds now marks d's
// lease taken. retaken: the claim was taken anew (none was held, or it had
// vanished). A claim the store refuses (its memory full) lets the call go
// on unrecorded, as one without a claim. err: the pool is stopping.
func (jr *jobRunner) record(ctx context.Context, d *delivery, calls int) (retaken bool, err error) {
	p := jr.p
	l := &d.lease
	l.io.Lock()
	defer l.io.Unlock()
	l.mu.Lock()
	rev, taken := l.rev, l.taken
	l.mu.Unlock()
	if taken {
		return false, nil
	}
	now := p.pauses.Lost()
	bid := jr.bid(d, calls)
	var refused error
	watch := false
	_, err = jr.untilAnswered(ctx, "claim", "KV_"+broker.BucketClaims, func(ctx context.Context) error {
		var err error
		if rev == 0 {
			var c broker.Claimed
			var ok bool
			c, ok, err = p.b.Claim(ctx, bid)
			switch {
			case err == nil && !ok:
				taken = true
			case err == nil:
				rev, retaken, watch = c.Rev, true, c.LapsedCalls > 0
			}
		} else {
			var next uint64
			next, retaken, err = p.b.RenewClaim(ctx, bid, rev)
			switch {
			case errors.Is(err, broker.ErrClaimTaken):
				taken, err = true, nil
			case err == nil:
				rev = next
			}
		}
		if err != nil && !broker.Unanswered(err) {
			refused, err = err, nil
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if refused != nil {
		p.warnClaim(refused)
		return false, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if taken {
		l.taken = true
		return false, nil
	}
	l.rev, l.calls, l.pauses = rev, calls, now
	l.watch = l.watch || watch
	return retaken, nil
}

// asFence is err's *fenceError, nil when it is none.
func asFence(err error) *fenceError {
	var fe *fenceError
	if errors.As(err, &fe) {
		return fe
	}
	return nil
}

// heldSet is the work messages a job's deliveries hold in this pool, by
// stream sequence (jobRunner.hold).
type heldSet struct {
	mu sync.Mutex
	m  map[uint64]*delivery
}

// hold registers d as the delivery of its message handled here, unless
// another is: a message delivered again to the pool that still handles it
// (its AckWait ran out while the process was stopped, or its heartbeats
// were lost) is left to that delivery, whose ack or nak settles it. A
// twin in another process is met by the claim (twin).
func (jr *jobRunner) hold(d *delivery) bool {
	if d.seq == 0 {
		return true
	}
	h := &jr.held
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[uint64]*delivery{}
	}
	if _, ok := h.m[d.seq]; ok {
		return false
	}
	h.m[d.seq] = d
	d.heldIn = h
	return true
}

// size is how many messages are held.
func (h *heldSet) size() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m)
}

// unhold ends d's hold on its message (jobRunner.hold).
func (d *delivery) unhold() {
	h := d.heldIn
	if h == nil {
		return
	}
	h.mu.Lock()
	if h.m[d.seq] == d {
		delete(h.m, d.seq)
	}
	h.mu.Unlock()
	d.heldIn = nil
}

// takeOver counts the calls of the delivery whose lapsed claim d took
// over (broker.Claimed.LapsedCalls): its holder recorded them in its claim
// before it made them, then went silent (stopped, cut off, killed), and no
// state of the record holds them. They are the record's attempts (its
// calls, max_calls and accounts count them) but spend none of its
// deliveries: a record in flight on a worker that another record killed
// is not to blame. Its losses are bounded by poison.go, and validate's
// bound for processes that die mid-call counts them (retry.Bound.Killed).
// Should the silent worker come back, it finds its claim taken and makes
// no further call (fence); an answer it holds is stored.
func (jr *jobRunner) takeOver(d *delivery, calls int) {
	p := jr.p
	now := p.cfg.Clock.Now()
	prior := len(d.prior())
	lost := make([]retry.Attempt, calls)
	for i := range lost {
		lost[i] = retry.Attempt{N: prior + i + 1, Delivery: d.delivery(), Class: retry.ClassUnknown, At: now,
			Error: "LostCall: made by a delivery whose worker went silent before it said how the call ended (stopped, cut off or killed)"}
	}
	st := d.nextState(lost)
	if d.saved == nil {
		// The state as read stays the base of the record's next state's
		// write: the lapsed calls are this delivery's to add
		// (worker/statemerge.go).
		d.saved = cmp.Or(d.state, &broker.RecordState{Replays: d.replays})
	}
	d.state = st
	d.lease.mu.Lock()
	d.lease.watch = true
	d.lease.mu.Unlock()
	p.log.Info().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Int("calls", calls).
		Msg("took over the claim of a delivery silent longer than it stands: the calls it recorded count as the record's")
}
