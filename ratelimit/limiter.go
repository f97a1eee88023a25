package ratelimit

import (
	"cmp"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Limiter is the budget of one provider+key in this process.
type Limiter struct {
	r       *Registry
	key     string
	name    string
	of      string // the provider of a deployment (provider.Config.Of)
	limits  provider.Limits
	paces   Paces
	breaker BreakerConfig
	maxWait time.Duration // the provider's max_retry_after: no cooldown lasts longer
	fifo    chan struct{} // one local waiter books in the shared schedule at a time

	mu       sync.Mutex
	shared   State
	changed  chan struct{} // closed and replaced on every change, once handed out
	watched  bool          // changed was handed out since it was made
	aimd     *AIMD         // nil with limits configured, or adaptive: false
	inflight int           // this process's calls in flight (adaptive)
	peak     int           // the most in flight since the last cut: the window in use
	// rampWaiting is the callers waiting for the window (each sleeps until
	// the initial ramp reaches its place).
	rampWaiting int
	probing     bool // a caller here is (or is becoming) the probe
	// localCooldown is a shared cooldown this process decided on and is
	// writing to the store: it holds local callers back at once, because a
	// 429 comes back in a millisecond and a window would otherwise refill
	// with calls that meet the same 429 during the write.
	localCooldown time.Time
	// congestionSeen is the last shared congestion event (CongestedAt)
	// that cut AIMD.
	congestionSeen time.Time
	served         servedRate  // successes and latency, for AIMD cuts
	pace           learnedPace // adaptive: the request rate learned at congestion
	recent         tally       // answers over CongestionWindowDefault: congestion or one-off 429s
	run            int         // congestion answers in a row
	health         tally       // answers over the breaker's window: the breaker, the fault trim
	published      Window      // the window last written to the shared state
	publishedAt    time.Time
	cappedLogged   bool // a capped Retry-After was logged

	calls, waited, congested, faults, cooldowns atomic.Int64
}

// others reports whether the shared state shows another process's live
// window on this provider (l.mu held, or before l is shared).
func (l *Limiter) others(now time.Time) bool {
	for h := range l.shared.LiveWindows(now) {
		if h != l.r.cfg.Holder {
			return true
		}
	}
	return false
}

// Key is the limiter's KV key.
func (l *Limiter) Key() string { return l.key }

// Of is the provider whose deployment the limiter paces, "" for a
// provider's own (provider.Config.Of).
func (l *Limiter) Of() string { return l.of }

// own marks s as the state of l's provider (its name, provider and limits).
func (l *Limiter) own(s *State) { s.Provider, s.Of, s.Limits = l.name, l.of, l.limits }

// Limited reports whether an rpm, tpm or concurrency budget is configured
// (false: adaptive concurrency, or none with adaptive: false).
func (l *Limiter) Limited() bool { return l.limits.Budgeted() }

func (l *Limiter) now() time.Time { return l.r.cfg.Clock.Now() }

// bound makes the waits in s end within this provider's caps.
func (l *Limiter) bound(s *State, now time.Time) bool {
	return s.bound(now, l.maxWait, l.breaker.CooldownMax, l.breaker.ProbeTimeout)
}

// observe records a state seen in the store.
func (l *Limiter) observe(s State) {
	now := l.now()
	l.bound(&s, now)
	l.mu.Lock()
	if s.Updated.Before(l.shared.Updated) {
		l.mu.Unlock()
		return // an older state than one we wrote ourselves
	}
	prev := l.shared.Breaker.State
	l.shared = s
	if !l.localCooldown.After(s.CooldownUntil) {
		l.localCooldown = time.Time{} // the shared state holds it now
	}
	if l.aimd != nil && s.CongestedAt.After(l.congestionSeen) {
		// Congestion seen here or in another process (a new cooldown, an
		// empty bucket): every process cuts, once per event.
		l.congestionSeen = s.CongestedAt
		reason := cmp.Or(s.Reason, "congestion")
		if l.aimd.Congestion(s.CongestedAt, now, max(l.peak, l.inflight), l.served.sustained(now), reason) {
			l.pace.event(s.CongestedAt, reason)
		}
		l.peak = l.inflight
	}
	if s.Breaker.Closed() && prev != "" && prev != CircuitClosed {
		l.health.reset() // a closed circuit starts counting afresh
	}
	l.notifyLocked()
	l.mu.Unlock()
	if s.Breaker.State != prev && !(prev == "" && s.Breaker.State == CircuitClosed) {
		ev := l.r.log.Info()
		if s.Breaker.State == CircuitOpen {
			ev = l.r.log.Warn()
		}
		ev.Str("provider", l.name).Str("circuit", s.Breaker.State).Time("until", s.Breaker.Until).
			Str("last_error", s.Breaker.LastError).Str("reason", s.Reason).Msg("circuit " + strings.ReplaceAll(s.Breaker.State, "_", "-"))
	}
}

// notifyLocked wakes whoever waits for a change (l.mu held). The channel
// is replaced only once it was handed out: at zero latency every call's
// Done came here, and a channel made for each was a sixth of the
// limiter's allocation with no one to wake.
func (l *Limiter) notifyLocked() {
	if !l.watched {
		return
	}
	close(l.changed)
	l.changed = make(chan struct{})
	l.watched = false
}

// changedLocked is the channel closed at the next change (l.mu held).
func (l *Limiter) changedLocked() chan struct{} {
	l.watched = true
	return l.changed
}

func (l *Limiter) view() (State, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shared
	if l.localCooldown.After(s.CooldownUntil) {
		s.CooldownUntil = l.localCooldown
	}
	return s, l.changedLocked()
}

// wait sleeps d (d ≤ 0: until a change) or until the limiter's state
// changes, whichever is first. It returns ctx.Err() when ctx is done.
func (l *Limiter) wait(ctx context.Context, d time.Duration, changed <-chan struct{}) error {
	l.waited.Add(1)
	if d <= 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			return nil
		}
	}
	if _, real := l.r.cfg.Clock.(retry.SystemClock); real {
		// No goroutine per wait: a thousand callers may be waiting.
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed: // nil: never
		case <-t.C:
		}
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if changed != nil {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-changed:
				cancel()
			case <-done:
			}
		}()
	}
	_ = l.r.cfg.Clock.Sleep(wctx, d) // an error here is ctx or a change
	return ctx.Err()
}

// jitter is a random share of a spread that grows with the wait: a tenth
// of it, at least 50 ms, at most JitterMaxDefault.
func (l *Limiter) jitter(wait time.Duration) time.Duration {
	spread := min(max(wait/10, 50*time.Millisecond), JitterMaxDefault)
	return time.Duration(l.r.cfg.Jitter() * float64(spread))
}
