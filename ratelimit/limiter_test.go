package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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
		p.Done(provider.Response{}, nil)
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
		p.Done(provider.Response{Usage: provider.Usage{InputTokens: 60, OutputTokens: 40}}, nil)
	}
	require.LessOrEqual(t, clock.Now().Sub(t0), 2*time.Second)
	// Without the correction the same 20 calls take 19 s less the burst.
	clock2 := newFakeClock()
	r2 := newTestRegistry(t, NewMemStore(), clock2, func(c *Config) { c.Headroom = 1 })
	l2 := r2.For(provider.Config{Name: "p", Limits: provider.Limits{TPM: 60_000}})
	for range 20 {
		p, err := l2.Acquire(context.Background(), 1000)
		require.NoError(t, err)
		p.Done(provider.Response{}, nil)
	}
	require.Equal(t, 19*time.Second-999*time.Millisecond, clock2.slept)
}

func rateLimited(after time.Duration) error {
	return &retry.Error{Class: retry.ClassRateLimit, Status: 429, Message: "slow down", RetryAfter: after}
}

// congest makes two calls on l that both meet a 429 asking to wait after:
// congestion, not a one-off.
func congest(t *testing.T, l *Limiter, after time.Duration) {
	t.Helper()
	p1, err := l.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p2, err := l.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p1.Done(provider.Response{}, rateLimited(after))
	p2.Done(provider.Response{}, rateLimited(after))
}

// 429s that are congestion (two of two answers) cool down every process
// sharing the provider until the provider's wait, plus jitter.
func TestSharedCooldown(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	a := newTestRegistry(t, store, clock).For(provider.Config{Name: "p"})
	b := newTestRegistry(t, store, clock).For(provider.Config{Name: "p"})
	congest(t, a, 3*time.Second)
	require.Equal(t, 3*time.Second, b.Status().Cooldown, "the other process sees the cooldown")
	require.Contains(t, b.Status().Reason, "2 of p's last 2 answers said it is full")

	t0 := clock.Now()
	p, err := b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	// The reset, plus jitter (half of a tenth of the wait).
	require.Equal(t, 3*time.Second+3*time.Second/20, clock.Now().Sub(t0))
	p.Done(provider.Response{}, nil)

	// 429s without headers cool down for CooldownDefault.
	clock.Advance(time.Minute)
	c := newTestRegistry(t, NewMemStore(), clock).For(provider.Config{Name: "p"})
	congest(t, c, 0)
	require.Equal(t, CooldownDefault, c.Status().Cooldown)
}

// A one-off 429 among successes sets no shared cooldown: only its record
// waits (its session delay); the others go on at once.
func TestOneOff429DoesNotCoolOthers(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	a := newTestRegistry(t, store, clock).For(provider.Config{Name: "p"})
	b := newTestRegistry(t, store, clock).For(provider.Config{Name: "p"})
	for range 20 {
		p, err := a.Acquire(context.Background(), 0)
		require.NoError(t, err)
		p.Done(provider.Response{}, nil)
	}
	p, err := a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Response{}, rateLimited(60*time.Second))
	require.Zero(t, a.Status().Cooldown)
	require.Zero(t, b.Status().Cooldown)
	t0 := clock.Now()
	p, err = b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.Equal(t, t0, clock.Now(), "nothing waited")
	p.Done(provider.Response{}, nil)
	require.Equal(t, int64(1), a.Status().Congested)
}

// Rate-limit headers saying the bucket is empty are congestion: on a
// success, every process cuts its window (nothing waits); on a 429, every
// process also waits until the bucket's reset.
func TestEmptyBucketIsCongestion(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	ramp := func(c *Config) { c.AdaptiveInitial, c.AdaptiveRamp = 10, -1 }
	a := newTestRegistry(t, store, clock, ramp).For(provider.Config{Name: "p"})
	b := newTestRegistry(t, store, clock, ramp).For(provider.Config{Name: "p"})
	ps := acquire(t, b, 10)
	empty := retry.RateLimit{Requests: retry.Bucket{Known: true, Limit: 60, Remaining: 0, Reset: 800 * time.Millisecond}}
	p, err := a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Response{RateLimit: empty}, nil)
	require.Zero(t, a.Status().Cooldown)
	require.InDelta(t, 10*AdaptiveBetaDefault, b.Status().Limit, 1e-9, "the other process cut its window in use")
	require.Contains(t, b.Status().Change.Reason, "x-ratelimit-remaining-requests 0 from p")
	for _, p := range ps {
		p.Done(provider.Response{}, nil)
	}

	clock.Advance(time.Second)
	p, err = a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	p.Done(provider.Response{}, &retry.Error{Class: retry.ClassRateLimit, Status: 429, Message: "slow down", RateLimit: empty})
	st := b.Status()
	require.Equal(t, 800*time.Millisecond, st.Cooldown)
	require.Contains(t, st.CooldownCause, "slow down")
}

func TestCooldownCohortDoesNotExtend(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock).For(provider.Config{Name: "p"})
	ps := acquire(t, l, 3)
	ps[0].Done(provider.Response{}, rateLimited(time.Second))
	ps[1].Done(provider.Response{}, rateLimited(time.Second))
	clock.Advance(500 * time.Millisecond)
	// p3 was sent before the cooldown began: its 429 is the same event (no
	// second cut, no new count); it may only ask for a longer wait.
	ps[2].Done(provider.Response{}, rateLimited(time.Second))
	require.Equal(t, time.Second, l.Status().Cooldown)
	st, _ := l.view()
	require.Equal(t, 1, st.Cooldowns)
}

// A cooldown longer than the hold limit is not waited in Acquire: the
// caller gets a *WaitError (not a *retry.Error: no attempt was made), with
// when the call may go and why.
func TestCooldownBeyondWaitMaxIsAWaitError(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock).For(provider.Config{Name: "p"})
	congest(t, l, 5*time.Minute)
	t0 := clock.Now()
	_, err := l.Acquire(context.Background(), 0)
	require.ErrorIs(t, err, ErrWait)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, WaitCooldown, we.Kind)
	require.Equal(t, "p", we.Provider)
	require.Equal(t, t0.Add(5*time.Minute), we.Until)
	require.Contains(t, we.Cause, "RateLimitError: slow down")
	var re *retry.Error
	require.False(t, errors.As(err, &re), "not an attempt")
	require.Equal(t, t0, clock.Now(), "nothing waited")
	require.Contains(t, err.Error(), "no call was made")
}

// A stored cooldown past now + max_retry_after (written by an older version,
// or a hostile value) is read as now + the cap: a cooldown always ends.
func TestStoredCooldownIsBounded(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	k := Key("p", "")
	_, err := store.Update(context.Background(), k, func(s *State) bool {
		s.Provider = "p"
		s.CooldownUntil = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
		s.Breaker = Breaker{State: CircuitOpen, Until: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)}
		return true
	})
	require.NoError(t, err)
	l := newTestRegistry(t, store, clock).For(provider.Config{Name: "p", MaxRetryAfter: time.Minute})
	st := l.Status()
	require.Equal(t, time.Minute, st.Cooldown)
	_, err = l.Acquire(context.Background(), 0)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, WaitCircuit, we.Kind)
	require.Equal(t, clock.Now().Add(BreakerCooldownMaxDefault), we.Until, "an open circuit ends within cooldown_max")
}

func TestLimitedCooldownRestartsPaced(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Headroom = 1 }).
		For(provider.Config{Name: "p", Limits: provider.Limits{RPM: 600}})
	congest(t, l, 2*time.Second)
	t0 := clock.Now()
	var at []time.Duration
	for range 3 {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		at = append(at, clock.Now().Sub(t0))
		p.Done(provider.Response{}, nil)
	}
	// No burst after a cooldown: the first at its end, then one per 100 ms.
	require.Equal(t, []time.Duration{2 * time.Second, 2100 * time.Millisecond, 2200 * time.Millisecond}, at)
}

// A slot further ahead than the hold limit is not booked: the caller parks
// (WaitError, kind schedule) until its slot would have come.
func TestScheduleBeyondWaitMaxIsAWaitError(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Headroom = 1; c.WaitMax = 5 * time.Second }).
		For(provider.Config{Name: "p", Limits: provider.Limits{TPM: 600}}) // 10 tokens/s, burst 10
	ctx := context.Background()
	t0 := clock.Now()
	big, err := l.Acquire(ctx, 100) // goes at once, and books the schedule 10 s ahead
	require.NoError(t, err)
	_, err = l.Acquire(ctx, 1)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, WaitSchedule, we.Kind)
	require.Equal(t, t0.Add(10*time.Second-900*time.Millisecond), we.Until)
	require.Equal(t, t0, clock.Now(), "nothing waited")
	big.Done(provider.Response{}, nil)
	// Nothing was booked for the caller that parked.
	st, _ := l.view()
	require.Equal(t, t0.Add(10*time.Second), st.TokTAT)
}

// acquire takes n permits of l at once.
func acquire(t *testing.T, l *Limiter, n int) []*Permit {
	t.Helper()
	ps := make([]*Permit, 0, n)
	for range n {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		ps = append(ps, p)
	}
	return ps
}

func serverErr() error {
	return &retry.Error{Class: retry.ClassServer, Status: 500, Message: "boom"}
}

func TestBreakerOpensProbesCloses(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	cfg := func(c *Config) { c.Breaker = BreakerConfig{MinCalls: 4, FailureRatio: 0.5, Cooldown: 10 * time.Second} }
	a := newTestRegistry(t, store, clock, cfg).For(provider.Config{Name: "p"})
	b := newTestRegistry(t, store, clock, cfg).For(provider.Config{Name: "p"})
	call := func(l *Limiter, err error) {
		p, aerr := l.Acquire(context.Background(), 0)
		require.NoError(t, aerr)
		p.Done(provider.Response{}, err)
	}
	call(a, serverErr())
	call(a, nil)
	call(a, serverErr())
	require.Equal(t, CircuitClosed, a.Status().Circuit, "3 calls: fewer than min_calls")
	call(a, serverErr())
	require.Equal(t, CircuitOpen, b.Status().Circuit, "3 of 4 failed: the circuit is shared")
	require.True(t, b.CircuitOpen())
	require.Contains(t, b.Status().Reason, "circuit opened: 3 of p's last 4 calls failed")

	// The next call waits for the cooldown (within the hold limit) and is the one probe.
	t0 := clock.Now()
	probe, err := b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.True(t, probe.Probe())
	require.GreaterOrEqual(t, clock.Now().Sub(t0), 10*time.Second)
	require.Equal(t, CircuitHalfOpen, a.Status().Circuit)

	// While it runs, the other process waits (here: its wait is cancelled).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = a.Acquire(ctx, 0)
	require.ErrorIs(t, err, context.Canceled)

	// The probe fails: open again, for twice as long: beyond the hold
	// limit, so a caller is handed back with when to come again.
	probe.Done(provider.Response{}, serverErr())
	require.Equal(t, CircuitOpen, a.Status().Circuit)
	t1 := clock.Now()
	_, err = a.Acquire(context.Background(), 0)
	var we *WaitError
	require.ErrorAs(t, err, &we)
	require.Equal(t, WaitCircuit, we.Kind)
	require.Equal(t, t1.Add(20*time.Second), we.Until)
	require.Equal(t, "ServerError: boom", we.Cause)
	clock.Advance(20 * time.Second) // the parked record comes back
	probe, err = a.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.True(t, probe.Probe())
	// It succeeds: closed, and calls flow at once.
	probe.Done(provider.Response{}, nil)
	require.Equal(t, CircuitClosed, b.Status().Circuit)
	t2 := clock.Now()
	p, err := b.Acquire(context.Background(), 0)
	require.NoError(t, err)
	require.False(t, p.Probe())
	require.Equal(t, t2, clock.Now())
	p.Done(provider.Response{}, nil)
}

// The breaker counts 5xx and connection failures among the answered
// calls, not 4xx, 429s or timeouts of single calls; a cancellation counts
// for nothing.
func TestBreakerCountsOnlyFailures(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Breaker.MinCalls = 4 }).For(provider.Config{Name: "p"})
	timeout := &retry.Error{Class: retry.ClassNetwork, TypeName: "APITimeoutError", Message: "request timed out after 5s",
		Err: context.DeadlineExceeded}
	call := func(err error) {
		p, aerr := l.Acquire(context.Background(), 0)
		require.NoError(t, aerr)
		p.Done(provider.Response{}, err)
	}
	for _, err := range []error{serverErr(), &retry.Error{Class: retry.ClassAuth, Status: 401}, timeout, timeout, timeout,
		rateLimited(0), &retry.Error{Class: retry.ClassNetwork, Err: context.Canceled},
		&retry.Error{Class: retry.ClassInvalidRequest, Status: 400}, serverErr()} {
		call(err)
	}
	require.Equal(t, CircuitClosed, l.Status().Circuit, "2 failures of 5 counted calls")
	call(&retry.Error{Class: retry.ClassNetwork, TypeName: "APIConnectionError", Message: "connection refused"})
	require.Equal(t, CircuitOpen, l.Status().Circuit, "3 of 6: half the calls failed")
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
	p2.Done(provider.Response{}, nil)
	select {
	case p4 := <-got:
		require.NotNil(t, p4)
		p4.Done(provider.Response{}, nil)
	case <-time.After(5 * time.Second):
		t.Fatal("the fourth call did not get the released slot")
	}
	p1.Done(provider.Response{}, nil)
	p3.Done(provider.Response{}, nil)
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
	p.Done(provider.Response{}, nil)
}

func TestAdaptiveWindow(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.AdaptiveInitial, c.AdaptiveRamp = 2, -1 }).
		For(provider.Config{Name: "p"})
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
	p1.Done(provider.Response{}, nil)
	p2.Done(provider.Response{}, nil)
	require.Equal(t, 4.0, l.Status().Limit, "slow start grew the full window (+1 per success)")
	// Faults below their usual share do not cut; congestion does, once.
	p3, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	p3.Done(provider.Response{}, serverErr())
	require.Equal(t, 4.0, l.Status().Limit, "a 5xx on one call says nothing about capacity")
	ps := acquire(t, l, 4)
	ps[0].Done(provider.Response{}, nil)
	ps[1].Done(provider.Response{}, nil)
	ps[2].Done(provider.Response{}, rateLimited(0))
	ps[3].Done(provider.Response{}, rateLimited(0))
	st := l.Status()
	require.InDelta(t, 4*AdaptiveBetaDefault, st.Limit, 1e-9, "cut from the 4 calls in use")
	require.Equal(t, 2, st.Change.To)
	require.Regexp(t, `^window 2 \(was \d\): cooldown 1s: 2 of p's last 7 answers said it is full: RateLimitError: slow down at 12:00:00$`, st.Window())
}

// The initial ramp lets a pool whose provider never pushes back reach its
// concurrency within a few tens of milliseconds, in time, before any call
// has come back.
func TestAdaptiveRampsInTime(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.AdaptiveMax = 1000 }).For(provider.Config{Name: "p"})
	t0 := clock.Now()
	ps := acquire(t, l, 1000)
	require.LessOrEqual(t, clock.Now().Sub(t0), AdaptiveRampHoldDefault+AdaptiveRampDefault+time.Millisecond, "1000 in flight within the hold and the ramp")
	for _, p := range ps {
		p.Done(provider.Response{}, nil)
	}
	require.Equal(t, 1000.0, l.Status().Limit)
}

// A cancelled call is neither a success nor a failure: it grows nothing,
// counts for no breaker and writes nothing.
func TestCanceledCallSaysNothing(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	l := newTestRegistry(t, store, clock, func(c *Config) { c.AdaptiveInitial, c.AdaptiveRamp = 2, -1; c.Breaker.MinCalls = 1 }).
		For(provider.Config{Name: "p"})
	for range 2 {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		p.Done(provider.Response{}, &retry.Error{Class: retry.ClassNetwork, Message: "context canceled", Err: context.Canceled})
	}
	st := l.Status()
	require.Equal(t, 2.0, st.Limit)
	require.Equal(t, CircuitClosed, st.Circuit)
	require.Zero(t, st.Faults)
	states, err := store.List(context.Background())
	require.NoError(t, err)
	require.Empty(t, states)
}

// `limits: {adaptive: false}`: no adaptive window, no budget; congestion
// still cools every caller down.
func TestAdaptiveOff(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	l := newTestRegistry(t, store, clock, func(c *Config) { c.AdaptiveInitial = 2 }).
		For(provider.Config{Name: "p", Limits: provider.Limits{NoAdaptive: true}})
	require.False(t, l.Limited())
	require.Equal(t, "none", l.Status().Mode)
	ctx := context.Background()
	ps := acquire(t, l, 50) // far beyond the adaptive start of 2: nothing waits
	states, err := store.List(ctx)
	require.NoError(t, err)
	require.Empty(t, states, "admitting a call writes no shared state")
	ps[0].Done(provider.Response{}, rateLimited(2*time.Second))
	ps[1].Done(provider.Response{}, rateLimited(2*time.Second))
	for _, p := range ps[2:] {
		p.Done(provider.Response{}, nil)
	}
	t0 := clock.Now()
	p, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, clock.Now().Sub(t0), 2*time.Second, "waited out the cooldown")
	p.Done(provider.Response{}, nil)
}

// A process that finds another's window in the shared state does not ramp
// blind into its calls; a process that stopped takes its window with it,
// so the next one ramps again.
func TestNewcomerRampsOnlyAlone(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	store := NewMemStore()
	first, err := NewRegistry(context.Background(), store, Config{Clock: clock, AdaptiveMax: 1000})
	require.NoError(t, err)
	a := first.For(provider.Config{Name: "p"})
	p := acquire(t, a, 1)[0] // ramping: it says so in the shared state
	second := newTestRegistry(t, store, clock, func(c *Config) { c.AdaptiveMax = 1000 })
	b := second.For(provider.Config{Name: "p"})
	t0 := clock.Now()
	cctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var got []*Permit
	for range 5 {
		q, err := b.Acquire(cctx, 0)
		if err != nil {
			break
		}
		got = append(got, q)
	}
	require.Len(t, got, AdaptiveStartDefault, "slow start from 4: no ramp in time")
	require.Equal(t, t0, clock.Now())
	for _, q := range got {
		q.Done(provider.Response{}, nil)
	}
	p.Done(provider.Response{}, nil)
	first.Close()
	states, err := store.List(context.Background())
	require.NoError(t, err)
	_, ok := states[a.Key()].Windows[first.Holder()]
	require.False(t, ok, "the stopped process's window is gone")
	second.Close()
	third := newTestRegistry(t, store, clock, func(c *Config) { c.AdaptiveMax = 1000 })
	c := third.For(provider.Config{Name: "p"})
	t1 := clock.Now()
	for _, q := range acquire(t, c, 1000) {
		q.Done(provider.Response{}, nil)
	}
	require.LessOrEqual(t, clock.Now().Sub(t1), AdaptiveRampHoldDefault+AdaptiveRampDefault+time.Millisecond, "alone again: it ramps")
}

// contended is a store whose updates lose every compare-and-set race for a
// while (ErrContention), as an R3 bucket under many writers can.
type contended struct {
	Store
	losses atomic.Int64
}

func (c *contended) Update(ctx context.Context, key string, fn func(*State) bool) (State, error) {
	if c.losses.Add(-1) >= 0 {
		return State{}, fmt.Errorf("%s: %w", key, ErrContention)
	}
	return c.Store.Update(ctx, key, fn)
}

// A contended store is not an unreachable one: the budget holds. A caller
// that cannot book a lease because others keep winning asks again; it does
// not call without the budget (which let three calls run under
// concurrency 2 on a cluster).
func TestContentionKeepsTheBudget(t *testing.T) {
	t.Parallel()
	store := &contended{Store: NewMemStore()}
	l := newTestRegistry(t, store, retry.SystemClock{}).For(provider.Config{Name: "p", Limits: provider.Limits{Concurrency: 1}})
	ctx := context.Background()
	p1, err := l.Acquire(ctx, 0)
	require.NoError(t, err)
	store.losses.Store(5)
	got := make(chan *Permit, 1)
	go func() {
		p, err := l.Acquire(ctx, 0)
		if err == nil {
			got <- p
		}
		close(got)
	}()
	select {
	case <-got:
		t.Fatal("a second call ran under concurrency 1 while the store was contended")
	case <-time.After(300 * time.Millisecond):
	}
	require.LessOrEqual(t, store.losses.Load(), int64(0), "the contended updates were asked again")
	p1.Done(provider.Response{}, nil)
	select {
	case p2 := <-got:
		require.NotNil(t, p2)
		p2.Done(provider.Response{}, nil)
	case <-time.After(5 * time.Second):
		t.Fatal("the second call did not get the released slot")
	}
}

// gatedStore holds the first Update until release is closed, and counts
// every Update.
type gatedStore struct {
	Store
	calls   atomic.Int32
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStore) Update(ctx context.Context, key string, fn func(*State) bool) (State, error) {
	if g.calls.Add(1) == 1 {
		close(g.entered)
		<-g.release
	}
	return g.Store.Update(ctx, key, fn)
}

// A window is published once, not by every call that ends while its write
// is on its way: at zero latency hundreds end in that time, and each wrote
// the same window (compare-and-sets that conflicted and retried).
func TestWindowPublishedOnceWhileItsWriteIsOut(t *testing.T) {
	t.Parallel()
	store := &gatedStore{Store: NewMemStore(), entered: make(chan struct{}), release: make(chan struct{})}
	l := newTestRegistry(t, store, newFakeClock(), func(c *Config) { c.AdaptiveInitial, c.AdaptiveRamp = 100, -1 }).
		For(provider.Config{Name: "p"})
	ps := acquire(t, l, 100)
	done := make(chan struct{})
	go func() { ps[0].Done(provider.Response{}, nil); close(done) }()
	<-store.entered // the first success publishes the grown window
	for _, p := range ps[1:] {
		p.Done(provider.Response{}, nil)
	}
	require.EqualValues(t, 1, store.calls.Load(), "the 99 calls that ended meanwhile wrote nothing")
	close(store.release)
	<-done
	states, err := store.List(context.Background())
	require.NoError(t, err)
	require.Len(t, states, 1)
	for _, st := range states {
		require.Contains(t, st.Windows, l.r.cfg.Holder, "the window was written")
	}
}
