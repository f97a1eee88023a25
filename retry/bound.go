package retry

import "time"

// Action is what, beyond its Policy, decides how many calls one record of
// an action may cost and for how long: the repair rounds of an expectation,
// provider batch rounds, max_calls, and the provider's caps on a
// Retry-After and on one call.
type Action struct {
	Policy Policy
	// Repairs is expect.repair.max_attempts: each repair is a round of its
	// own, with the session's attempts.
	Repairs int
	// OverflowRounds is the overflow: block's max_rounds: each answer to a
	// context overflow (a field shortened, a move to the fallback model) is a
	// round of its own, with the session's attempts, as a repair is.
	OverflowRounds int
	// Fallbacks is how many fallbacks the action has: moving to one is a
	// round of its own, with the session's attempts.
	Fallbacks int
	// BatchRounds is how many provider batch rounds a batch-mode action may
	// spend before it goes online (0 for an online action).
	BatchRounds int
	// MaxCalls caps every call of the record's action (0: no cap).
	MaxCalls int
	// RetryAfterMax caps what a provider may ask a record to wait between
	// two calls; CallTimeout bounds one call.
	RetryAfterMax time.Duration
	CallTimeout   time.Duration
}

// Bound is the worst case of one record of an action: a hard bound that
// every retry layer keeps (docs/design.md §9), printed by `jetpool validate`.
type Bound struct {
	// Calls is the most calls the record's action can make: attempts ×
	// (1 + repairs + overflow rounds + fallbacks) × deliveries, plus batch rounds,
	// capped by max_calls.
	Calls int
	// Uncapped is Calls before max_calls (equal when no cap applies).
	Uncapped int
	// Waiting is the longest the record can spend between its calls: every
	// session's waits (each no longer than its budget: a longer Retry-After
	// hands the record to the exec layer), every redelivery delay (at least
	// the provider's capped Retry-After), and MaxWait for the provider.
	Waiting time.Duration
	// Total is Waiting plus every call taking its whole timeout.
	Total time.Duration
	// Killed is the most calls where processes die mid-call: Calls, plus
	// the calls of each delivery lost with a process, up to
	// LostBeforeAlone + LostDeliveriesMax of them (more make the record a
	// poison record). A worker records each call in its claim before it
	// makes it and a delivery taking the claim over counts them; they do
	// not spend the record's deliveries, so a record in flight on a worker
	// that another record kills is not failed for it.
	Killed int
}

// Bound computes the worst case of a; see Bound.
func (a Action) Bound() Bound {
	p := a.Policy.WithDefaults()
	rounds := 1 + max(a.Repairs, 0) + max(a.OverflowRounds, 0) + max(a.Fallbacks, 0)
	perDelivery := p.Attempts() * rounds
	b := Bound{Uncapped: perDelivery*p.Deliveries() + max(a.BatchRounds, 0)}
	b.Calls = b.Uncapped
	if a.MaxCalls > 0 && a.MaxCalls < b.Calls {
		b.Calls = a.MaxCalls
	}
	lost := perDelivery // a lost delivery's session is cut to max_calls too
	if a.MaxCalls > 0 {
		lost = min(lost, a.MaxCalls)
	}
	b.Killed = b.Calls + (LostBeforeAlone+LostDeliveriesMax)*lost
	// One round's session waits are bounded by its budget, or by its own
	// schedule jittered up by a fifth, whichever is longer.
	session := max(p.SessionBudget(), p.scheduledDelays()*6/5)
	b.Waiting = session * time.Duration(rounds*p.Deliveries())
	for d := 1; d < p.Deliveries(); d++ {
		b.Waiting += min(max(p.RedeliverDelay(d, 0), a.RetryAfterMax), RedeliverDelayMax)
	}
	b.Waiting += p.WaitLimit()
	b.Total = b.Waiting + time.Duration(b.Calls)*a.CallTimeout
	return b
}
