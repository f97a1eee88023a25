package ratelimit

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Defaults of Config.
const (
	// WaitMaxDefault is the hold limit: the longest Acquire waits in the
	// worker's slot for a shared cooldown, an open circuit or the shared
	// schedule. Beyond it Acquire returns a *WaitError and the worker parks
	// the record (a delayed redelivery that spends no attempt and no
	// delivery) instead of holding a slot. Ten seconds covers the waits
	// providers usually ask for (per-second buckets, OpenAI's and
	// Anthropic's resets of a few seconds) and a half-open probe's call,
	// and is shorter than a third of the default AckWait, so a wait in the
	// slot needs no heartbeat to outlive; a longer wait costs only the
	// park's round trip, and frees the slot for other records and jobs.
	WaitMaxDefault = 10 * time.Second
	// CooldownDefault is the shared cooldown after 429s that name no
	// Retry-After and no reset.
	CooldownDefault = time.Second
	// LeaseTTLDefault is how long a process's concurrency leases outlive
	// its last change: the leases of a process that died lapse after it.
	LeaseTTLDefault = 5 * time.Minute
	// JitterMaxDefault caps the spread of resumptions after a cooldown or an
	// open circuit (a tenth of the wait, at least 50 ms, at most this).
	JitterMaxDefault = 2 * time.Second
	// CongestionWindowDefault is how far back this process's answers are
	// looked at to tell a congested provider from one-off 429s.
	CongestionWindowDefault = time.Second
	// CongestionMinDefault 429s (or overloads) in the congestion window, and
	// CongestionShareDefault of its answers, make 429s congestion: then they
	// set the shared cooldown and cut the window of every process. Fewer are
	// one-off: only the record that met one waits (its session delay, at
	// least its Retry-After). A single 429 among hundreds of successes says
	// nothing about the provider's capacity; freezing every record on it
	// made a job with a few random 429s many times slower
	// (docs/ratelimits.md).
	CongestionMinDefault   = 2
	CongestionShareDefault = 0.2
	// CongestionRunDefault 429s (or overloads) in a row, with no other
	// answer between them, are congestion too, whatever the share: a
	// bucket that ran dry answers every call 429 at once, and each 429
	// frees a slot that sends the next call into it, while one-off 429s
	// almost never come three in a row.
	CongestionRunDefault = 3
	// leasePoll is how often a waiter for a concurrency slot looks again
	// when no change was seen (a lease that lapsed produces no event).
	leasePoll = 250 * time.Millisecond
	// publishEvery bounds how often a process publishes its window in the
	// shared state when nothing else is written (a cut is published at once).
	publishEvery = time.Second
)

// Config configures a Registry. Zero fields take their defaults.
type Config struct {
	Log      zerolog.Logger
	Clock    retry.Clock    // retry.SystemClock
	Jitter   func() float64 // [0,1); math/rand/v2
	Breaker  BreakerConfig  // under every provider's own limits.breaker
	Headroom float64        // HeadroomDefault
	WaitMax  time.Duration  // WaitMaxDefault
	Cooldown time.Duration  // CooldownDefault
	LeaseTTL time.Duration  // LeaseTTLDefault
	// AdaptiveInitial and AdaptiveMax bound adaptive concurrency
	// (AdaptiveStartDefault, AdaptiveMaxDefault); AdaptiveRamp is its
	// initial ramp (AdaptiveRampDefault; negative: none).
	AdaptiveInitial, AdaptiveMax int
	AdaptiveRamp                 time.Duration
	// CongestionMin and CongestionShare tell congestion from one-off 429s
	// (CongestionMinDefault, CongestionShareDefault).
	CongestionMin   int
	CongestionShare float64
	CongestionRun   int // CongestionRunDefault
	// Holder names this process in leases and probes; default host-pid-random.
	Holder string
}

// Registry hands out one Limiter per provider+key and keeps their shared
// state in sync with the Store. Close it when done.
type Registry struct {
	store  Store
	cfg    Config
	log    zerolog.Logger
	ctx    context.Context
	cancel context.CancelFunc

	mu   sync.Mutex
	lims map[string]*Limiter
	seen map[string]State // states watched before their limiter existed
}

// NewRegistry starts watching store and returns a Registry over it.
func NewRegistry(ctx context.Context, store Store, cfg Config) (*Registry, error) {
	if cfg.Clock == nil {
		cfg.Clock = retry.SystemClock{}
	}
	if cfg.Jitter == nil {
		cfg.Jitter = rand.Float64
	}
	cfg.Breaker = cfg.Breaker.withDefaults()
	if cfg.Headroom <= 0 || cfg.Headroom > 1 {
		cfg.Headroom = HeadroomDefault
	}
	cfg.WaitMax = cmp.Or(max(cfg.WaitMax, 0), WaitMaxDefault)
	cfg.Cooldown = cmp.Or(max(cfg.Cooldown, 0), CooldownDefault)
	cfg.LeaseTTL = cmp.Or(max(cfg.LeaseTTL, 0), LeaseTTLDefault)
	cfg.AdaptiveRamp = cmp.Or(cfg.AdaptiveRamp, AdaptiveRampDefault)
	cfg.CongestionMin = cmp.Or(max(cfg.CongestionMin, 0), CongestionMinDefault)
	cfg.CongestionRun = cmp.Or(max(cfg.CongestionRun, 0), CongestionRunDefault)
	if !(cfg.CongestionShare > 0 && cfg.CongestionShare <= 1) {
		cfg.CongestionShare = CongestionShareDefault
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = crand.Read(b[:])
		cfg.Holder = fmt.Sprintf("%s-%d-%s", token(host), os.Getpid(), hex.EncodeToString(b[:]))
	}
	r := &Registry{store: store, cfg: cfg, log: cfg.Log, lims: map[string]*Limiter{}, seen: map[string]State{}}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := store.Watch(r.ctx, r.observe); err != nil {
		r.cancel()
		return nil, fmt.Errorf("watch %s: %w", "rate-limit state", err)
	}
	return r, nil
}

// Close retires this process's adaptive windows from the shared state (a
// process that starts on the provider later must not take a stopped one for
// a live one), then stops watching. Limiters keep working on what they last
// saw.
func (r *Registry) Close() {
	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
	defer cancel()
	for _, l := range r.Limiters() {
		l.mu.Lock()
		published := !l.published.Expires.IsZero()
		l.mu.Unlock()
		if !published {
			continue
		}
		_, _ = r.store.Update(ctx, l.key, func(s *State) bool {
			if _, ok := s.Windows[r.cfg.Holder]; !ok {
				return false
			}
			delete(s.Windows, r.cfg.Holder)
			s.Updated = r.cfg.Clock.Now()
			return true
		})
	}
	r.cancel()
}

// Holder is this process's name in leases and probes.
func (r *Registry) Holder() string { return r.cfg.Holder }

func (r *Registry) observe(key string, s State) {
	r.mu.Lock()
	l := r.lims[key]
	if l == nil {
		r.seen[key] = s
	}
	r.mu.Unlock()
	if l != nil {
		l.observe(s)
	}
}

// For returns the limiter of cfg's provider and API key.
func (r *Registry) For(cfg provider.Config) *Limiter {
	key, _ := cfg.APIKey() // a missing key fails the call itself, with its own message
	k := Key(cfg.Name, key)
	r.mu.Lock()
	defer r.mu.Unlock()
	if l, ok := r.lims[k]; ok {
		if l.limits != cfg.Limits || l.maxWait != cfg.RetryAfterCap() {
			r.log.Warn().Str("provider", cfg.Name).Msg("two jobs give one provider key different limits; keeping the first")
		}
		return l
	}
	bc := r.cfg.Breaker.with(cfg.Limits.Breaker)
	l := &Limiter{r: r, key: k, name: cfg.Name, limits: cfg.Limits, paces: PacesOf(cfg.Limits, r.cfg.Headroom),
		breaker: bc, maxWait: cfg.RetryAfterCap(), changed: make(chan struct{}), fifo: make(chan struct{}, 1),
		recent: newTally(CongestionWindowDefault), health: newTally(bc.Window)}
	l.shared = r.seen[k]
	now := r.cfg.Clock.Now()
	l.bound(&l.shared, now)
	if !cfg.Limits.Budgeted() && !cfg.Limits.NoAdaptive {
		l.aimd = NewAIMD(r.cfg.AdaptiveInitial, r.cfg.AdaptiveMax)
		l.aimd.Ramp = r.cfg.AdaptiveRamp
		if l.others(now) {
			// Other processes are calling this provider already: their
			// calls fill what it allows, and a ramp in time would run a
			// whole window into their cohort before any answer came back.
			// This one starts small and grows by slow start instead.
			l.aimd.NoRamp()
		}
	}
	l.congestionSeen = l.shared.CongestedAt
	delete(r.seen, k)
	r.lims[k] = l
	return l
}

// Limiters returns the limiters made so far.
func (r *Registry) Limiters() []*Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Limiter, 0, len(r.lims))
	for _, l := range r.lims {
		out = append(out, l)
	}
	return out
}

// Limiter is the budget of one provider+key in this process.
type Limiter struct {
	r       *Registry
	key     string
	name    string
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
				s.Provider, s.Limits, s.Updated = l.name, l.limits, now
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
		s.Provider, s.Limits, s.Updated = l.name, l.limits, now
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
		s.Provider, s.Limits = l.name, l.limits
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
			s.Provider, s.Limits, s.Updated = l.name, l.limits, l.now()
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

// servedRate remembers the recent successes of a limiter (this process) and
// their latencies, to estimate the window the provider sustains: counts and
// latency sums in slices of servedSlice, so that its memory is fixed (a
// success each, kept for the window, was 200,000 timestamps at 40,000
// calls a second, all of them for the garbage collector to scan).
type servedRate struct {
	b [servedBuckets + 1]servedBucket
}

// servedBucket is one slice of time: its number (ns / servedSlice), its
// successes, their latencies, and when the first of them came.
type servedBucket struct {
	slice int64
	n     int
	sum   time.Duration
	first time.Time
}

func (r *servedRate) add(now time.Time, latency time.Duration) {
	slice := now.UnixNano() / int64(servedSlice)
	b := &r.b[slice%int64(len(r.b))]
	if b.slice != slice || b.n == 0 {
		*b = servedBucket{slice: slice, first: now}
	}
	b.n++
	b.sum += latency
}

// sustained is the served rate times the mean latency, by Little's law the
// calls the provider has been serving at once (+Inf when too little is
// known: the cut is then the plain multiplicative one).
func (r *servedRate) sustained(now time.Time) float64 {
	n, sum, oldest := 0, time.Duration(0), now
	for i := range r.b {
		b := &r.b[i]
		if b.n == 0 || now.Sub(b.first) > servedWindow {
			continue
		}
		n += b.n
		sum += b.sum
		if b.first.Before(oldest) {
			oldest = b.first
		}
	}
	return littles(n, sum, oldest, now)
}

// littles is the calls in flight that n successes with latencies summing
// to sum, the first at oldest, mean at now: their rate times their mean
// latency (+Inf below 10 successes).
func littles(n int, sum time.Duration, oldest, now time.Time) float64 {
	if n < 10 || sum <= 0 {
		return math.Inf(1)
	}
	span := max(now.Sub(oldest), time.Second)
	mean := sum / time.Duration(n)
	return float64(n) / span.Seconds() * mean.Seconds()
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
