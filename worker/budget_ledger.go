package worker

import (
	"time"

	"github.com/jetpool/jetpool/broker"
)

// ledgerWrite is what budget.write brings to the job's ledger.
type ledgerWrite struct {
	now                             time.Time
	worst, need, want, keep, frozen float64
	spent, reserved, reportedAck    float64
	// tenant is what the tenant's ledger granted before (tenant.go); nil
	// when the tenant has no budget.
	tenant *tenantGrant
}

// ledgerChange is budget.write's change to the job's ledger, made again on
// every conflict: the worker's lease renewed or its room asked for, and
// what it was granted — never more than the tenant's ledger granted.
func (b *budget) ledgerChange(j *broker.Job, w ledgerWrite) (out writeOutcome, amount float64) {
	now, worst, want, keep, frozen := w.now, w.worst, w.want, w.keep, w.frozen
	spent, reserved, reportedAck := w.spent, w.reserved, w.reportedAck
	l := &j.Ledger
	l.Reclaim(now)
	cur, mine := l.Leases[b.holder]
	if !mine || cur.ID != b.id {
		// Taken back while this worker was silent (frozen, cut off from
		// the store): what it spent since is known here, so the doubt
		// its lease left goes.
		cur = broker.Lease{ID: b.id, Reported: reportedAck}
		if d, ok := l.Doubt[broker.DoubtKey(b.holder, b.id)]; ok {
			l.Resolve(broker.DoubtKey(b.holder, b.id))
			cur = d
		}
		mine = false
	}
	j.Cost += max(spent-cur.Reported, 0)
	if j.MaxCost <= 0 && w.tenant == nil {
		l.SetLease(b.holder, broker.Lease{ID: b.id, Reported: spent, Renewed: now})
		return writeOutcome{}, 0
	}
	// Room beyond what the lease keeps in any case: the calls under
	// way, what a renewal keeps, and what a request for room had (its
	// free part, asked for again with the rest).
	hold := reserved + keep
	switch {
	case worst <= 0:
	case j.MaxCost <= 0:
		// Only the tenant's budget bounds the job: what the call asks.
		amount = want + frozen
		out.granted = true
	default:
		others := l.Held()
		if mine {
			others -= cur.Amount
		}
		room := j.MaxCost - j.Cost - l.InDoubt() - others - hold - frozen
		out, amount = b.jobRoom(j, w, room)
	}
	out, amount = w.tenant.bound(j, out, amount, hold)
	amount = snap(amount + hold)
	l.SetLease(b.holder, broker.Lease{ID: b.id, Amount: amount, Reserved: snap(reserved), Reported: spent, Renewed: now})
	return out, amount
}

// jobRoom grants a call room out of what the job's budget has left, room,
// beyond what the lease keeps in any case.
func (b *budget) jobRoom(j *broker.Job, w ledgerWrite, room float64) (out writeOutcome, amount float64) {
	l := &j.Ledger
	switch {
	case room > dust:
		// Some budget is left: the call goes. It takes what it needs,
		// and about a period's worth more, but never more than half of
		// what is left beyond it (the other workers need some too). Its
		// need may pass what is left: then nothing is left for the next
		// call, so the spend passes max_cost by at most this one call's
		// worst case.
		amount = w.frozen + w.need + min(w.want-w.need, max(room-w.need, 0)/2)
		out.granted = true
	case j.MaxCost-j.Cost-l.InDoubt() <= dust:
		// Spent (or in doubt) to the last cent: the budget is reached.
		l.Reached = true
		out.stop = budgetReached(j)
		if j.Status != broker.JobFailed {
			j.Status = broker.JobFailed
			j.Reason = out.stop.Message
		}
	default:
		// Calls under way, here or elsewhere, hold what is left: the
		// others hand back what they keep, and this call waits for them
		// to settle.
		l.Wanted = w.now
	}
	return out, amount
}
