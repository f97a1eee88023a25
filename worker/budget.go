package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// LeaseRenewEvery is how often a worker renews its lease of a job's budget
// (broker.Ledger) while it holds one, adding what its calls cost to the
// job's Cost: `jetpool status` reads the job's cost from there in O(1),
// at most this much behind. One compare-and-set per job and worker a
// period, and one more each time it needs more budget than its lease has.
const LeaseRenewEvery = time.Second

// budgetPoll is how often a call waiting for budget looks again when
// nothing it watches changed (a lease of a worker that is gone expires).
const budgetPoll = time.Second

// wantedFor is how long after a worker found too little budget for a call
// the others keep no budget beyond their calls under way and take no more
// than a call needs.
const wantedFor = 3 * LeaseRenewEvery

// budgetWriteTimeout bounds one write of the ledger.
const budgetWriteTimeout = 5 * time.Second

// budget is this pool's side of a job's ledger (broker.Ledger): its lease
// of the job's max_cost, out of which every call reserves its worst case
// before it is sent (reserve) and which every answer settles to what it
// really cost (reservation.settle). Calls reserve from the lease in memory;
// the lease is taken, grown, renewed and handed back with compare-and-set
// on the job's state entry, which all workers share. Each call that goes
// out has its worst case set aside, here or in the job's entry, and goes
// only while what is spent and set aside is below max_cost: so the spend
// passes it by at most the worst case of the one call that took what was
// left. A call that finds calls under way holding all that is left waits
// for them to settle; once the spend itself reaches max_cost it ends its
// record with class and reason budget and fails the job.
//
// A job without max_cost has no lease: the spend alone goes to its Cost.
type budget struct {
	jr     *jobRunner
	holder string // this budget's key in the ledger: unique to the pool and the job runner
	id     string // its lease's id

	mu       sync.Mutex
	lease    float64 // the lease's amount as last written
	free     float64 // of the lease, what no call has reserved (below 0: calls cost more than their worst cases)
	reserved float64 // the worst cases of the calls under way
	spent    float64 // what this budget's calls cost, in all
	reported float64 // of spent, what the job's Cost holds (as of the last write)
	taken    float64 // reserved since the last write: about what the next period takes
	waiting  int     // reservations waiting for budget
	wrote    time.Time
	changed  chan struct{}           // closed (and replaced) when what a waiting reservation reads changes
	timer    *time.Timer             // armed while the lease or unreported spend needs a write
	closed   bool                    // Close: nothing kept beyond calls under way, every settle written at once
	held     map[string]*reservation // batch-mode records' reservations, by batchKey

	// This holder's lease in the tenant's ledger (tenant.go): its amount
	// and spend as last written, and when the tenant last wanted budget.
	tenantLease, tenantReported float64
	tenantWanted                time.Time

	writing sync.Mutex   // one ledger write at a time
	warned  atomic.Int64 // unix ns of the last warning of a write that failed
}

// budget is jr's budget, made on first use.
func (jr *jobRunner) budget() *budget {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if jr.costs == nil {
		jr.costs = &budget{jr: jr, holder: fmt.Sprintf("%s/%08x", jr.p.id, rand.Uint32()),
			id: fmt.Sprintf("%08x", rand.Uint32()), changed: make(chan struct{})}
	}
	return jr.costs
}

// reservation is one call's worst case, set aside until its answer
// settles it.
type reservation struct {
	b     *budget
	worst float64
	done  bool
}

// budgetStop is the error of a call whose worst case no longer fits the
// job's budget: it ends its record with class and reason budget.
type budgetStop struct{ err *retry.Error }

func (s *budgetStop) Error() string { return s.err.Error() }

// reserve sets aside worst for a call before it is sent. It waits while
// calls under way hold all that is left of the budget (they may leave some
// when they settle); it returns a *budgetStop once the spend has reached
// max_cost (the job is failed then), or ctx's error.
func (b *budget) reserve(ctx context.Context, worst float64) (*reservation, error) {
	if worst <= 0 || !b.jr.capped() {
		return &reservation{b: b}, nil // nothing to set aside; its cost still counts
	}
	if r := b.fromLease(worst); r != nil {
		return r, nil
	}
	b.mu.Lock()
	b.waiting++
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.waiting--
		b.mu.Unlock()
	}()
	poll := time.NewTimer(budgetPoll)
	defer poll.Stop()
	for {
		if r := b.fromLease(worst); r != nil {
			return r, nil
		}
		b.mu.Lock()
		changed := b.changed
		b.mu.Unlock()
		if j := b.jr.current(); j.Status == broker.JobFailed && j.OverBudget() {
			return nil, &budgetStop{err: budgetError(j)}
		}
		out, err := b.write(ctx, worst)
		switch {
		case err == nil && out.stop != nil:
			return nil, &budgetStop{err: out.stop}
		case err == nil && out.granted:
			continue
		case err != nil && ctx.Err() == nil:
			b.warn(err, "the job's budget could not be read or written; the call waits")
		}
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(budgetPoll)
		select {
		case <-changed:
		case <-poll.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// fromLease reserves worst out of what the lease has free, nil when it
// has too little.
func (b *budget) fromLease(worst float64) *reservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free+dust < worst {
		return nil
	}
	b.free -= worst
	b.reserved += worst
	b.taken += worst
	b.armLocked()
	return &reservation{b: b, worst: worst}
}

// reserveCall sets aside the worst case of a call of action a with
// request req (reserve); nil, and nothing computed, for a job without a
// budget.
func (jr *jobRunner) reserveCall(ctx context.Context, a *workflow.Action, req provider.Request, batch bool) (*reservation, error) {
	if !jr.capped() {
		return nil, nil
	}
	return jr.budget().reserve(ctx, jr.worstCase(a, req, batch))
}

// settle ends r with what its call cost (0: no answer, nothing billed):
// what was set aside and not spent goes back to the lease.
func (r *reservation) settle(cost float64) {
	if r == nil || r.done {
		return
	}
	r.done = true
	r.b.settle(r.worst, cost)
}

// settle adds cost to what is spent, and gives back to the lease what of
// worst, set aside for the call, it did not spend.
func (b *budget) settle(worst, cost float64) {
	if worst == 0 && cost <= 0 {
		return // nothing set aside, nothing spent (an error's, a job without a budget)
	}
	b.mu.Lock()
	b.reserved = snap(b.reserved - worst)
	b.free = snap(b.free + worst - cost)
	b.spent += max(cost, 0)
	closed := b.closed
	b.wakeLocked()
	if !closed {
		b.armLocked()
	}
	b.mu.Unlock()
	if closed && cost > 0 {
		// Nothing renews a closed budget: its last spend is written now.
		b.flush(context.Background())
	}
}

// wakeLocked wakes the reservations waiting for budget; b.mu is held.
// With none waiting there is nobody to wake (a waiting reservation counts
// itself in waiting before it takes the channel).
func (b *budget) wakeLocked() {
	if b.waiting == 0 {
		return
	}
	close(b.changed)
	b.changed = make(chan struct{})
}

// armLocked arms the renewal when the lease holds budget or spend waits to
// be written; b.mu is held.
func (b *budget) armLocked() {
	if b.timer != nil || b.closed {
		return
	}
	if b.lease <= 0 && b.tenantLease <= 0 && b.reserved <= 0 && b.spent <= b.reported {
		return
	}
	b.timer = time.AfterFunc(LeaseRenewEvery, b.renew)
}

// renew writes the lease (the calls' spend, what it keeps) and arms the
// next renewal while one is needed.
func (b *budget) renew() {
	b.mu.Lock()
	b.timer = nil
	b.mu.Unlock()
	if _, err := b.write(context.Background(), 0); err != nil {
		b.warn(err, "the job's spend and budget lease not written; kept for the next renewal")
	}
	b.mu.Lock()
	b.armLocked()
	b.mu.Unlock()
}

// renewSoon renews now, unless a renewal is under way or armed sooner.
func (b *budget) renewSoon() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.timer != nil {
		b.timer.Reset(0)
		return
	}
	if !b.closed {
		b.timer = time.AfterFunc(0, b.renew)
	}
}

// seen is told of every version of the job's entry the watch passes on:
// a waiting reservation looks again, and when another worker wants budget,
// or the job is no longer running, this one hands back what its lease
// keeps beyond its calls under way.
func (b *budget) seen(j *broker.Job) {
	b.mu.Lock()
	b.wakeLocked()
	// Another worker wants budget, or the job ended (its last calls
	// settle later): what the lease keeps beyond calls under way goes back.
	give := j.MaxCost > 0 && b.free > 0 && b.waiting == 0 &&
		(j.Ledger.Wanted.After(b.wrote) || jobEnded(j))
	b.mu.Unlock()
	if give {
		b.renewSoon()
	}
}

// flush writes what is spent and not written yet, now.
func (b *budget) flush(ctx context.Context) {
	if _, err := b.write(ctx, 0); err != nil {
		b.warn(err, "the job's spend not written; kept for the next renewal")
		b.mu.Lock()
		b.armLocked()
		b.mu.Unlock()
	}
}

// Close hands back everything the lease keeps beyond calls under way and
// writes the spend; calls that settle after it write theirs at once.
func (b *budget) Close(ctx context.Context) {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.mu.Unlock()
	b.flush(ctx)
}

// writeOutcome is what one write of the ledger did for a reservation.
type writeOutcome struct {
	granted bool         // the lease now has room for the call
	stop    *retry.Error // the budget is reached: the call must not go
}

// write writes this budget's lease in the job's entry: the spend not yet
// in the job's Cost added to it, the lease set to the calls under way plus
// what it keeps, leases of workers gone quiet taken back. With worst > 0
// it also asks for room for a call of that worst case: it grants it while
// any of the budget is left, or asks the others to hand back what they
// keep, or — once the spend has reached max_cost — marks the budget
// reached and fails the job.
//
// Every amount written is absolute (the lease) or relative to what the
// entry says was reported (the spend), so a write that landed although
// its answer was lost is not counted twice by the next.
func (b *budget) write(ctx context.Context, worst float64) (writeOutcome, error) {
	b.writing.Lock()
	defer b.writing.Unlock()
	now := time.Now()
	j := b.jr.current()
	b.mu.Lock()
	wanted := now.Sub(j.Ledger.Wanted) < wantedFor || now.Sub(b.tenantWanted) < wantedFor
	if worst > 0 && b.free+dust >= worst {
		b.mu.Unlock()
		return writeOutcome{granted: true}, nil // the write before this one made room
	}
	// What the lease keeps beyond the calls under way: for a renewal,
	// about what the last period reserved (nothing while another worker
	// wants budget, or once closed); a request for room asks its free
	// part again with the rest.
	var keep, frozen, want, need float64
	if worst > 0 {
		frozen = max(b.free, 0)
		need = worst - frozen
		want = need
		if !wanted {
			want += max(b.taken, worst*float64(b.waiting-1))
		}
	} else if !b.closed && !wanted && !jobEnded(j) {
		keep = min(max(b.free, 0), b.taken)
		frozen = max(b.free, 0) - keep
	} else {
		frozen = max(b.free, 0)
	}
	b.free -= frozen
	spent, reserved, reportedAck, lease := b.spent, b.reserved, b.reported, b.lease
	idle := reserved <= 0 && keep <= 0 && worst <= 0 && frozen <= 0 && b.lease <= 0 && b.tenantLease <= 0
	b.mu.Unlock()
	if idle && spent <= reportedAck {
		b.mu.Lock()
		b.free += frozen
		b.mu.Unlock()
		return writeOutcome{}, nil
	}

	var out writeOutcome
	var amount float64
	wctx, cancel := context.WithTimeout(ctx, budgetWriteTimeout)
	defer cancel()
	lw := ledgerWrite{now: now, worst: worst, need: need, want: want,
		keep: keep, frozen: frozen, spent: spent, reserved: reserved, reportedAck: reportedAck}
	if limit := b.jr.p.tenant.get(); limit > 0 {
		// The tenant's ledger first: the job's lease grows only within
		// what it granted (tenant.go).
		tg, err := b.tenantWrite(wctx, limit, lw, lease)
		if err != nil {
			b.mu.Lock()
			b.free += frozen
			b.mu.Unlock()
			return writeOutcome{}, err
		}
		lw.tenant = tg
	}
	st, err := b.jr.p.b.UpdateState(wctx, b.jr.id, func(j *broker.Job) bool {
		out, amount = b.ledgerChange(j, lw)
		return true
	})
	b.mu.Lock()
	if err != nil {
		b.free += frozen
		b.mu.Unlock()
		return writeOutcome{}, err
	}
	b.jr.mergeState(st)
	b.reported = max(b.reported, spent)
	b.lease = amount
	// The lease holds the calls under way, what is kept and what was
	// granted; what settled meanwhile is in spent or free already.
	b.free = snap(b.lease - b.reserved - (b.spent - b.reported))
	b.taken = 0
	b.wrote = now
	b.wakeLocked()
	shrink := b.tenantLease > amount+dust
	b.mu.Unlock()
	if shrink {
		// The job's lease is written: what the tenant's held beyond it
		// goes back (a failed shrink is done by the next renewal).
		if err := b.tenantShrink(wctx, amount); err != nil {
			b.warn(err, "the tenant's budget lease not handed back; kept for the next renewal")
		}
	}
	return out, nil
}

// snap is x, or 0 when x is only what adding and taking away the same
// amounts in floating point leaves (a picodollar).
func snap(x float64) float64 {
	if math.Abs(x) < 1e-12 {
		return 0
	}
	return x
}

// dust is how much a sum of dollars in floating point may be off and
// still be taken for what it should be (a nanodollar): $0.97 spent in
// hundredths leaves room for a $0.03 call of $1, and $1.00 spent so is
// all of it.
const dust = 1e-9

// jobEnded: the job failed, was cancelled or completed; its last calls may
// still settle.
func jobEnded(j *broker.Job) bool { return j.Ended() }

// warn logs a failed write of the ledger, at most once a minute.
func (b *budget) warn(err error, msg string) {
	if minuteSince(&b.warned) {
		b.jr.p.log.Warn().Str("job", b.jr.id).Err(err).Msg(msg)
	}
}

// budgetReached is the job's reason when its spend reached its budget.
func budgetReached(j *broker.Job) *retry.Error {
	return &retry.Error{Class: retry.ClassBudget, TypeName: "BudgetError",
		Message: fmt.Sprintf("max_cost %s reached: %s spent; records not called were dead-lettered with reason budget: jetpool retry --job %s --max-cost N runs them",
			usd(j.MaxCost), usd(j.Cost+j.Ledger.InDoubt()), j.ID)}
}

// budgetError ends a record that could not be called for its job's
// budget.
func budgetError(j *broker.Job) *retry.Error {
	if j.Ledger.TenantCap > 0 {
		return &retry.Error{Class: retry.ClassBudget, TypeName: "BudgetError",
			Message: fmt.Sprintf("tenant budget %s reached: no call made; raise it with jetpool tenant budget N, then jetpool retry --job %s --reason budget",
				usd(j.Ledger.TenantCap), j.ID)}
	}
	return &retry.Error{Class: retry.ClassBudget, TypeName: "BudgetError",
		Message: fmt.Sprintf("max_cost %s reached (%s spent): no call made; raise it with jetpool retry --job %s --max-cost N",
			usd(j.MaxCost), usd(j.Cost+j.Ledger.InDoubt()), j.ID)}
}

// usd renders dollars as the summary does: cents above a dollar, four
// decimals below.
func usd(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}

// asBudgetStop is err's *budgetStop, nil when it has none.
func asBudgetStop(err error) *budgetStop {
	var s *budgetStop
	if errors.As(err, &s) {
		return s
	}
	return nil
}

// budgetEnded reads a session that ended without a call for the job's
// budget: reached (the record ends with class and reason budget, its
// earlier calls kept), or the wait for budget cut short by a stop (the
// record is handed back). It reports whether o was either.
func budgetEnded(run *sessionEnd, o retry.Outcome) bool {
	if s := asBudgetStop(o.NotCalled); s != nil {
		run.err, run.reason = s.err, retry.ReasonBudget
		return true
	}
	if errors.Is(o.NotCalled, context.Canceled) || errors.Is(o.NotCalled, context.DeadlineExceeded) {
		run.canceled = true
		if o.Err != nil {
			run.err = o.Err
		}
		return true
	}
	return false
}

// batchKey names a batch-mode record's reservation (hold, release).
func batchKey(action, record string, replays int) string {
	return fmt.Sprintf("%s\x00%s\x00%d", action, record, replays)
}

// hold keeps a batch-mode record's reservation until its batch answers.
func (b *budget) hold(key string, r *reservation) {
	b.mu.Lock()
	if b.held == nil {
		b.held = map[string]*reservation{}
	}
	old := b.held[key]
	b.held[key] = r
	b.mu.Unlock()
	if old != r {
		old.settle(0) // a record enqueued again (handed back, delivered anew)
	}
}

// release returns the reservation hold kept under key, nil when there is
// none (its batch was submitted by another worker).
func (b *budget) release(key string) *reservation {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.held[key]
	delete(b.held, key)
	return r
}
