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
	// WaitMaxDefault is the longest Acquire waits out a shared cooldown or
	// an open circuit. Beyond it Acquire returns a retryable *retry.Error
	// whose RetryAfter is what is left, so the session hands the record to
	// the exec layer (a delayed redelivery) instead of holding a worker
	// slot and a delivery for many minutes.
	WaitMaxDefault = 60 * time.Second
	// CooldownDefault is the shared cooldown after a 429 that names no
	// Retry-After and no reset.
	CooldownDefault = time.Second
	// LeaseTTLDefault is how long a process's concurrency leases outlive
	// its last change: the leases of a process that died lapse after it.
	LeaseTTLDefault = 5 * time.Minute
	// JitterMaxDefault caps the spread of resumptions after a cooldown or an
	// open circuit (a tenth of the wait, at least 50 ms, at most this).
	JitterMaxDefault = 2 * time.Second
	// leasePoll is how often a waiter for a concurrency slot looks again
	// when no change was seen (a lease that lapsed produces no event).
	leasePoll = 250 * time.Millisecond
)

// Config configures a Registry. Zero fields take their defaults.
type Config struct {
	Log      zerolog.Logger
	Clock    retry.Clock    // retry.SystemClock
	Jitter   func() float64 // [0,1); math/rand/v2
	Breaker  BreakerConfig
	Headroom float64       // HeadroomDefault
	WaitMax  time.Duration // WaitMaxDefault
	Cooldown time.Duration // CooldownDefault
	LeaseTTL time.Duration // LeaseTTLDefault
	// AdaptiveInitial and AdaptiveMax bound adaptive concurrency
	// (AdaptiveInitialDefault, AdaptiveMaxDefault).
	AdaptiveInitial, AdaptiveMax int
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
	if cfg.WaitMax <= 0 {
		cfg.WaitMax = WaitMaxDefault
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = CooldownDefault
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = LeaseTTLDefault
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

// Close stops watching. Limiters keep working on what they last saw.
func (r *Registry) Close() { r.cancel() }

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
		if l.limits != cfg.Limits {
			r.log.Warn().Str("provider", cfg.Name).Msg("two jobs give one provider key different limits; keeping the first")
		}
		return l
	}
	l := &Limiter{r: r, key: k, name: cfg.Name, limits: cfg.Limits, paces: PacesOf(cfg.Limits, r.cfg.Headroom),
		changed: make(chan struct{}), fifo: make(chan struct{}, 1)}
	if !cfg.Limits.Budgeted() && !cfg.Limits.NoAdaptive {
		l.aimd = NewAIMD(r.cfg.AdaptiveInitial, r.cfg.AdaptiveMax)
	}
	l.shared = r.seen[k]
	l.cooldownSeen = l.shared.CooldownSet
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
	r      *Registry
	key    string
	name   string
	limits provider.Limits
	paces  Paces
	fifo   chan struct{} // one local waiter books in the shared schedule at a time

	mu       sync.Mutex
	shared   State
	changed  chan struct{} // closed and replaced on every change
	aimd     *AIMD         // nil when limits are configured
	inflight int           // this process's calls in flight
	failures int           // consecutive server/network failures
	probing  bool          // a caller here is (or is becoming) the probe
	// localCooldown is a cooldown this process saw a 429 ask for and is
	// writing to the store: it holds local callers back at once, because a
	// 429 comes back in a millisecond and a window would otherwise refill
	// with calls that meet the same 429 during the write.
	localCooldown time.Time
	// cooldownSeen is the CooldownSet of the last shared cooldown that cut AIMD.
	cooldownSeen time.Time
	served       servedRate // successes and latency, for AIMD cuts

	calls, absorbed, waited atomic.Int64
}

// Key is the limiter's KV key.
func (l *Limiter) Key() string { return l.key }

// Limited reports whether an rpm, tpm or concurrency budget is configured
// (false: adaptive concurrency, or none with adaptive: false).
func (l *Limiter) Limited() bool { return l.limits.Budgeted() }

func (l *Limiter) now() time.Time { return l.r.cfg.Clock.Now() }

// observe records a state seen in the store.
func (l *Limiter) observe(s State) {
	l.mu.Lock()
	if s.Updated.Before(l.shared.Updated) {
		l.mu.Unlock()
		return // an older state than one we wrote ourselves
	}
	prev := l.shared.Breaker.State
	l.shared = s
	if l.aimd != nil && s.CooldownSet.After(l.cooldownSeen) {
		// A new shared cooldown, set by a 429 here or in another process:
		// every process cuts, once per cooldown.
		l.cooldownSeen = s.CooldownSet
		l.aimd.OverloadTo(s.CooldownSet, l.now(), l.served.sustained(l.now()))
	}
	l.notifyLocked()
	l.mu.Unlock()
	if s.Breaker.State != prev && !(prev == "" && s.Breaker.State == CircuitClosed) {
		ev := l.r.log.Info()
		if s.Breaker.State == CircuitOpen {
			ev = l.r.log.Warn()
		}
		ev.Str("provider", l.name).Str("circuit", s.Breaker.State).Time("until", s.Breaker.Until).
			Str("last_error", s.Breaker.LastError).Msg("circuit " + strings.ReplaceAll(s.Breaker.State, "_", "-"))
	}
}

func (l *Limiter) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

func (l *Limiter) view() (State, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.shared
	if l.localCooldown.After(s.CooldownUntil) {
		s.CooldownUntil = l.localCooldown
	}
	return s, l.changed
}

// wait sleeps d (d ≤ 0: until a change) or until the limiter's state
// changes, whichever is first. It returns ctx.Err() when ctx is done.
func (l *Limiter) wait(ctx context.Context, d time.Duration, changed <-chan struct{}) error {
	if d <= 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			return nil
		}
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

// ErrCircuitOpen is wrapped by the error Acquire returns when a provider's
// circuit stays open past Config.WaitMax.
var ErrCircuitOpen = errors.New("circuit open")

// ErrCoolingDown is wrapped by the error Acquire returns when a provider's
// shared cooldown lasts past Config.WaitMax.
var ErrCoolingDown = errors.New("shared cooldown")

// Acquire waits until a call of about tokens tokens may go (0: unknown),
// and returns its permit. It waits for an open circuit, a shared cooldown,
// a concurrency slot and a slot in the rpm/tpm schedule. It returns
// ctx.Err() when ctx is done, and a retryable *retry.Error (rate_limit for a
// cooldown, server for an open circuit, with RetryAfter set and wrapping
// ErrCoolingDown or ErrCircuitOpen) when it would have to wait longer than
// Config.WaitMax.
func (l *Limiter) Acquire(ctx context.Context, tokens int) (*Permit, error) {
	start := l.now()
	cfg := l.r.cfg
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := l.now()
		s, changed := l.view()
		probe := false
		if b := s.Breaker; !b.Closed() {
			var until time.Time
			switch {
			case b.State == CircuitOpen && now.Before(b.Until):
				until = b.Until
			case b.State == CircuitHalfOpen && now.Before(b.ProbeUntil) && (b.Probe != cfg.Holder || l.isProbing()):
				until = b.ProbeUntil
			}
			if !until.IsZero() {
				// A probe in flight ends soon (ProbeUntil is only the lease
				// of a probe whose process may have died): wait for it.
				if b.State == CircuitOpen && until.Sub(start) > cfg.WaitMax {
					return nil, l.waitErr(retry.ClassServer, "CircuitOpenError", ErrCircuitOpen, until.Sub(now), b.LastError)
				}
				l.waited.Add(1)
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
			if s.CooldownUntil.Sub(start) > cfg.WaitMax {
				l.releaseProbe(probe)
				return nil, l.waitErr(retry.ClassRateLimit, "RateLimitError", ErrCoolingDown, s.CooldownUntil.Sub(now), s.CooldownCause)
			}
			l.waited.Add(1)
			d := s.CooldownUntil.Sub(now)
			if !l.limits.Budgeted() {
				d += l.jitter(d) // the paced schedule spreads limited waiters by itself
			}
			if err := l.wait(ctx, d, nil); err != nil {
				l.releaseProbe(probe)
				return nil, err
			}
			if probe {
				return l.admit(ctx, tokens, true)
			}
			continue
		}
		p, again, err := l.admitOnce(ctx, tokens, probe, changed)
		if err != nil || !again {
			return p, err
		}
	}
}

// admit is admitOnce until it admits.
func (l *Limiter) admit(ctx context.Context, tokens int, probe bool) (*Permit, error) {
	for {
		_, changed := l.view()
		p, again, err := l.admitOnce(ctx, tokens, probe, changed)
		if err != nil || !again {
			return p, err
		}
	}
}

// admitOnce tries to take a slot: the shared schedule and leases with
// limits, the AIMD window without, nothing with adaptive: false. again is true when the caller must look
// at the state again (it waited for a slot, or a cooldown began).
func (l *Limiter) admitOnce(ctx context.Context, tokens int, probe bool, changed <-chan struct{}) (_ *Permit, again bool, _ error) {
	if l.limits.Budgeted() {
		return l.book(ctx, tokens, probe)
	}
	if l.aimd == nil { // adaptive: false: no window, no shared schedule
		l.calls.Add(1)
		return &Permit{l: l, started: l.now(), tokens: tokens, probe: probe}, false, nil
	}
	l.mu.Lock()
	if probe || l.inflight < l.aimd.Limit() {
		l.inflight++
		p := &Permit{l: l, started: l.now(), inflightAt: l.inflight, tokens: tokens, probe: probe}
		l.mu.Unlock()
		l.calls.Add(1)
		return p, false, nil
	}
	ch := l.changed
	l.mu.Unlock()
	l.waited.Add(1)
	if err := l.wait(ctx, 0, ch); err != nil {
		return nil, false, err
	}
	return nil, true, nil
}

// book reserves a slot in the shared schedule (and a concurrency lease),
// then sleeps until the slot.
func (l *Limiter) book(ctx context.Context, tokens int, probe bool) (_ *Permit, again bool, _ error) {
	cfg := l.r.cfg
	select {
	case l.fifo <- struct{}{}:
	case <-ctx.Done():
		l.releaseProbe(probe)
		return nil, false, ctx.Err()
	}
	var at time.Time
	var full, blocked bool
	_, changed := l.view()
	st, err := l.r.store.Update(ctx, l.key, func(s *State) bool {
		now := l.now()
		at, full, blocked = time.Time{}, false, false
		if s.Cooling(now) || (!probe && !s.Breaker.Closed()) {
			blocked = true
			return false
		}
		if c := l.limits.Concurrency; c > 0 && s.InFlight(now) >= c {
			full = true
			return false
		}
		s.Provider, s.Limits = l.name, l.limits
		at = l.paces.reserve(s, now, tokens)
		if l.limits.Concurrency > 0 {
			l.lease(s, now, +1)
		}
		s.Updated = now
		return true
	})
	if err != nil {
		<-l.fifo
		if ctx.Err() != nil {
			l.releaseProbe(probe)
			return nil, false, ctx.Err()
		}
		// The shared store is unreachable: fail open rather than stop every
		// call; a 429 that follows is still absorbed and cools this process.
		l.r.log.Warn().Err(err).Str("provider", l.name).Msg("rate-limit state unavailable; calling without the shared budget")
		l.calls.Add(1)
		return &Permit{l: l, started: l.now(), tokens: tokens, probe: probe}, false, nil
	}
	l.observe(st)
	if blocked {
		<-l.fifo
		return nil, true, nil
	}
	if full {
		// Keep the FIFO: only this waiter polls; the others queue behind it.
		l.waited.Add(1)
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
				s.Breaker.State, s.Breaker.Until, s.Breaker.Probe = CircuitOpen, now, ""
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
		got = l.r.cfg.Breaker.tryProbe(&s.Breaker, l.now(), l.r.cfg.Holder)
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
		s.Breaker.State, s.Breaker.Until, s.Breaker.Probe = CircuitOpen, l.now(), ""
		s.Updated = l.now()
		return true
	})
	if err == nil {
		l.observe(st)
	}
}

func (l *Limiter) waitErr(class retry.Class, typ string, cause error, left time.Duration, detail string) *retry.Error {
	msg := fmt.Sprintf("%s: provider %s is in a %s for another %s", cause, l.name, cause, left.Round(time.Second))
	if detail != "" {
		msg += " (" + detail + ")"
	}
	return &retry.Error{Class: class, TypeName: typ, Message: msg, RetryAfter: left, Provider: l.name, Err: cause}
}

// Done reports the outcome of the permit's call: its usage and its error
// (nil on success). It releases the concurrency lease, corrects the token
// estimate by the usage reported, adapts the concurrency, sets the shared
// cooldown on a 429 and drives the circuit breaker. Done is idempotent.
func (p *Permit) Done(usage provider.Usage, err error) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	l := p.l
	if p.probe {
		defer l.setProbing(false)
	}
	cfg := l.r.cfg
	now := l.now()
	e := retry.AsError(err)
	var class retry.Class
	if e != nil {
		class = e.Class
	}
	canceled := err != nil && errors.Is(err, context.Canceled)
	overload := class == retry.ClassRateLimit || (class == retry.ClassServer && Overloaded(e))
	failure := !canceled && (class == retry.ClassServer || class == retry.ClassNetwork)

	l.mu.Lock()
	if class == retry.ClassRateLimit {
		wait := e.Wait()
		if wait <= 0 {
			wait = cfg.Cooldown
		}
		if until := now.Add(wait); until.After(l.localCooldown) {
			l.localCooldown = until
		}
	}
	if l.aimd != nil {
		l.inflight--
		switch {
		case overload && class != retry.ClassRateLimit:
			// A 429 cuts through the shared cooldown it sets (observe), so
			// that every process cuts once for it.
			if l.aimd.Overload(p.started, now) {
				l.r.log.Debug().Str("provider", l.name).Float64("limit", l.aimd.Value()).Msg("adaptive concurrency cut")
			}
		case err == nil:
			l.aimd.Success(p.inflightAt)
			l.served.add(now, now.Sub(p.started))
		}
	}
	switch {
	case failure:
		l.failures++
	case !canceled:
		l.failures = 0
	}
	trip := failure && cfg.Breaker.Failures > 0 && l.failures >= cfg.Breaker.Failures && l.shared.Breaker.Closed()
	l.notifyLocked()
	l.mu.Unlock()

	actual := usage.InputTokens + usage.OutputTokens
	correct := l.paces.Tok.On() && actual > 0 && actual != p.tokens
	if !(p.lease || correct || class == retry.ClassRateLimit || trip || p.probe) {
		return
	}
	ctx := l.r.ctx
	st, uerr := l.r.store.Update(ctx, l.key, func(s *State) bool {
		now := l.now()
		s.Provider, s.Limits = l.name, l.limits
		if p.lease {
			l.lease(s, now, -1)
		}
		if correct {
			s.TokTAT = l.paces.Tok.Adjust(s.TokTAT, now, actual-p.tokens)
		}
		if class == retry.ClassRateLimit {
			wait := e.Wait()
			if wait <= 0 {
				wait = cfg.Cooldown
			}
			until := now.Add(wait)
			switch {
			case !p.started.Before(s.CooldownUntil):
				// A new event: the call went after the last cooldown ended.
				s.CooldownUntil = until
				s.CooldownCause = e.Error()
				s.CooldownSet = now
				s.Cooldowns++
				l.paces.afterCooldown(s, until)
			case until.After(s.CooldownUntil):
				// The cohort of calls sent before the cooldown was seen: the
				// same event; it may only ask for a longer wait.
				s.CooldownUntil = until
				l.paces.afterCooldown(s, until)
			}
		}
		switch {
		case p.probe && s.Breaker.State == CircuitHalfOpen && s.Breaker.Probe == cfg.Holder:
			if failure {
				cfg.Breaker.open(&s.Breaker, now, e.Error())
			} else if canceled {
				s.Breaker.State, s.Breaker.Until, s.Breaker.Probe = CircuitOpen, now, ""
			} else {
				s.Breaker.close()
			}
		case trip && s.Breaker.Closed():
			cfg.Breaker.open(&s.Breaker, now, e.Error())
		}
		s.Updated = now
		return true
	})
	if uerr != nil {
		l.r.log.Warn().Err(uerr).Str("provider", l.name).Msg("rate-limit state not updated")
		return
	}
	l.observe(st)
	if trip || p.probe {
		l.mu.Lock()
		if st.Breaker.Closed() {
			l.failures = 0
		}
		l.mu.Unlock()
	}
}

// Overloaded reports whether a server error says the provider is overloaded
// (529, 503, overloaded_error, UNAVAILABLE): adaptive concurrency cuts on it
// as on a 429.
func Overloaded(e *retry.Error) bool {
	if e == nil {
		return false
	}
	return e.Status == 529 || e.Status == 503 || strings.Contains(strings.ToLower(e.ProviderType), "overloaded") ||
		e.ProviderType == "UNAVAILABLE"
}

// Status is what a Limiter shows to metrics, logs and `jetpool status`.
type Status struct {
	Key      string        `json:"key"`
	Provider string        `json:"provider"`
	Mode     string        `json:"mode"`  // "limits", "adaptive", or "none" (adaptive: false)
	Limit    float64       `json:"limit"` // adaptive concurrency (this process) or limits.concurrency
	InFlight int           `json:"in_flight"`
	Circuit  string        `json:"circuit"`
	Cooldown time.Duration `json:"cooldown"` // left of the shared cooldown
	Calls    int64         `json:"calls"`    // permits granted
	Absorbed int64         `json:"absorbed"` // 429s absorbed (see Absorbed)
	Waited   int64         `json:"waited"`   // times a caller had to wait
}

// Status returns the limiter's status now.
func (l *Limiter) Status() Status {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Status{Key: l.key, Provider: l.name, Mode: "limits", Limit: float64(l.limits.Concurrency),
		InFlight: l.shared.InFlight(now), Circuit: cmp.Or(l.shared.Breaker.State, CircuitClosed),
		Calls: l.calls.Load(), Absorbed: l.absorbed.Load(), Waited: l.waited.Load()}
	switch {
	case l.aimd != nil:
		st.Mode, st.Limit, st.InFlight = "adaptive", l.aimd.Value(), l.inflight
	case !l.limits.Budgeted():
		st.Mode = "none" // adaptive: false
	}
	if l.shared.Cooling(now) {
		st.Cooldown = l.shared.CooldownUntil.Sub(now)
	}
	return st
}

// Absorbed counts a 429 that the caller absorbed (waited out and re-issued
// without failing the attempt).
func (l *Limiter) Absorbed() { l.absorbed.Add(1) }

// WaitMax is the registry's Config.WaitMax.
func (l *Limiter) WaitMax() time.Duration { return l.r.cfg.WaitMax }

// CircuitOpen reports whether the circuit is open now with no probe due:
// a pool may stop pulling this provider's work.
func (l *Limiter) CircuitOpen() bool {
	s, _ := l.view()
	return s.Breaker.State == CircuitOpen && l.now().Before(s.Breaker.Until)
}

// servedWindow is how far back servedRate looks.
const servedWindow = 5 * time.Second

// servedRate remembers the recent successes of a limiter (this process) and
// the shortest latency, to estimate the window the provider sustains.
type servedRate struct {
	at      []time.Time
	latency time.Duration // minimum over the window
}

func (r *servedRate) add(now time.Time, latency time.Duration) {
	r.trim(now)
	if len(r.at) == 0 || latency < r.latency {
		r.latency = latency
	}
	r.at = append(r.at, now)
}

func (r *servedRate) trim(now time.Time) {
	i := 0
	for i < len(r.at) && now.Sub(r.at[i]) > servedWindow {
		i++
	}
	r.at = r.at[i:]
}

// sustained is the served rate times the minimum latency (+Inf when too
// little is known: the cut is then the plain multiplicative one).
func (r *servedRate) sustained(now time.Time) float64 {
	r.trim(now)
	if len(r.at) < 10 || r.latency <= 0 {
		return math.Inf(1)
	}
	span := max(now.Sub(r.at[0]), time.Second)
	return float64(len(r.at)) / span.Seconds() * r.latency.Seconds()
}
