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
	// Of is the provider whose deployment Provider is ("": none).
	Of   string `json:"of,omitempty"`
	Mode string `json:"mode"` // "limits", "adaptive", or "none" (adaptive: false)
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
	st := Status{Key: l.key, Provider: l.name, Of: l.of, Mode: "limits", Limit: float64(l.limits.Concurrency),
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

// Room is how much a limiter can take now, as a router choosing among a
// provider's deployments reads it: from this process's view of the shared
// state, with no store read.
type Room struct {
	// Resting: an open circuit or a shared cooldown (Resting).
	Resting bool
	// Wait is how long a call asked for now would wait for its slot in
	// the schedule: the configured rpm and tpm, or the learned pace. 0:
	// it would go at once.
	Wait time.Duration
	// Full: every place of limits.concurrency (all processes) or of the
	// adaptive window (this process) is taken.
	Full bool
	// Failing: most of this process's answers of the last second were
	// failures (5xx, overloads, dropped connections; two at least). A
	// deployment that fails at once keeps its schedule free, and would
	// look like the one with room until its circuit opens.
	Failing bool
	// Rate is the calls a second the limiter lets through when busy: the
	// learned pace (this process's share), the configured rpm at the
	// registry's headroom, the lower of both; 0 when neither is set.
	Rate float64
}

// Free reports whether a call asked for now would go at once.
func (r Room) Free() bool { return !r.Resting && !r.Full && !r.Failing && r.Wait <= 0 }

// Room returns the limiter's room now.
func (l *Limiter) Room() Room {
	now := l.now()
	_, open := l.CircuitOpenUntil()
	s, _ := l.view()
	r := Room{Resting: open || s.Cooling(now)}
	at, _ := l.paces.Req.Reserve(s.ReqTAT, now, 1)
	if l.paces.Tok.On() {
		if t, _ := l.paces.Tok.Reserve(s.TokTAT, now, 1); t.After(at) {
			at = t
		}
	}
	if l.paces.Req.On() {
		r.Rate = float64(time.Second) / float64(l.paces.Req.Interval)
	}
	l.mu.Lock()
	if l.pace.on() {
		if s.PaceTAT.After(at) {
			at = s.PaceTAT
		}
		if r.Rate == 0 || l.pace.rate < r.Rate {
			r.Rate = l.pace.rate
		}
	}
	if l.aimd != nil {
		r.Full = l.inflight >= max(int(l.aimd.Value()), 1)
	}
	c := l.recent.counts(now)
	l.mu.Unlock()
	failed := c[sigFault] + c[sigOverload]
	r.Failing = failed >= 2 && 2*failed >= failed+c[sigOK]+c[sigRefused]+c[sigCongestion]
	if c := l.limits.Concurrency; c > 0 && s.InFlight(now) >= c {
		r.Full = true
	}
	r.Wait = max(at.Sub(now), 0)
	return r
}

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
