package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Ledger is how a job's budget (max_cost) is shared out among the workers
// that spend it, kept in the job's state entry (BucketJobState) beside its
// Cost, and changed only with compare-and-set.
//
// A worker reserves each call's worst case before it sends it, out of a
// lease: a slice of the budget it took from the job's entry, which it
// renews about every second, adding what its calls really cost to Cost and
// handing back what it does not need. So Cost + what the leases hold + what
// is in doubt never passes MaxCost when a lease is taken: every call that
// goes out has its worst case set aside somewhere. A lease not renewed for
// LeaseTTL (its worker was killed, or frozen) is taken back by the next
// worker that writes the ledger, into Doubt: that worker may have spent any
// of it, so it stays counted against the budget — until the worker comes
// back and says what it spent, or for good.
type Ledger struct {
	// Leases are the workers' leases, by holder (a pool's id).
	Leases map[string]Lease `json:"leases,omitempty"`
	// Doubt is the leases taken back, by DoubtKey: what they held is money
	// their holders may have spent on calls whose answers nobody saw.
	Doubt map[string]Lease `json:"doubt,omitempty"`
	// Wanted is when a worker last found too little budget left for a call
	// while leases held some: the holders hand back what they hold beyond
	// their calls under way at once, and take no more than a call needs.
	Wanted time.Time `json:"budget_wanted,omitzero"`
	// Reached is set when the budget stopped the job: some call's worst
	// case no longer fit in what was left.
	Reached bool `json:"budget_reached,omitempty"`
	// TenantCap is the tenant's budget (TenantBudget) when it stopped the
	// job: a call's worst case no longer fit in what the tenant had left.
	TenantCap float64 `json:"tenant_budget_reached,omitempty"`
}

// Lease is one worker's share of a job's budget.
type Lease struct {
	// ID tells this lease from an earlier one of the same holder that was
	// taken back (DoubtKey).
	ID string `json:"id"`
	// Amount is what the lease holds, in dollars: the worst cases of the
	// holder's calls under way, and what it keeps for its next ones.
	Amount float64 `json:"amount"`
	// Reserved is the part of Amount its calls under way had reserved at
	// the last renewal (what `jetpool status` shows as held for calls).
	Reserved float64 `json:"reserved,omitempty"`
	// Reported is what the holder's calls have cost in all, as far as it
	// has added it to the job's Cost: a write adds what it spent beyond
	// this, so one that landed although its answer was lost is not
	// counted twice.
	Reported float64 `json:"reported,omitempty"`
	// Renewed is when its holder last wrote it, by the holder's clock.
	Renewed time.Time `json:"renewed"`
}

// LeaseTTL is how long a lease stands without a renewal before another
// worker takes it back into Ledger.Doubt. A holder renews about every
// second while it holds one; the rest allows for a slow store, a long GC
// pause, and clocks a few seconds apart.
const LeaseTTL = 30 * time.Second

// DoubtKey is the Ledger.Doubt key of a lease taken back.
func DoubtKey(holder, leaseID string) string { return holder + "/" + leaseID }

// Held is what the leases hold.
func (l *Ledger) Held() float64 {
	var s float64
	for _, x := range l.Leases {
		s += x.Amount
	}
	return s
}

// Reserved is what the leases held for calls under way at their last
// renewal.
func (l *Ledger) Reserved() float64 {
	var s float64
	for _, x := range l.Leases {
		s += x.Reserved
	}
	return s
}

// InDoubt is what workers that stopped renewing their leases held: the
// most they may have spent beyond Cost.
func (l *Ledger) InDoubt() float64 {
	var s float64
	for _, x := range l.Doubt {
		s += x.Amount
	}
	return s
}

// Reclaim takes back every lease not renewed for LeaseTTL at now into
// Doubt; it reports whether it took any. The maps are copied first: a Job
// handed around (a watch's, a runner's) is never changed in place.
func (l *Ledger) Reclaim(now time.Time) bool {
	var expired []string
	for h, x := range l.Leases {
		if now.Sub(x.Renewed) > LeaseTTL {
			expired = append(expired, h)
		}
	}
	if len(expired) == 0 {
		return false
	}
	l.own()
	for _, h := range expired {
		x := l.Leases[h]
		if x.Amount > 0 {
			key := DoubtKey(h, x.ID)
			if d, ok := l.Doubt[key]; ok {
				x.Amount += d.Amount
			}
			l.Doubt[key] = x
		}
		delete(l.Leases, h)
	}
	return true
}

// own makes the ledger's maps its own copies, so that changing them leaves
// every other Job that shared them as it was.
func (l *Ledger) own() {
	leases := make(map[string]Lease, len(l.Leases)+1)
	for k, v := range l.Leases {
		leases[k] = v
	}
	doubt := make(map[string]Lease, len(l.Doubt)+1)
	for k, v := range l.Doubt {
		doubt[k] = v
	}
	l.Leases, l.Doubt = leases, doubt
}

// SetLease writes holder's lease. One of amount 0 stays, for what it
// Reported, until it expires.
func (l *Ledger) SetLease(holder string, x Lease) {
	l.own()
	l.Leases[holder] = x
}

// Resolve removes the doubt a lease taken back left (its holder came back
// and says what it spent).
func (l *Ledger) Resolve(key string) {
	if _, ok := l.Doubt[key]; ok {
		l.own()
		delete(l.Doubt, key)
	}
}

// Committed is what the job's budget is spoken for: spent, held by
// leases, and in doubt.
func (j *Job) Committed() float64 { return j.Cost + j.Ledger.Held() + j.Ledger.InDoubt() }

// Left is what of the budget no lease holds, nobody has spent and nothing
// puts in doubt (negative once the calls cost more than their worst cases
// said); 0 when the job has no budget.
func (j *Job) Left() float64 {
	if j.MaxCost <= 0 {
		return 0
	}
	return j.MaxCost - j.Committed()
}

// OverBudget reports whether the job's budget stopped it: a call's worst
// case no longer fit in what was left (Ledger.Reached), or its spend
// reached max_cost; or its tenant's budget did (Ledger.TenantCap).
func (j *Job) OverBudget() bool {
	return j.Ledger.TenantCap > 0 || j.MaxCost > 0 && (j.Ledger.Reached || j.Cost+j.Ledger.InDoubt() >= j.MaxCost)
}

// WithState is j with the state fields of s (Status, Reason, MaxCost,
// Cost, Replay, Finished, the ledger): a job merged with a state entry
// UpdateState returned.
func (j *Job) WithState(s *Job) *Job {
	c := *j
	c.apply(s.state())
	return &c
}

// UpdateState is UpdateJob on the job's state entry alone (Status, Reason,
// MaxCost, Cost, Replay, Finished, the ledger): it reads and decodes no
// workflow, so a worker's ledger writes stay cheap however large the job's
// workflow. The Job fn sees, and the one returned, carry the state fields
// and ID only; merge them with WithState.
func (b *Broker) UpdateState(ctx context.Context, id string, fn func(*Job) bool) (*Job, error) {
	states, err := b.KV(ctx, BucketJobState)
	if err != nil {
		return nil, err
	}
	for range updateTries {
		st, rev, err := b.getState(ctx, id)
		if err != nil {
			return nil, err
		}
		j := &Job{ID: id}
		j.apply(st)
		if !fn(j) {
			return j, nil
		}
		if rev == 0 {
			// A job whose state entry does not exist yet: the whole job's
			// state is UpdateJob's to create from its JETPOOL_JOBS entry.
			return b.UpdateJob(ctx, id, fn)
		}
		j.Updated = time.Now().UTC()
		data, err := json.Marshal(j.state())
		if err != nil {
			return nil, err
		}
		if _, err = states.Update(ctx, id, data, rev); err == nil {
			return j, nil
		}
		if !IsConflict(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("job %s: too many concurrent updates", id)
}
