package ratelimit

import (
	"cmp"
	"fmt"
	"time"
)

// Status is what a Limiter shows to metrics, logs, the run summary and
// `jetpool status`.
type Status struct {
	Key      string `json:"key"`
	Provider string `json:"provider"`
	Mode     string `json:"mode"` // "limits", "adaptive", or "none" (adaptive: false)
	// Limit is the window: adaptive concurrency (this process), or
	// limits.concurrency (0: none).
	Limit         float64       `json:"limit"`
	InFlight      int           `json:"in_flight"`
	Circuit       string        `json:"circuit"`
	Cooldown      time.Duration `json:"cooldown"` // left of the shared cooldown
	CooldownCause string        `json:"cooldown_cause,omitempty"`
	Calls         int64         `json:"calls"`           // permits granted
	Congested     int64         `json:"congested"`       // answers that said the provider is full (429, 529, an empty bucket)
	Faults        int64         `json:"faults"`          // 5xx, connection failures, dropped streams
	Cooldowns     int64         `json:"cooldowns"`       // shared cooldowns this process set
	Waited        int64         `json:"waited"`          // times a caller had to wait
	Change        Change        `json:"change,omitzero"` // the window's last decision
	// Pace is the request rate learned at congestion (adaptive; 0: none),
	// PaceChange when and why it was last set.
	Pace       float64 `json:"pace,omitempty"`
	PaceChange Change  `json:"pace_change,omitzero"`
	// Reason is the last change of the shared cooldown or circuit, and why.
	Reason string `json:"reason,omitempty"`
}

// Window is the status as one line: "window 8 (was 32): 429s from openai at
// 12:01:03"; "window 12; last change …" once it moved since.
func (st Status) Window() string {
	switch st.Mode {
	case "limits":
		if st.Limit == 0 {
			return "limits (no concurrency cap)"
		}
		return fmt.Sprintf("limits, concurrency %d", int(st.Limit))
	case "none":
		return "no window (adaptive: false)"
	}
	n := max(int(st.Limit), 1)
	var text string
	switch {
	case st.Change.At.IsZero():
		text = fmt.Sprintf("window %d", n)
	case st.Change.To == n:
		text = st.Change.String()
	default:
		text = fmt.Sprintf("window %d; last change %d → %d: %s at %s", n, st.Change.From, st.Change.To,
			st.Change.Reason, st.Change.At.Format("15:04:05"))
	}
	if st.Pace > 0 {
		text += fmt.Sprintf("; paced at %s (set at %s)", paceText(st.Pace), st.PaceChange.At.Format("15:04:05"))
	}
	return text
}

// Status returns the limiter's status now.
func (l *Limiter) Status() Status {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Status{Key: l.key, Provider: l.name, Mode: "limits", Limit: float64(l.limits.Concurrency),
		InFlight: l.shared.InFlight(now), Circuit: cmp.Or(l.shared.Breaker.State, CircuitClosed),
		Calls: l.calls.Load(), Congested: l.congested.Load(), Faults: l.faults.Load(),
		Cooldowns: l.cooldowns.Load(), Waited: l.waited.Load(), Reason: l.shared.Reason}
	switch {
	case l.aimd != nil:
		st.Mode, st.Limit, st.InFlight, st.Change = "adaptive", l.aimd.Value(), l.inflight, l.aimd.Last()
		st.Pace, st.PaceChange = l.pace.rate, l.pace.change
	case !l.limits.Budgeted():
		st.Mode = "none" // adaptive: false
	}
	if l.shared.Cooling(now) {
		st.Cooldown, st.CooldownCause = l.shared.CooldownUntil.Sub(now), l.shared.CooldownCause
	}
	return st
}

// CircuitOpen reports whether the circuit is open now with no probe due:
// a pool may stop pulling this provider's work.
func (l *Limiter) CircuitOpen() bool {
	_, open := l.CircuitOpenUntil()
	return open
}

// CircuitOpenUntil is CircuitOpen with when the probe is due: a pool that
// stops pulling this provider's work knows when to look again.
func (l *Limiter) CircuitOpenUntil() (time.Time, bool) {
	if l.breaker.Off {
		return time.Time{}, false
	}
	s, _ := l.view()
	if s.Breaker.State == CircuitOpen && l.now().Before(s.Breaker.Until) {
		return s.Breaker.Until, true
	}
	return time.Time{}, false
}

// servedWindow is how far back servedRate looks, in servedBuckets slices
// of servedSlice.
const (
	servedWindow  = 5 * time.Second
	servedSlice   = 100 * time.Millisecond
	servedBuckets = int(servedWindow / servedSlice)
)

// Resting reports whether the provider takes no calls now: its circuit is
// open or a shared cooldown is under way. A router spreading calls across
// deployments sends none to a resting one while another has room.
func (l *Limiter) Resting() bool {
	if _, open := l.CircuitOpenUntil(); open {
		return true
	}
	s, _ := l.view()
	return s.Cooling(l.now())
}
