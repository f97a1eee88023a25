package retry

import (
	"cmp"
	"errors"
	"fmt"
	"time"
)

// RedeliverDelayMax caps one exec-layer delay, whatever a provider's
// Retry-After says: a record should not hold a MaxAckPending slot for longer.
const RedeliverDelayMax = time.Hour

// FieldError is one invalid field of a Policy. Field is the YAML name
// ("max_attempts", "redeliver.max_deliveries"), so the configuration loader
// can prefix it with the action and point at the line.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// WithDefaults returns p with its zero fields filled in. A disabled policy
// becomes exactly one attempt and one delivery; an enabled one gets the
// *Default constants, and a Budget equal to the sum of its scheduled
// session delays.
func (p Policy) WithDefaults() Policy {
	p.OnExhausted = cmp.Or(p.OnExhausted, OnExhaustedDefault)
	p.MaxWait = cmp.Or(p.MaxWait, MaxWaitDefault)
	if !p.Enabled {
		p.MaxAttempts, p.MaxDeliveries = 1, 1
		return p
	}
	p.MaxAttempts = cmp.Or(p.MaxAttempts, MaxAttemptsDefault)
	p.Backoff = cmp.Or(p.Backoff, BackoffDefault)
	p.MaxBackoff = cmp.Or(p.MaxBackoff, MaxBackoffDefault)
	p.MaxDeliveries = cmp.Or(p.MaxDeliveries, MaxDeliveriesDefault)
	p.RedeliverBackoff = cmp.Or(p.RedeliverBackoff, RedeliverBackoffDefault)
	p.Budget = cmp.Or(p.Budget, p.scheduledDelays())
	return p
}

// Validate reports every invalid field, joined, each a *FieldError whose
// message names the field as the workflow spells it:
// "max_attempts: 12 is out of range 1-10". Zero fields are valid (they mean
// the default), so Validate may run before or after WithDefaults.
func (p Policy) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if p.MaxAttempts != 0 && (p.MaxAttempts < MaxAttemptsMin || p.MaxAttempts > MaxAttemptsMax) {
		bad("max_attempts", "%d is out of range %d-%d", p.MaxAttempts, MaxAttemptsMin, MaxAttemptsMax)
	}
	if p.Backoff < 0 {
		bad("backoff", "%s must not be negative", p.Backoff)
	}
	if p.MaxBackoff < 0 {
		bad("max_backoff", "%s must not be negative", p.MaxBackoff)
	} else if p.MaxBackoff > 0 && p.MaxBackoff < cmp.Or(p.Backoff, BackoffDefault) {
		bad("max_backoff", "%s is shorter than backoff %s", p.MaxBackoff, cmp.Or(p.Backoff, BackoffDefault))
	}
	if p.Budget < 0 {
		bad("budget", "%s must not be negative", p.Budget)
	}
	switch p.OnExhausted {
	case "", ReturnLast, Raise:
	default:
		bad("on_exhausted", "%q is not one of %s, %s", p.OnExhausted, ReturnLast, Raise)
	}
	if p.MaxDeliveries != 0 && (p.MaxDeliveries < 1 || p.MaxDeliveries > MaxDeliveriesMax) {
		bad("redeliver.max_deliveries", "%d is out of range 1-%d", p.MaxDeliveries, MaxDeliveriesMax)
	}
	if p.RedeliverBackoff < 0 {
		bad("redeliver.backoff", "%s must not be negative", p.RedeliverBackoff)
	}
	if p.MaxWait < 0 {
		bad("max_wait", "%s must not be negative", p.MaxWait)
	}
	return errors.Join(errs...)
}

// Attempts is the number of session calls per delivery: 1 when retry is off.
func (p Policy) Attempts() int {
	if !p.Enabled {
		return 1
	}
	return cmp.Or(p.MaxAttempts, MaxAttemptsDefault)
}

// Deliveries is the number of JetStream deliveries a record gets: 1 when
// retry is off.
func (p Policy) Deliveries() int {
	if !p.Enabled {
		return 1
	}
	return cmp.Or(p.MaxDeliveries, MaxDeliveriesDefault)
}

// SessionDelay is the wait after failed attempt n (1-based) of a delivery:
// backoff·2^(n-1), capped at MaxBackoff. jitter in [0,1) scales it by a
// factor from 0.8 to 1.2 (0.5 gives exactly the schedule); the result never
// exceeds MaxBackoff.
func (p Policy) SessionDelay(n int, jitter float64) time.Duration {
	d := doubling(cmp.Or(p.Backoff, BackoffDefault), n, cmp.Or(p.MaxBackoff, MaxBackoffDefault))
	jitter = min(max(jitter, 0), 1)
	d = time.Duration(float64(d) * (1 + 0.4*(jitter-0.5)))
	return min(d, cmp.Or(p.MaxBackoff, MaxBackoffDefault))
}

// RedeliverDelay is the NakWithDelay before delivery+1, after delivery
// (1-based) failed: RedeliverBackoff·2^(delivery-1), at least wait (the
// provider's last Retry-After), at most RedeliverDelayMax.
func (p Policy) RedeliverDelay(delivery int, wait time.Duration) time.Duration {
	d := doubling(cmp.Or(p.RedeliverBackoff, RedeliverBackoffDefault), delivery, RedeliverDelayMax)
	return min(max(d, wait), RedeliverDelayMax)
}

// WorstCase is what one record may cost when every call fails transiently:
// calls = attempts × deliveries, and elapsed = the waits between them (every
// session delay, unjittered, in every delivery, plus every redelivery delay),
// not counting the calls themselves or a provider's Retry-After.
func (p Policy) WorstCase() (calls int, elapsed time.Duration) {
	deliveries := p.Deliveries()
	elapsed = p.scheduledDelays() * time.Duration(deliveries)
	for d := 1; d < deliveries; d++ {
		elapsed += p.RedeliverDelay(d, 0)
	}
	return p.Attempts() * deliveries, elapsed
}

// SessionBudget is the longest one delivery's session may wait between its
// calls: Budget, or the sum of its scheduled delays when Budget is 0.
func (p Policy) SessionBudget() time.Duration {
	return cmp.Or(p.Budget, p.scheduledDelays())
}

// scheduledDelays sums the session delays between Attempts() calls, unjittered.
func (p Policy) scheduledDelays() time.Duration {
	var sum time.Duration
	for n := 1; n < p.Attempts(); n++ {
		sum += p.SessionDelay(n, 0.5)
	}
	return sum
}

// doubling is base·2^(n-1) for n ≥ 1 (n < 1 counts as 1), capped at limit
// without overflowing.
func doubling(base time.Duration, n int, limit time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// WaitLimit is how long in all the record may wait for its provider
// (MaxWait, MaxWaitDefault when unset).
func (p Policy) WaitLimit() time.Duration { return cmp.Or(p.MaxWait, MaxWaitDefault) }
