package ratelimit

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
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
	l := &Limiter{r: r, key: k, name: cfg.Name, of: cfg.Of, limits: cfg.Limits, paces: PacesOf(cfg.Limits, r.cfg.Headroom),
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
