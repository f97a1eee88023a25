package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

func TestPaceOf(t *testing.T) {
	t.Parallel()
	p := PaceOf(600, 1)
	require.Equal(t, 100*time.Millisecond, p.Interval)
	require.Equal(t, 10, p.Burst)
	p = PaceOf(30, 1) // one every 2 s, never a burst of zero
	require.Equal(t, 2*time.Second, p.Interval)
	require.Equal(t, 1, p.Burst)
	require.False(t, PaceOf(0, 1).On())
	// The default headroom schedules 97% of the limit.
	require.InDelta(t, float64(time.Second)/(20*0.97), float64(PaceOf(1200, 0).Interval), 1)
}

func TestPaceReserve(t *testing.T) {
	t.Parallel()
	p := PaceOf(600, 1) // 10/s, burst 10
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var tat time.Time
	var at time.Time
	// A burst of 10 goes at once; then one every 100 ms.
	for i := range 10 {
		at, tat = p.Reserve(tat, t0, 1)
		require.Equal(t, t0, at, "burst unit %d", i)
	}
	for i := range 5 {
		at, tat = p.Reserve(tat, t0, 1)
		require.Equal(t, t0.Add(time.Duration(i+1)*100*time.Millisecond), at, "paced unit %d", i)
	}
	// Idle time refills the burst, but never more than the burst.
	t1 := t0.Add(time.Hour)
	for range 10 {
		at, tat = p.Reserve(tat, t1, 1)
		require.Equal(t, t1, at)
	}
	at, _ = p.Reserve(tat, t1, 1)
	require.Equal(t, t1.Add(100*time.Millisecond), at)
}

func TestPaceDebtAndAdjust(t *testing.T) {
	t.Parallel()
	p := PaceOf(6000, 1) // 100 tokens/s, burst 100
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	// A request far above the burst goes when the schedule allows it...
	at, tat := p.Reserve(time.Time{}, t0, 500)
	require.Equal(t, t0, at)
	// ...and pushes the next one into its debt: 500 tokens at 100/s, less the burst.
	at, _ = p.Reserve(tat, t0, 1)
	require.Equal(t, t0.Add(5*time.Second-99*10*time.Millisecond), at)
	// The usage came back at 200 tokens: 300 are given back.
	tat = p.Adjust(tat, t0, 200-500)
	require.Equal(t, t0.Add(2*time.Second), tat)
	// A call that used more than booked pushes the schedule.
	require.Equal(t, t0.Add(3*time.Second), p.Adjust(tat, t0, 100))
	// Giving back never moves the schedule before now.
	require.Equal(t, t0, p.Adjust(t0.Add(time.Second), t0, -1000))
}

func TestEstimate(t *testing.T) {
	t.Parallel()
	req := provider.Request{System: "1234", Messages: []provider.Message{{Role: "user", Content: "12345678"}}}
	require.Equal(t, (4+8+4)/4+1+OutputTokensDefault, Estimate(req))
	req.Params = map[string]any{"max_tokens": 10}
	require.Equal(t, (4+8+4)/4+1+10, Estimate(req))
	req.Params = map[string]any{"max_completion_tokens": float64(20)}
	require.Equal(t, (4+8+4)/4+1+20, Estimate(req))
}

func TestKeyHidesTheAPIKey(t *testing.T) {
	t.Parallel()
	k := Key("groq", "sk-secret-123")
	require.NotContains(t, k, "secret")
	require.Regexp(t, `^groq\.[0-9a-f]{12}$`, k)
	require.NotEqual(t, k, Key("groq", "sk-other"))
	require.Equal(t, "my_provider.nokey", Key("my provider", ""))
	require.Equal(t, "my_provider", ProviderOf("my_provider.nokey"))
}

func TestAIMD(t *testing.T) {
	t.Parallel()
	a := NewAIMD(4, 100)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	// An idle limit does not grow.
	a.Success(1)
	require.Equal(t, 4, a.Limit())
	// Slow start: +1 per success when at least half the window is in use
	// (in a real cohort about half count: ×1.5 per round trip).
	for range 4 {
		a.Success(a.Limit())
	}
	require.Equal(t, 8, a.Limit())
	a.Success(3)
	require.Equal(t, 8, a.Limit(), "a window less than half used does not grow")
	// A 429 cuts once per epoch.
	require.True(t, a.Overload(t0, t0.Add(time.Millisecond)))
	require.InDelta(t, 8*AdaptiveBetaDefault, a.Value(), 1e-9)
	require.False(t, a.Overload(t0, t0.Add(2*time.Millisecond)), "a call sent before the cut does not cut again")
	require.True(t, a.Overload(t0.Add(time.Second), t0.Add(time.Second)))
	// Back to the level of the last cut it grows by one per round trip,
	// above it by one per AdaptiveProbeDefault round trips.
	b := NewAIMD(10, 100)
	b.Overload(t0, t0) // ceiling 10, limit 7
	rounds := 0
	for b.Value() < 10 {
		for range b.Limit() {
			b.Success(b.Limit())
		}
		rounds++
	}
	require.LessOrEqual(t, rounds, 4)
	rounds = 0
	for b.Value() < 11 {
		for range b.Limit() {
			b.Success(b.Limit())
		}
		rounds++
	}
	require.GreaterOrEqual(t, rounds, AdaptiveProbeDefault-1)
	require.Equal(t, 1, NewAIMD(1, 1).Limit())
}

// TestAIMDConverges drives AIMD against a provider that serves at most
// capacity calls at once and answers the rest 429: the limit settles around
// the capacity rather than running away or collapsing.
func TestAIMDConverges(t *testing.T) {
	t.Parallel()
	const capacity = 12
	a := NewAIMD(4, 256)
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var over, calls int
	var lows []int
	for round := range 200 {
		now = now.Add(time.Second)
		n := a.Limit()
		for i := range n {
			calls++
			if i >= capacity {
				over++
				a.Overload(now, now)
			} else {
				a.Success(n)
			}
		}
		if round >= 100 {
			lows = append(lows, a.Limit())
		}
	}
	for _, l := range lows {
		require.GreaterOrEqual(t, l, capacity*6/10)
		require.LessOrEqual(t, l, capacity+2)
	}
	require.Less(t, float64(over)/float64(calls), 0.05, "429s are a small share of calls")
}

// Without an explicit start the limit starts at AdaptiveStartDefault (or
// the maximum when lower) and slow start takes it from there; the first
// overload cuts to what the provider sustained.
func TestAIMDDefaultStart(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2, NewAIMD(0, 2).Limit())
	require.Equal(t, AdaptiveStartDefault, NewAIMD(0, 64).Limit())
	a := NewAIMD(32, 64)
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	require.True(t, a.OverloadTo(now.Add(-time.Millisecond), now, 10))
	require.Equal(t, 10, a.Limit(), "the first overload cuts to what the provider sustained")
}

func newTestRegistry(t *testing.T, store Store, clock retry.Clock, mod ...func(*Config)) *Registry {
	t.Helper()
	cfg := Config{Clock: clock, Jitter: func() float64 { return 0.5 }}
	for _, m := range mod {
		m(&cfg)
	}
	r, err := NewRegistry(context.Background(), store, cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

func TestLimiterPacesRPM(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Headroom = 1 })
	l := r.For(provider.Config{Name: "p", Limits: provider.Limits{RPM: 600}})
	require.True(t, l.Limited())
	t0 := clock.Now()
	for range 100 {
		p, err := l.Acquire(context.Background(), 10)
		require.NoError(t, err)
		p.Done(provider.Usage{}, nil)
	}
	// 10 in the first burst, then 90 at 100 ms.
	require.Equal(t, 9*time.Second, clock.Now().Sub(t0))
}

func TestLimiterPacesTPMWithCorrection(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Headroom = 1 })
	l := r.For(provider.Config{Name: "p", Limits: provider.Limits{TPM: 60_000}}) // 1000/s, burst 1000
	t0 := clock.Now()
	// Booked at 1000 tokens each but each used 100: the schedule gets 900 back each time.
	for range 20 {
		p, err := l.Acquire(context.Background(), 1000)
		require.NoError(t, err)
		p.Done(provider.Usage{InputTokens: 60, OutputTokens: 40}, nil)
	}
	require.LessOrEqual(t, clock.Now().Sub(t0), 2*time.Second)
	// Without the correction the same 20 calls take 19 s less the burst.
	clock2 := newFakeClock()
	r2 := newTestRegistry(t, NewMemStore(), clock2, func(c *Config) { c.Headroom = 1 })
	l2 := r2.For(provider.Config{Name: "p", Limits: provider.Limits{TPM: 60_000}})
	for range 20 {
		p, err := l2.Acquire(context.Background(), 1000)
		require.NoError(t, err)
		p.Done(provider.Usage{}, nil)
	}
	require.Equal(t, 19*time.Second-999*time.Millisecond, clock2.slept)
}

func rateLimited(after time.Duration) error {
	return &retry.Error{Class: retry.ClassRateLimit, Status: 429, Message: "slow down", RetryAfter: after}
}

func TestSharedCooldown(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	a := newTestRegistry(t, store, clock).For(provider.Config{Name: "p"})
	b := newTestRegistry(t, store, clock).For(provider.Config{Name: "p"})
	p, err := a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Usage{}, rateLimited(3*time.Second))
	require.Equal(t, 3*time.Second, b.Status().Cooldown, "the other process sees the cooldown")

	t0 := clock.Now()
	p, err = b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	waited := clock.Now().Sub(t0)
	// Until the reset, plus jitter (half of a quarter of the wait here).
	require.Equal(t, 3*time.Second+3*time.Second/20, waited) // the reset, plus jitter (half of a tenth of the wait)
	p.Done(provider.Usage{}, nil)

	// A 429 without headers cools down for CooldownDefault.
	p, err = a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Usage{}, &retry.Error{Class: retry.ClassRateLimit, Status: 429})
	require.Equal(t, CooldownDefault, b.Status().Cooldown)
}

func TestCooldownCohortDoesNotExtend(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock).For(provider.Config{Name: "p"})
	p1, err := l.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p2, err := l.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p1.Done(provider.Usage{}, rateLimited(time.Second))
	clock.Advance(500 * time.Millisecond)
	// p2 was sent before the cooldown began: its 429 is the same event (no
	// second cut, no new count); it may only ask for a longer wait.
	p2.Done(provider.Usage{}, rateLimited(time.Second))
	require.Equal(t, time.Second, l.Status().Cooldown)
	st, _ := l.view()
	require.Equal(t, 1, st.Cooldowns)
}

func TestCooldownBeyondWaitMaxHandsBack(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock).For(provider.Config{Name: "p"})
	p, err := l.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Usage{}, rateLimited(10*time.Minute))
	_, err = l.Acquire(context.Background(), 0)
	var e *retry.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, retry.ClassRateLimit, e.Class)
	require.Equal(t, 10*time.Minute, e.RetryAfter)
	require.ErrorIs(t, err, ErrCoolingDown)
}

func TestLimitedCooldownRestartsPaced(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Headroom = 1 }).
		For(provider.Config{Name: "p", Limits: provider.Limits{RPM: 600}})
	p, err := l.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Usage{}, rateLimited(2*time.Second))
	t0 := clock.Now()
	var at []time.Duration
	for range 3 {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		at = append(at, clock.Now().Sub(t0))
		p.Done(provider.Usage{}, nil)
	}
	// No burst after a cooldown: the first at its end, then one per 100 ms.
	require.Equal(t, []time.Duration{2 * time.Second, 2100 * time.Millisecond, 2200 * time.Millisecond}, at)
}

func serverErr() error {
	return &retry.Error{Class: retry.ClassServer, Status: 500, Message: "boom"}
}

func TestBreakerOpensProbesCloses(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	cfg := func(c *Config) { c.Breaker = BreakerConfig{Failures: 3, Cooldown: 10 * time.Second} }
	a := newTestRegistry(t, store, clock, cfg).For(provider.Config{Name: "p"})
	b := newTestRegistry(t, store, clock, cfg).For(provider.Config{Name: "p"})
	fail := func(l *Limiter) {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		p.Done(provider.Usage{}, serverErr())
	}
	fail(a)
	fail(a)
	require.Equal(t, CircuitClosed, a.Status().Circuit)
	fail(a)
	require.Equal(t, CircuitOpen, b.Status().Circuit, "the circuit is shared")
	require.True(t, b.CircuitOpen())

	// The next call waits for the cooldown and is the one probe.
	t0 := clock.Now()
	probe, err := b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.True(t, probe.Probe())
	require.GreaterOrEqual(t, clock.Now().Sub(t0), 10*time.Second)
	require.Equal(t, CircuitHalfOpen, a.Status().Circuit)

	// While it runs, the other process waits (here: its wait times out).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = a.Acquire(ctx, 0)
	require.ErrorIs(t, err, context.Canceled)

	// The probe fails: open again, for twice as long.
	probe.Done(provider.Usage{}, serverErr())
	require.Equal(t, CircuitOpen, a.Status().Circuit)
	t1 := clock.Now()
	probe, err = a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.True(t, probe.Probe())
	require.GreaterOrEqual(t, clock.Now().Sub(t1), 20*time.Second)
	// It succeeds: closed, and calls flow at once.
	probe.Done(provider.Usage{}, nil)
	require.Equal(t, CircuitClosed, b.Status().Circuit)
	t2 := clock.Now()
	p, err := b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.False(t, p.Probe())
	require.Equal(t, t2, clock.Now())
	p.Done(provider.Usage{}, nil)
}

func TestBreakerIgnoresOtherClasses(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Breaker.Failures = 2 }).For(provider.Config{Name: "p"})
	for _, err := range []error{serverErr(), &retry.Error{Class: retry.ClassAuth, Status: 401}, serverErr(),
		&retry.Error{Class: retry.ClassNetwork, Err: context.Canceled}} {
		p, aerr := l.Acquire(context.Background(), 0)
		require.NoError(t, aerr)
		p.Done(provider.Usage{}, err)
	}
	require.Equal(t, CircuitClosed, l.Status().Circuit, "a 401 resets the count; a cancellation is no failure")
}

func TestSharedConcurrency(t *testing.T) {
	t.Parallel()
	store := NewMemStore()
	clock := retry.SystemClock{}
	a := newTestRegistry(t, store, clock).For(provider.Config{Name: "p", Limits: provider.Limits{Concurrency: 3}})
	b := newTestRegistry(t, store, clock).For(provider.Config{Name: "p", Limits: provider.Limits{Concurrency: 3}})
	ctx := context.Background()
	p1, err := a.Acquire(ctx, 0)
	require.NoError(t, err)
	p2, err := b.Acquire(ctx, 0)
	require.NoError(t, err)
	p3, err := a.Acquire(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 3, b.Status().InFlight)

	got := make(chan *Permit)
	go func() {
		p, err := b.Acquire(ctx, 0)
		if err != nil {
			close(got)
			return
		}
		got <- p
	}()
	select {
	case <-got:
		t.Fatal("a fourth call ran while three were in flight")
	case <-time.After(100 * time.Millisecond):
	}
	p2.Done(provider.Usage{}, nil)
	select {
	case p4 := <-got:
		require.NotNil(t, p4)
		p4.Done(provider.Usage{}, nil)
	case <-time.After(5 * time.Second):
		t.Fatal("the fourth call did not get the released slot")
	}
	p1.Done(provider.Usage{}, nil)
	p3.Done(provider.Usage{}, nil)
	require.Equal(t, 0, a.Status().InFlight)
}

func TestLeaseOfDeadProcessLapses(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	lim := provider.Limits{Concurrency: 1}
	dead := newTestRegistry(t, store, clock).For(provider.Config{Name: "p", Limits: lim})
	_, err := dead.Acquire(context.Background(), 0) // never Done: its process died
	require.NoError(t, err)
	live := newTestRegistry(t, store, clock).For(provider.Config{Name: "p", Limits: lim})
	t0 := clock.Now()
	p, err := live.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, clock.Now().Sub(t0), LeaseTTLDefault)
	p.Done(provider.Usage{}, nil)
}

func TestAdaptiveWindow(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.AdaptiveInitial = 2 }).For(provider.Config{Name: "p"})
	require.False(t, l.Limited())
	ctx := context.Background()
	p1, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	p2, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(cctx, 0)
	require.True(t, errors.Is(err, context.DeadlineExceeded), "the window is full: %v", err)
	p1.Done(provider.Usage{}, nil)
	p2.Done(provider.Usage{}, nil)
	require.Equal(t, 4.0, l.Status().Limit, "slow start grew the full window (+1 per success)")
	p3, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	p3.Done(provider.Usage{}, rateLimited(0))
	require.InDelta(t, 4*AdaptiveBetaDefault, l.Status().Limit, 1e-9)
}

// `limits: {adaptive: false}`: no adaptive window, no budget; a 429 still
// cools every caller down.
func TestAdaptiveOff(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	l := newTestRegistry(t, store, clock, func(c *Config) { c.AdaptiveInitial = 2 }).
		For(provider.Config{Name: "p", Limits: provider.Limits{NoAdaptive: true}})
	require.False(t, l.Limited(), "no budget: a 429 with retry off still fails its attempt")
	require.Equal(t, "none", l.Status().Mode)
	ctx := context.Background()
	var ps []*Permit
	for range 50 { // far beyond the adaptive start of 2: nothing waits
		p, err := l.Acquire(ctx, 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	states, err := store.List(ctx)
	require.NoError(t, err)
	require.Empty(t, states, "admitting a call writes no shared state")
	ps[0].Done(provider.Usage{}, rateLimited(2*time.Second))
	for _, p := range ps[1:] {
		p.Done(provider.Usage{}, nil)
	}
	t0 := clock.Now()
	p, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, clock.Now().Sub(t0), 2*time.Second, "waited out the cooldown")
	p.Done(provider.Usage{}, nil)
}
