package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// A tenant's budget (broker.TenantBudget) caps what all of its jobs spend
// together. Every write of a job's lease (budget.write) first takes the
// same lease, under the same holder, from the tenant's ledger with its own
// compare-and-set, and the job's lease never grows past what the tenant's
// granted: so what the tenant's ledger holds of a holder is always at
// least what the holder may spend, and the tenant's spend passes its
// budget by at most the one call that took what was left, as a job's
// does. The two keys are in two buckets: no one write covers both, so
// the order keeps the bound — a lease grows in the tenant's ledger before
// the job's, and shrinks there after.

// tenantRetry is how long a pool waits before it watches its tenant's
// budget again after the watch failed (a bucket not made yet by an older
// dispatcher, a store that does not answer).
const tenantRetry = 5 * time.Second

// tenantLoadTimeout bounds the first read of the tenant's budget at a
// pool's start (a store that does not answer it leaves the watch to).
const tenantLoadTimeout = 2 * time.Second

// tenantCap is a pool's copy of its tenant's budget, in dollars (0: none),
// kept by watchTenant.
type tenantCap struct{ bits atomic.Uint64 }

func (c *tenantCap) get() float64  { return math.Float64frombits(c.bits.Load()) }
func (c *tenantCap) set(v float64) { c.bits.Store(math.Float64bits(v)) }

// loadTenant reads the tenant's budget once, so that the pool's first
// calls reserve against it; the watch keeps it afterwards.
func (p *Pool) loadTenant(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, tenantLoadTimeout)
	defer cancel()
	if tb, err := p.b.TenantBudget(ctx); err == nil {
		p.tenant.set(tb.MaxCost)
	}
}

// watchTenant keeps p.tenant as the tenant's budget until ctx ends.
func (p *Pool) watchTenant(ctx context.Context) {
	var warned atomic.Int64
	for {
		err := p.watchTenantOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if minuteSince(&warned) {
			p.log.Warn().Err(err).Msg("not watching the tenant's budget; watching it again in a few seconds")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(tenantRetry):
		}
	}
}

func (p *Pool) watchTenantOnce(ctx context.Context) error {
	kv, err := p.b.KV(ctx, broker.BucketTenant)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, broker.KeyTenantBudget)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for e := range w.Updates() {
		if e == nil {
			continue // the initial values are all in
		}
		if e.Operation() != jetstream.KeyValuePut {
			p.tenant.set(0)
			continue
		}
		var tb broker.TenantBudget
		if err := broker.DecodeTenantBudget(e.Value(), &tb); err != nil {
			// A budget nobody can read stops every call rather than
			// letting them go uncapped.
			p.log.Error().Err(err).Msg("the tenant's budget cannot be read: calls wait until it is set again")
			tb.MaxCost = math.SmallestNonzeroFloat64
		}
		p.tenant.set(tb.MaxCost)
	}
	return errors.New("the watch of the tenant's budget ended")
}

// capped reports whether calls of the job reserve their worst cases: it
// has a max_cost, or its tenant a budget.
func (jr *jobRunner) capped() bool {
	return jr.current().MaxCost > 0 || jr.p.tenant.get() > 0
}

// tenantGrant is what one write of a holder's lease in the tenant's
// ledger did.
type tenantGrant struct {
	cap     float64      // the tenant's budget
	granted bool         // room for the call asked for
	stop    *retry.Error // the tenant's budget is spent: the call must not go
	amount  float64      // the holder's lease there now, what the job's may hold at most
}

// tenantWrite writes this budget's lease in the tenant's ledger before the
// job's: the spend not yet in the tenant's Cost added to it, the lease set
// to the calls under way plus what it keeps (never below floor, the job's
// lease as last written, which its calls may still spend), and with a
// call's worst case asked, room granted as the job's ledger grants it.
func (b *budget) tenantWrite(ctx context.Context, limit float64, w ledgerWrite, floor float64) (*tenantGrant, error) {
	b.mu.Lock()
	reported := b.tenantReported
	b.mu.Unlock()
	var g tenantGrant
	t, err := b.jr.p.b.UpdateTenantLedger(ctx, func(t *broker.TenantLedger) bool {
		g = b.tenantChange(t, limit, w, floor, reported)
		return true
	})
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.tenantLease, b.tenantReported, b.tenantWanted = g.amount, max(b.tenantReported, w.spent), t.Wanted
	b.mu.Unlock()
	return &g, nil
}

// tenantChange is tenantWrite's change, made again on every conflict.
func (b *budget) tenantChange(t *broker.TenantLedger, limit float64, w ledgerWrite, floor, reported float64) tenantGrant {
	g := tenantGrant{cap: limit}
	l := &t.Ledger
	l.Reclaim(w.now)
	key := broker.DoubtKey(b.holder, b.id)
	cur, mine := l.Leases[b.holder]
	if !mine || cur.ID != b.id {
		cur = broker.Lease{ID: b.id, Reported: reported}
		if d, ok := l.Doubt[key]; ok {
			l.Resolve(key) // back after a freeze: what it spent is known now
			cur = d
		}
		mine = false
	}
	t.Cost += max(w.spent-cur.Reported, 0)
	others := l.Held()
	if mine {
		others -= cur.Amount
	}
	hold := w.reserved + w.keep
	var amount float64
	if w.worst > 0 {
		room := limit - t.Cost - l.InDoubt() - others - hold - w.frozen
		switch {
		case room > dust:
			amount = w.frozen + w.need + min(w.want-w.need, max(room-w.need, 0)/2)
			g.granted = true
		case limit-t.Cost-l.InDoubt() <= dust:
			g.stop = tenantReached(limit, t.Cost+l.InDoubt())
		default:
			l.Wanted = w.now
		}
	}
	g.amount = snap(max(amount+hold, floor))
	l.SetLease(b.holder, broker.Lease{ID: b.id, Amount: g.amount, Reserved: snap(w.reserved), Reported: w.spent, Renewed: w.now})
	return g
}

// bound holds a job's grant (amount beyond hold) to what the tenant's
// ledger granted; with g nil (no tenant budget) out and amount are as
// the job's ledger made them. A tenant whose budget is spent fails the
// job, as its own max_cost would.
func (g *tenantGrant) bound(j *broker.Job, out writeOutcome, amount, hold float64) (writeOutcome, float64) {
	if g == nil || out.stop != nil {
		return out, amount
	}
	switch {
	case g.stop != nil:
		j.Ledger.TenantCap = g.cap
		if j.Status != broker.JobFailed {
			j.Status = broker.JobFailed
			j.Reason = g.stop.Message
		}
		return writeOutcome{stop: g.stop}, 0
	case out.granted && !g.granted:
		return writeOutcome{}, 0 // the tenant's room is held by calls under way: wait
	}
	return out, max(min(amount, g.amount-hold), 0)
}

// tenantShrink hands back to the tenant's ledger what its lease of this
// holder holds beyond to, the job's lease just written: a lease shrinks
// there only once the job's has.
func (b *budget) tenantShrink(ctx context.Context, to float64) error {
	_, err := b.jr.p.b.UpdateTenantLedger(ctx, func(t *broker.TenantLedger) bool {
		cur, ok := t.Leases[b.holder]
		if !ok || cur.ID != b.id || cur.Amount <= to+dust {
			return false
		}
		cur.Amount, cur.Reserved = to, min(cur.Reserved, to)
		cur.Renewed = time.Now()
		t.SetLease(b.holder, cur)
		return true
	})
	if err == nil {
		b.mu.Lock()
		b.tenantLease = to
		b.mu.Unlock()
	}
	return err
}

// tenantReached is the reason of a job stopped by its tenant's budget.
func tenantReached(limit, spent float64) *retry.Error {
	return &retry.Error{Class: retry.ClassBudget, TypeName: "BudgetError",
		Message: fmt.Sprintf("tenant budget %s reached: %s spent by the tenant's jobs; records not called were dead-lettered with reason budget: jetpool tenant budget N raises it, then jetpool retry --job JOB --reason budget runs them",
			usd(limit), usd(spent))}
}
