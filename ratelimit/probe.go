package ratelimit

import (
	"context"
)

func (l *Limiter) isProbing() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.probing
}

func (l *Limiter) setProbing(v bool) {
	l.mu.Lock()
	l.probing = v
	l.notifyLocked()
	l.mu.Unlock()
}

// tryProbe tries to become the half-open circuit's probe: one caller in
// one process.
func (l *Limiter) tryProbe(ctx context.Context) (bool, error) {
	l.mu.Lock()
	if l.probing {
		l.mu.Unlock()
		return false, nil
	}
	l.probing = true // held while this caller tries
	l.mu.Unlock()
	got := false
	st, err := l.r.store.Update(ctx, l.key, func(s *State) bool {
		got = l.breaker.tryProbe(&s.Breaker, l.now(), l.r.cfg.Holder)
		if got {
			l.own(s)
			s.Updated = l.now()
		}
		return got
	})
	if err != nil || !got {
		l.setProbing(false)
	}
	if err != nil {
		return false, err
	}
	l.observe(st)
	return got, nil
}

// releaseProbe hands the probe back when its caller gives up before calling.
func (l *Limiter) releaseProbe(probe bool) {
	if !probe {
		return
	}
	defer l.setProbing(false)
	st, err := l.r.store.Update(l.r.ctx, l.key, func(s *State) bool {
		if s.Breaker.State != CircuitHalfOpen || s.Breaker.Probe != l.r.cfg.Holder {
			return false
		}
		s.Breaker.release(l.now())
		s.Updated = l.now()
		return true
	})
	if err == nil {
		l.observe(st)
	}
}
