package ratelimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

// The pace is measured between two congestion events, from the calls that
// started between them and succeeded, once they have all ended.
func TestLearnedPaceMeasure(t *testing.T) {
	t.Parallel()
	var p learnedPace
	e1 := t0
	p.event(e1, "429s")
	require.False(t, p.on(), "one event measures nothing")
	p.success(e1.Add(-time.Millisecond), e1.Add(100*time.Millisecond)) // sent before the event: its cohort
	for i := range 20 {
		p.success(e1.Add(time.Duration(i+1)*90*time.Millisecond), e1.Add(2*time.Second))
	}
	e2 := e1.Add(2 * time.Second)
	p.event(e2, "3 answers in a row said it is full")
	require.False(t, p.on(), "calls started before the event may still be out")
	p.success(e2.Add(-time.Millisecond), e2.Add(200*time.Millisecond)) // started before e2: still counted
	require.False(t, p.on())
	p.success(e2.Add(time.Second), e2.Add(1200*time.Millisecond)) // the first call after e2 ends the span
	require.True(t, p.on())
	require.InDelta(t, 21.0/2*LearnedBetaDefault, p.rate, 1e-9, "21 calls taken in 2 s")
	require.Contains(t, p.change.Reason, "the provider took 10.5 calls/s between two congestion events")

	// Too little to tell: nothing learned.
	var q learnedPace
	q.event(t0, "x")
	q.success(t0.Add(time.Millisecond), t0.Add(time.Second))
	q.event(t0.Add(time.Second), "x")
	q.success(t0.Add(2*time.Second), t0.Add(2*time.Second))
	require.False(t, q.on())
}

// Calls are spaced by the pace; a pace that holds calls back grows only
// after its hold; a 429 above what was learned takes it back down, never
// below it.
func TestLearnedPaceReserveProbeRefused(t *testing.T) {
	t.Parallel()
	p := learnedPace{rate: 10, base: 10, setAt: t0}
	require.Equal(t, t0, p.reserve(t0))
	require.Equal(t, t0.Add(100*time.Millisecond), p.reserve(t0), "the next slot")
	require.Equal(t, 10.0, p.rate, "no growth during the hold")
	now := t0.Add(learnedHold)
	p.tat = now.Add(time.Millisecond)
	p.reserve(now)
	require.InDelta(t, 10*(1+LearnedProbeDefault*0.1), p.rate, 1e-9, "held back after the hold: grows a second's probe per second")
	p.rate = 12
	p.refused(t0.Add(-time.Second), now) // a call of the cohort before it was set
	require.Equal(t, 12.0, p.rate)
	p.refused(now, now)
	require.InDelta(t, 12*LearnedBetaDefault, p.rate, 1e-9)
	for range 50 {
		now = now.Add(time.Second)
		p.refused(now, now)
	}
	require.Equal(t, 10.0, p.rate, "one-off 429s do not wear it below what was learned")
}

// A limiter without limits on a provider that allows R requests a second
// (a token bucket of R, refilled at R a second, 429 with Retry-After 1 s
// when empty) learns R from two congestion events and then paces its calls
// under it: few 429s, most of R served.
func TestLimiterLearnsTheRate(t *testing.T) {
	t.Parallel()
	const rate = 10.0
	clock := newFakeClock()
	l := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.AdaptiveRamp = -1 }).For(provider.Config{Name: "p"})
	tokens, last := rate, clock.Now()
	call := func() bool { // one call, answered at once
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		now := clock.Now()
		tokens = math.Min(rate, tokens+now.Sub(last).Seconds()*rate)
		last = now
		clock.Advance(time.Millisecond)
		if tokens < 1 {
			p.Done(provider.Response{}, rateLimited(time.Second))
			return false
		}
		tokens--
		p.Done(provider.Response{}, nil)
		return true
	}
	start := clock.Now()
	for clock.Now().Sub(start) < 5*time.Second && l.Status().Pace == 0 {
		call()
	}
	st := l.Status()
	require.InDelta(t, rate*LearnedBetaDefault, st.Pace, 1.5, "learned near the provider's rate: %s", st.Window())
	require.Contains(t, st.Window(), "paced at")
	from := clock.Now()
	var ok, limited int
	for clock.Now().Sub(from) < time.Minute {
		if call() {
			ok++
		} else {
			limited++
		}
	}
	served := float64(ok) / clock.Now().Sub(from).Seconds()
	t.Logf("served %.2f calls/s of %.0f, %d 429s in %d calls; %s", served, rate, limited, ok+limited, l.Status().Window())
	require.GreaterOrEqual(t, served, 0.95*rate, "served %.1f calls/s, %d 429s", served, limited)
	require.LessOrEqual(t, float64(limited), 0.02*float64(ok+limited), "%d 429s in %d calls", limited, ok+limited)
}
