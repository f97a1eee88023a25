package ratelimit

import (
	"context"
	"sync/atomic"
	"time"
)

// Permit is one call admitted by Acquire. Report its outcome with Done.
type Permit struct {
	l          *Limiter
	started    time.Time
	inflightAt int // local calls in flight counting this one (adaptive)
	tokens     int // the estimate booked
	lease      bool
	probe      bool
	done       atomic.Bool
}

// Probe reports whether the call is the half-open circuit's probe.
func (p *Permit) Probe() bool { return p.probe }

// Acquire waits until a call of about tokens tokens may go (0: unknown),
// and returns its permit. It waits for an open circuit (one waiter becomes
// the half-open circuit's probe), a shared cooldown, a concurrency slot and
// a slot in the rpm/tpm schedule. It returns ctx.Err() when ctx is done,
// and a *WaitError (errors.Is ErrWait) when it would have to wait longer
// than Config.WaitMax, counted from its start, for a cooldown, a circuit
// or the schedule: no call was made, and the caller parks the record
// until WaitError.Until.
func (l *Limiter) Acquire(ctx context.Context, tokens int) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := l.now()
	if p := l.admitFast(start, tokens); p != nil {
		return p, nil
	}
	return l.acquire(ctx, start, tokens)
}

// acquire is Acquire past its fast path: it looks at the state, waits for
// what stands in the way, and admits. It is a function of its own so that
// Acquire, on every call's path, keeps a small frame (88 bytes, not the
// 1.7 KiB of the state it copies here).
func (l *Limiter) acquire(ctx context.Context, start time.Time, tokens int) (*Permit, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := l.now()
		s, changed := l.view()
		probe := false
		if b := s.Breaker; !b.Closed() && !l.breaker.Off {
			until, werr := l.circuitWait(b, start, now)
			if werr != nil {
				return nil, werr
			}
			if !until.IsZero() {
				d := until.Sub(now)
				if b.State == CircuitOpen {
					d += l.jitter(d)
				}
				if err := l.wait(ctx, d, changed); err != nil {
					return nil, err
				}
				continue
			}
			got, err := l.tryProbe(ctx)
			if err != nil {
				return nil, err
			}
			if !got {
				continue
			}
			probe = true
		}
		if s.Cooling(now) {
			if s.CooldownUntil.Sub(start) > l.r.cfg.WaitMax {
				l.releaseProbe(probe)
				return nil, l.waitError(WaitCooldown, s.CooldownUntil, s.CooldownCause)
			}
			d := s.CooldownUntil.Sub(now)
			if !l.limits.Budgeted() {
				d += l.jitter(d) // the paced schedule spreads limited waiters by itself
			}
			if err := l.wait(ctx, d, nil); err != nil {
				l.releaseProbe(probe)
				return nil, err
			}
			if probe {
				return l.admit(ctx, start, tokens, true)
			}
			continue
		}
		p, again, err := l.admitOnce(ctx, start, tokens, probe, changed)
		if err != nil || !again {
			return p, err
		}
	}
}

// admitFast admits a call of the adaptive window at once, under one lock,
// when nothing stands in its way: the circuit closed (or off), no
// cooldown, room in the window, no learned pace to book and no ramp to
// announce. It returns nil otherwise, and Acquire's loop decides. At zero
// latency, with hundreds of calls in flight, Acquire's two locks and copy
// of the state showed in the pool's profile; this path skips them.
func (l *Limiter) admitFast(now time.Time, tokens int) *Permit {
	if l.aimd == nil || l.limits.Budgeted() {
		return nil
	}
	l.mu.Lock()
	if (!l.shared.Breaker.Closed() && !l.breaker.Off) || now.Before(l.shared.CooldownUntil) || now.Before(l.localCooldown) ||
		l.inflight >= l.aimd.Limit(now) || l.pace.on() || (l.aimd.Ramping() && l.published.Expires.IsZero()) {
		l.mu.Unlock()
		return nil
	}
	l.inflight++
	l.peak = max(l.peak, l.inflight)
	if l.rampWaiting == 0 {
		l.aimd.Idle(now) // no one else waits: the ramp pauses
	}
	p := &Permit{l: l, started: now, inflightAt: l.inflight, tokens: tokens}
	l.mu.Unlock()
	l.calls.Add(1)
	return p
}

// circuitWait is how long a caller that started at start must wait, at
// now, for a circuit that is not closed: until b's open period ends, or
// until another worker's probe is done (at most the hold limit), zero when
// the caller may try to become the probe. Past the hold limit it returns a
// *WaitError instead.
func (l *Limiter) circuitWait(b Breaker, start, now time.Time) (time.Time, error) {
	holdUntil := start.Add(l.r.cfg.WaitMax)
	switch {
	case b.State == CircuitOpen && now.Before(b.Until):
		if b.Until.After(holdUntil) {
			return time.Time{}, l.waitError(WaitCircuit, b.Until, b.LastError)
		}
		return b.Until, nil
	case b.State == CircuitHalfOpen && now.Before(b.ProbeUntil) && (b.Probe != l.r.cfg.Holder || l.isProbing()):
		// A probe in flight ends soon (ProbeUntil is only the lease of a
		// probe whose process may have died): wait for it, within the
		// hold limit.
		if !now.Before(holdUntil) {
			return time.Time{}, l.waitError(WaitCircuit, minTime(b.ProbeUntil, now.Add(l.breaker.Cooldown)), b.LastError)
		}
		return minTime(b.ProbeUntil, holdUntil), nil
	}
	return time.Time{}, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (l *Limiter) waitError(kind string, until time.Time, cause string) *WaitError {
	return &WaitError{Provider: l.name, Until: until, Kind: kind, Cause: cause}
}
