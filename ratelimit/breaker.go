package ratelimit

import (
	"cmp"
	"time"

	"github.com/jetpool/jetpool/provider"
)

// Circuit states.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// Defaults of BreakerConfig (provider.Breaker's, where a workflow's
// limits.breaker overrides them).
const (
	// BreakerFailureRatioDefault of the calls in the window must have failed
	// (5xx, overload, a connection that failed or dropped) for the circuit
	// to open: a provider that fails half of what it is sent is down for
	// practical purposes, while one that fails a few percent is only noisy,
	// and the retry layers deal with that.
	BreakerFailureRatioDefault = provider.BreakerFailureRatioDefault
	// BreakerMinCallsDefault calls in the window are needed before the
	// ratio means anything: two failed records must not open a circuit for
	// every job.
	BreakerMinCallsDefault = provider.BreakerMinCallsDefault
	// BreakerWindowDefault is how far back the calls are counted.
	BreakerWindowDefault = provider.BreakerWindowDefault
	// BreakerCooldownDefault is how long the circuit stays open before a
	// probe: longer than Config.WaitMax (WaitMaxDefault), so that records
	// are handed back (parked) rather than held in worker slots, short
	// enough that a provider back from a blip is used again soon.
	BreakerCooldownDefault = provider.BreakerCooldownDefault
	// BreakerCooldownMaxDefault caps the cooldown, which doubles after each failed probe.
	BreakerCooldownMaxDefault = provider.BreakerCooldownMaxDefault
	// BreakerProbeTimeoutDefault is how long a probe may take before another
	// process may probe in its place (its process may have died).
	BreakerProbeTimeoutDefault = 2 * time.Minute
)

// BreakerConfig configures the circuit breaker of a provider. A provider's
// own `limits: {breaker: …}` (provider.Breaker) overrides the registry's.
type BreakerConfig struct {
	Off          bool          // no breaker at all
	FailureRatio float64       // BreakerFailureRatioDefault
	MinCalls     int           // BreakerMinCallsDefault
	Window       time.Duration // BreakerWindowDefault
	Cooldown     time.Duration // BreakerCooldownDefault
	CooldownMax  time.Duration // BreakerCooldownMaxDefault (at least Cooldown)
	ProbeTimeout time.Duration // BreakerProbeTimeoutDefault
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	b := provider.Breaker{FailureRatio: c.FailureRatio, MinCalls: c.MinCalls, Window: c.Window,
		Cooldown: c.Cooldown, CooldownMax: c.CooldownMax}.WithDefaults()
	c.FailureRatio, c.MinCalls, c.Window, c.Cooldown, c.CooldownMax = b.FailureRatio, b.MinCalls, b.Window, b.Cooldown, b.CooldownMax
	c.ProbeTimeout = cmp.Or(max(c.ProbeTimeout, 0), BreakerProbeTimeoutDefault)
	return c
}

// with is c with a provider's settings over it.
func (c BreakerConfig) with(p provider.Breaker) BreakerConfig {
	c.Off = c.Off || p.Off
	c.FailureRatio = cmp.Or(p.FailureRatio, c.FailureRatio)
	c.MinCalls = cmp.Or(p.MinCalls, c.MinCalls)
	c.Window = cmp.Or(p.Window, c.Window)
	c.Cooldown = cmp.Or(p.Cooldown, c.Cooldown)
	c.CooldownMax = cmp.Or(p.CooldownMax, c.CooldownMax)
	return c.withDefaults() // CooldownMax at least Cooldown
}

// Breaker is the shared circuit of one provider+key.
type Breaker struct {
	State      string    `json:"state,omitempty"` // "" is closed
	Until      time.Time `json:"until,omitzero"`  // open: when a probe may go
	Trips      int       `json:"trips,omitempty"` // consecutive openings; doubles the cooldown
	Probe      string    `json:"probe,omitempty"` // half-open: the holder probing
	ProbeUntil time.Time `json:"probe_until,omitzero"`
	LastError  string    `json:"last_error,omitempty"`
	Opened     time.Time `json:"opened,omitzero"`
}

// Closed reports whether calls flow freely.
func (b Breaker) Closed() bool { return b.State == "" || b.State == CircuitClosed }

// cooldown is the open period after trips openings.
func (c BreakerConfig) cooldown(trips int) time.Duration {
	d := c.Cooldown
	for i := 1; i < trips && d < c.CooldownMax; i++ {
		d *= 2
	}
	return min(d, c.CooldownMax)
}

// open opens the circuit at now (again, after a failed probe).
func (c BreakerConfig) open(b *Breaker, now time.Time, lastErr string) {
	b.Trips++
	b.State = CircuitOpen
	b.Until = now.Add(c.cooldown(b.Trips))
	b.Probe, b.ProbeUntil = "", time.Time{}
	b.LastError = lastErr
	b.Opened = now
}

// release hands a probe back without a verdict (it was cancelled or timed
// out): open, due at once, so that the next waiter probes.
func (b *Breaker) release(now time.Time) {
	b.State, b.Until, b.Probe, b.ProbeUntil = CircuitOpen, now, "", time.Time{}
}

// tryProbe makes holder the probe when the open period is over (or the
// last probe's time ran out). It reports whether holder is the probe.
func (c BreakerConfig) tryProbe(b *Breaker, now time.Time, holder string) bool {
	switch b.State {
	case CircuitOpen:
		if now.Before(b.Until) {
			return false
		}
	case CircuitHalfOpen:
		if b.Probe != holder && now.Before(b.ProbeUntil) {
			return false
		}
	default:
		return false
	}
	b.State = CircuitHalfOpen
	b.Probe = holder
	b.ProbeUntil = now.Add(c.ProbeTimeout)
	return true
}

// close closes the circuit.
func (b *Breaker) close() { *b = Breaker{State: CircuitClosed} }

// trips reports whether counts (a window's outcomes) say the provider is
// unhealthy: at least MinCalls answered or failed calls, FailureRatio of
// them failures.
func (c BreakerConfig) trips(n counts) bool {
	calls, failed := n.calls(), n.failures()
	return !c.Off && calls >= c.MinCalls && float64(failed) >= c.FailureRatio*float64(calls)
}
