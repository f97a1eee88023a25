package ratelimit

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/retry"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fixed is an AIMD without the initial ramp, for the arithmetic.
func fixed(initial, maxLimit int) *AIMD {
	a := NewAIMD(initial, maxLimit)
	a.Ramp = -1
	return a
}

func (a *AIMD) ok(inflight int) {
	a.Success(inflight, 100*time.Millisecond, 0, retry.RateLimit{}, t0)
}

func TestAIMD(t *testing.T) {
	t.Parallel()
	a := fixed(4, 100)
	// An idle limit does not grow.
	a.ok(1)
	require.Equal(t, 4, a.Limit(t0))
	// Slow start: +1 per success when at least half the window is in use
	// (a full window doubles each round trip).
	for range 4 {
		a.ok(a.Limit(t0))
	}
	require.Equal(t, 8, a.Limit(t0))
	a.ok(3)
	require.Equal(t, 8, a.Limit(t0), "a window less than half used does not grow")
	// Congestion cuts once per epoch.
	require.True(t, a.Congestion(t0, t0.Add(time.Millisecond), 1000, math.Inf(1), "429s"))
	require.InDelta(t, 8*AdaptiveBetaDefault, a.Value(), 1e-9)
	require.False(t, a.Congestion(t0, t0.Add(2*time.Millisecond), 1000, math.Inf(1), "429s"), "a call sent before the cut does not cut again")
	require.True(t, a.Congestion(t0.Add(time.Second), t0.Add(time.Second), 1000, math.Inf(1), "429s"))
	require.Equal(t, Change{From: 5, To: 3, Reason: "429s", At: t0.Add(time.Second)}, a.Last())
	// Back to the level of the last cut it grows by one per round trip,
	// above it by one per AdaptiveProbeDefault round trips.
	b := fixed(10, 100)
	b.Congestion(t0, t0, 1000, math.Inf(1), "429s") // ceiling 10, limit 7
	rounds := 0
	for b.Value() < 10 {
		for range b.Limit(t0) {
			b.ok(b.Limit(t0))
		}
		rounds++
	}
	require.LessOrEqual(t, rounds, 4)
	rounds = 0
	for b.Value() < 11 {
		for range b.Limit(t0) {
			b.ok(b.Limit(t0))
		}
		rounds++
	}
	require.GreaterOrEqual(t, rounds, AdaptiveProbeDefault-1)
	require.Equal(t, 1, NewAIMD(1, 1).Limit(t0))
}

// Faults trim gently, once per epoch, and end slow start.
func TestAIMDFaultsTrimGently(t *testing.T) {
	t.Parallel()
	a := fixed(20, 100)
	require.True(t, a.Faults(t0, t0.Add(time.Millisecond), "faults"))
	require.InDelta(t, 20*AdaptiveFaultBetaDefault, a.Value(), 1e-9)
	require.False(t, a.Faults(t0, t0.Add(2*time.Millisecond), "faults"), "a call sent before the trim is the same epoch")
	before := a.Value()
	a.ok(a.Limit(t0))
	require.Less(t, a.Value()-before, 1.0, "additive, not slow start")
}

// TestAIMDConverges drives AIMD against a provider that serves at most
// capacity calls at once and answers the rest 429: the limit settles around
// the capacity rather than running away or collapsing.
func TestAIMDConverges(t *testing.T) {
	t.Parallel()
	const capacity = 12
	a := fixed(4, 256)
	now := t0
	var over, calls int
	var lows []int
	for round := range 200 {
		now = now.Add(time.Second)
		n := a.Limit(now)
		for i := range n {
			calls++
			if i >= capacity {
				over++
				a.Congestion(now, now, 1000, math.Inf(1), "429s")
			} else {
				a.Success(n, 100*time.Millisecond, 0, retry.RateLimit{}, now)
			}
		}
		if round >= 100 {
			lows = append(lows, a.Limit(now))
		}
	}
	for _, l := range lows {
		require.GreaterOrEqual(t, l, capacity*6/10)
		require.LessOrEqual(t, l, capacity+2)
	}
	require.Less(t, float64(over)/float64(calls), 0.05, "429s are a small share of calls")
}

// Without an explicit start the limit starts at AdaptiveStartDefault (or
// the maximum when lower); the first congestion cuts to what the provider
// sustained.
func TestAIMDDefaultStart(t *testing.T) {
	t.Parallel()
	require.Equal(t, 2, NewAIMD(0, 2).Limit(t0))
	require.Equal(t, AdaptiveStartDefault, NewAIMD(0, 64).Limit(t0))
	a := fixed(32, 64)
	require.True(t, a.Congestion(t0.Add(-time.Millisecond), t0, 1000, 10, "429s"))
	require.Equal(t, 10, a.Limit(t0), "the first congestion cuts to what the provider sustained")
}

// Until the provider first answers, the window doubles every Ramp; the
// first answer (here a 429, which comes back long before any success)
// stops the ramp where it is.
func TestAIMDRampsUntilTheFirstAnswer(t *testing.T) {
	t.Parallel()
	a := NewAIMD(4, 1024) // 8 doublings in AdaptiveRampDefault
	step := AdaptiveRampDefault / 8
	require.Equal(t, 4, a.Limit(t0.Add(-time.Hour)))
	require.Equal(t, 4, a.Limit(t0), "a window not yet full does not ramp")
	a.Full(t0)
	require.Equal(t, time.Duration(math.Log2(5.0/4)*float64(step)), a.NextRamp(t0), "when the fifth call may go")
	require.Equal(t, 8, a.Limit(t0.Add(step)))
	require.Equal(t, 1024, a.Limit(t0.Add(AdaptiveRampDefault)), "the pool's concurrency in AdaptiveRampDefault")
	small := NewAIMD(4, 32)
	small.Full(t0)
	require.Equal(t, 8, small.Limit(t0.Add(AdaptiveRampDefault/3)), "a small pool doubles more slowly")
	require.Equal(t, 32, small.Limit(t0.Add(AdaptiveRampDefault)))
	b := NewAIMD(4, 1024)
	b.Full(t0)
	b.answer(t0.Add(3 * step))
	require.Equal(t, 32, b.Limit(t0.Add(time.Hour)), "the ramp stops at the first answer")
	require.Zero(t, b.NextRamp(t0.Add(time.Hour)))
	// A 429 as the first answer stops it where the calls are.
	c := NewAIMD(4, 1024)
	c.Full(t0)
	c.Limit(t0.Add(3 * step))
	c.Refused(t0.Add(3*step), 21)
	require.Equal(t, 20, c.Limit(t0.Add(time.Hour)), "at the 21 calls in use, less the one refused")
	c.Refused(t0.Add(time.Hour), 2)
	require.Equal(t, 19, c.Limit(t0.Add(time.Hour)), "before any success each 429 takes its call's place")
	c.Success(19, 100*time.Millisecond, 0, retry.RateLimit{}, t0.Add(time.Hour))
	c.Refused(t0.Add(time.Hour), 19)
	require.Equal(t, 20, c.Limit(t0.Add(time.Hour)), "once served, a one-off 429 changes nothing by itself")
}

// Slow start ends when the fastest call of a round is much slower than
// the fastest seen (a queue builds at the provider); the window stays.
func TestAIMDSlowStartEndsOnLatencyRise(t *testing.T) {
	t.Parallel()
	a := fixed(8, 1000)
	for range 8 {
		a.Success(8, 100*time.Millisecond, 0, retry.RateLimit{}, t0)
	}
	require.Equal(t, 16, a.Limit(t0))
	for range 16 {
		a.Success(16, 300*time.Millisecond, 0, retry.RateLimit{}, t0)
	}
	require.Less(t, a.Value(), 32.0, "slow start ended during the slow round")
	require.Contains(t, a.Last().Reason, "latency rose from 100ms to 300ms")
	v := a.Value()
	a.Success(a.Limit(t0), 300*time.Millisecond, 0, retry.RateLimit{}, t0)
	require.Less(t, a.Value()-v, 1.0, "additive from here")
}

// x-ratelimit-remaining-requests below the window ends slow start before
// the first 429, and the window does not grow past what the bucket holds.
func TestAIMDHonoursRemainingHeaders(t *testing.T) {
	t.Parallel()
	a := fixed(16, 1000)
	rl := retry.RateLimit{Requests: retry.Bucket{Known: true, Limit: 500, Remaining: 12}}
	a.Success(16, 100*time.Millisecond, 0, rl, t0)
	require.Equal(t, 16, a.Limit(t0), "no growth: the bucket holds 12")
	require.Contains(t, a.Last().Reason, "x-ratelimit-remaining-requests 12 below the window")
	rl.Requests.Remaining = 400
	a.Success(16, 100*time.Millisecond, 0, rl, t0)
	require.InDelta(t, 16+1.0/16, a.Value(), 1e-9, "additive once slow start ended")
	// Tokens count in calls of the average size seen.
	b := fixed(16, 1000)
	b.Success(16, 100*time.Millisecond, 1000, retry.RateLimit{Tokens: retry.Bucket{Known: true, Remaining: 5000}}, t0)
	require.Equal(t, 16, b.Limit(t0), "5000 tokens are 5 calls of 1000")
}
