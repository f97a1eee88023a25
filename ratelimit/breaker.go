package ratelimit

import (
	"time"
)

// Circuit states.
const (
	CircuitClosed   = "closed"
	CircuitOpen     = "open"
	CircuitHalfOpen = "half_open"
)

// Defaults of BreakerConfig.
const (
	// BreakerFailuresDefault consecutive server or network failures open the circuit.
	BreakerFailuresDefault = 5
	// BreakerCooldownDefault is how long the circuit stays open before a probe.
	BreakerCooldownDefault = 30 * time.Second
	// BreakerCooldownMaxDefault caps the cooldown, which doubles after each failed probe.
	BreakerCooldownMaxDefault = 5 * time.Minute
)

// BreakerConfig configures the circuit breaker of every provider.
type BreakerConfig struct {
	Failures    int           // BreakerFailuresDefault; a negative value turns the breaker off
	Cooldown    time.Duration // BreakerCooldownDefault
	CooldownMax time.Duration // BreakerCooldownMaxDefault
	// ProbeTimeout is how long a probe may take before another process may
	// probe in its place (its process may have died). Default: 2 min.
	ProbeTimeout time.Duration
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.Failures == 0 {
		c.Failures = BreakerFailuresDefault
	}
	if c.Cooldown <= 0 {
		c.Cooldown = BreakerCooldownDefault
	}
	if c.CooldownMax <= 0 {
		c.CooldownMax = max(BreakerCooldownMaxDefault, c.Cooldown)
	}
	if c.ProbeTimeout <= 0 {
		c.ProbeTimeout = 2 * time.Minute
	}
	return c
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
