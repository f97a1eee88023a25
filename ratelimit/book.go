package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// admit is admitOnce until it admits.
func (l *Limiter) admit(ctx context.Context, start time.Time, tokens int, probe bool) (*Permit, error) {
	for {
		_, changed := l.view()
		p, again, err := l.admitOnce(ctx, start, tokens, probe, changed)
		if err != nil || !again {
			return p, err
		}
	}
}

// admitOnce tries to take a slot: the shared schedule and leases with
// limits, the AIMD window without, nothing with adaptive: false. again is
// true when the caller must look at the state again (it waited for a slot,
// or a cooldown began).
func (l *Limiter) admitOnce(ctx context.Context, start time.Time, tokens int, probe bool, changed <-chan struct{}) (_ *Permit, again bool, _ error) {
	if l.limits.Budgeted() {
		return l.book(ctx, start, tokens, probe)
	}
	if l.aimd == nil { // adaptive: false: no window, no shared schedule
		l.calls.Add(1)
		return &Permit{l: l, started: l.now(), tokens: tokens, probe: probe}, false, nil
	}
	now := l.now()
	l.mu.Lock()
	if probe || l.inflight < l.aimd.Limit(now) {
		paced := !probe && l.pace.on()
		l.inflight++
		l.peak = max(l.peak, l.inflight)
		if l.rampWaiting == 0 {
			l.aimd.Idle(now) // no one else waits: the ramp pauses
		}
		p := &Permit{l: l, started: now, inflightAt: l.inflight, tokens: tokens, probe: probe}
		announce := l.aimd.Ramping() && l.published.Expires.IsZero()
		if announce {
			l.published = Window{N: l.aimd.Limit(now), Expires: now.Add(l.r.cfg.LeaseTTL)}
			l.publishedAt = now
			l.aimd.Hold(now.Add(AdaptiveRampHoldDefault))
		}
		w := l.published
		l.mu.Unlock()
		l.calls.Add(1)
		if announce {
			// Say at once that this process is ramping: another one starting
			// on the provider now sees it and grows by slow start instead of
			// ramping blind into this one's calls (For).
			if st, err := l.r.store.Update(ctx, l.key, func(s *State) bool {
				l.own(s)
				s.Updated = now
				l.publish(s, now, w)
				return true
			}); err == nil {
				l.observe(st)
			}
		}
		if paced {
			return l.paced(ctx, start, p)
		}
		return p, false, nil
	}
	ch := l.changedLocked()
	// The initial ramp lets more go in time: this caller's turn comes when
	// it covers the calls in flight and the callers waiting before it. A
	// process that another one's window shows calling the provider too
	// grows by slow start instead.
	if l.aimd.Ramping() && l.others(now) {
		l.aimd.NoRamp()
	}
	l.aimd.Full(now)
	l.rampWaiting++
	ramp := l.aimd.RampTo(now, l.inflight+l.rampWaiting)
	l.mu.Unlock()
	err := l.wait(ctx, ramp, ch)
	l.mu.Lock()
	l.rampWaiting--
	l.mu.Unlock()
	if err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// paced books p, admitted in the window, a slot in the learned pace's
// shared schedule and holds it until then. A slot further than the hold
// limit from the caller's start is not booked: the caller gets a
// *WaitError and its record is parked. A cooldown that began meanwhile
// sends the caller back to wait for it (again): a call the pace held must
// not go into a provider that has just said it is full.
func (l *Limiter) paced(ctx context.Context, start time.Time, p *Permit) (_ *Permit, again bool, _ error) {
	giveBack := func() {
		l.calls.Add(-1) // no call after all
		p.release(ctx)
	}
	at, err := l.bookPace(ctx, start)
	switch {
	case errors.Is(err, ErrWait):
		giveBack()
		return nil, false, err
	case err != nil && ctx.Err() != nil:
		giveBack()
		return nil, false, ctx.Err()
	case err != nil:
		// The shared store is contended or unreachable: pace this
		// process alone, at its own share.
		l.mu.Lock()
		at = l.pace.reserve(l.now())
		l.mu.Unlock()
	}
	if now := l.now(); at.After(now) {
		l.mu.Lock()
		l.pace.held(now)
		l.mu.Unlock()
		l.waited.Add(1)
		if err := l.r.cfg.Clock.Sleep(ctx, at.Sub(now)); err != nil {
			giveBack()
			return nil, false, err
		}
	}
	now := l.now()
	if s, _ := l.view(); s.Cooling(now) {
		giveBack()
		return nil, true, nil
	}
	p.started = now
	return p, false, nil
}

// bookPace books the next slot of the learned pace in the shared state:
// one schedule at the sum of every live process's learned share (this
// process's own share as it is now), so that a share left idle by one
// process is the others', as with a configured rpm. It returns the slot
// (ErrContention or the store's error when it could not be booked).
func (l *Limiter) bookPace(ctx context.Context, start time.Time) (at time.Time, err error) {
	select {
	case l.fifo <- struct{}{}:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	defer func() { <-l.fifo }()
	l.mu.Lock()
	mine := l.pace.rate
	l.mu.Unlock()
	far, total := false, mine
	st, err := l.r.store.Update(ctx, l.key, func(s *State) bool {
		now := l.now()
		at, far, total = now, false, mine
		for h, w := range s.LiveWindows(now) {
			if h != l.r.cfg.Holder {
				total += w.Pace
			}
		}
		if s.PaceTAT.After(at) {
			at = s.PaceTAT
		}
		if at.Sub(start) > l.r.cfg.WaitMax {
			far = true
			return false
		}
		s.PaceTAT = at.Add(time.Duration(float64(time.Second) / total))
		l.own(s)
		s.Updated = now
		return true
	})
	if err != nil {
		return time.Time{}, err
	}
	l.observe(st)
	if far {
		return time.Time{}, l.waitError(WaitSchedule, at, fmt.Sprintf("paced at %s (learned): the schedule is booked past the hold limit", paceText(total)))
	}
	return at, nil
}

// book reserves a slot in the shared schedule (and a concurrency lease),
// then sleeps until the slot. A slot further than the hold limit from the
// caller's start is not booked: the caller gets a *WaitError instead.
func (l *Limiter) book(ctx context.Context, start time.Time, tokens int, probe bool) (_ *Permit, again bool, _ error) {
	cfg := l.r.cfg
	select {
	case l.fifo <- struct{}{}:
	case <-ctx.Done():
		l.releaseProbe(probe)
		return nil, false, ctx.Err()
	}
	var at time.Time
	var full, blocked, far bool
	_, changed := l.view()
	st, err := l.r.store.Update(ctx, l.key, func(s *State) bool {
		now := l.now()
		at, full, blocked, far = time.Time{}, false, false, false
		l.bound(s, now)
		if s.Cooling(now) || (!probe && !s.Breaker.Closed() && !l.breaker.Off) {
			blocked = true
			return false
		}
		if c := l.limits.Concurrency; c > 0 && s.InFlight(now) >= c {
			full = true
			return false
		}
		next := *s
		at = l.paces.reserve(&next, now, tokens)
		if at.After(now) && at.Sub(start) > cfg.WaitMax {
			far = true // not booked: the caller parks
			return false
		}
		*s = next
		l.own(s)
		if l.limits.Concurrency > 0 {
			l.lease(s, now, +1)
		}
		s.Updated = now
		return true
	})
	if err != nil && errors.Is(err, ErrContention) && ctx.Err() == nil {
		// Contended, not unreachable: failing open here would break the
		// budget (TestClusterSharedLimits ran three calls under
		// concurrency 2). Asked again after a short, random pause.
		werr := l.wait(ctx, contentionPause(), nil)
		<-l.fifo
		if werr != nil {
			l.releaseProbe(probe)
			return nil, false, werr
		}
		return nil, true, nil
	}
	if err != nil {
		<-l.fifo
		if ctx.Err() != nil {
			l.releaseProbe(probe)
			return nil, false, ctx.Err()
		}
		// The shared store is unreachable: fail open rather than stop every
		// call; a 429 that follows still cools this process.
		l.r.log.Warn().Err(err).Str("provider", l.name).Msg("rate-limit state unavailable; calling without the shared budget")
		l.calls.Add(1)
		return &Permit{l: l, started: l.now(), tokens: tokens, probe: probe}, false, nil
	}
	l.observe(st)
	switch {
	case far:
		<-l.fifo
		l.releaseProbe(probe)
		return nil, false, l.waitError(WaitSchedule, at, fmt.Sprintf("rpm %d, tpm %d: the schedule is booked past the hold limit", l.limits.RPM, l.limits.TPM))
	case blocked:
		<-l.fifo
		return nil, true, nil
	case full:
		// Keep the FIFO: only this waiter polls; the others queue behind it.
		werr := l.wait(ctx, leasePoll, changed)
		<-l.fifo
		if werr != nil {
			l.releaseProbe(probe)
			return nil, false, werr
		}
		return nil, true, nil
	}
	<-l.fifo
	p := &Permit{l: l, tokens: tokens, lease: l.limits.Concurrency > 0, probe: probe}
	if d := at.Sub(l.now()); d > 0 {
		l.waited.Add(1)
		if err := cfg.Clock.Sleep(ctx, d); err != nil {
			p.release(ctx)
			return nil, false, err
		}
	}
	p.started = l.now()
	l.calls.Add(1)
	return p, false, nil
}

// lease changes this process's lease count by delta and refreshes it.
func (l *Limiter) lease(s *State, now time.Time, delta int) {
	if s.Leases == nil {
		s.Leases = map[string]Lease{}
	}
	for h, ls := range s.Leases {
		if !now.Before(ls.Expires) {
			delete(s.Leases, h) // lapsed: its process died
		}
	}
	me := s.Leases[l.r.cfg.Holder]
	me.N = max(me.N+delta, 0)
	me.Expires = now.Add(l.r.cfg.LeaseTTL)
	if me.N == 0 {
		delete(s.Leases, l.r.cfg.Holder)
	} else {
		s.Leases[l.r.cfg.Holder] = me
	}
}

// release gives back a permit that made no call (its lease and probe).
func (p *Permit) release(ctx context.Context) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	l := p.l
	if p.lease || p.probe {
		st, err := l.r.store.Update(context.WithoutCancel(ctx), l.key, func(s *State) bool {
			now := l.now()
			if p.lease {
				l.lease(s, now, -1)
			}
			if p.probe && s.Breaker.State == CircuitHalfOpen && s.Breaker.Probe == l.r.cfg.Holder {
				s.Breaker.release(now)
			}
			s.Updated = now
			return true
		})
		if err == nil {
			l.observe(st)
		}
	}
	if p.probe {
		l.setProbing(false)
	}
	if l.aimd != nil {
		l.mu.Lock()
		l.inflight--
		l.notifyLocked()
		l.mu.Unlock()
	}
}
