package ratelimit

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

// Room tells a router what a limiter can take now: a configured rpm's
// schedule booked ahead is a wait, the rate is the rpm's; a learned pace
// lowers the rate and books its own schedule; a cooldown rests it; a
// concurrency cap that is taken fills it.
func TestRoom(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	r := newTestRegistry(t, NewMemStore(), clock, func(c *Config) { c.Headroom = 1; c.AdaptiveRamp = -1 })

	rpm := r.For(provider.Config{Name: "rpm", Limits: provider.Limits{RPM: 600}})
	require.Equal(t, Room{Rate: 10}, rpm.Room(), "idle: free, at its rpm")
	require.True(t, rpm.Room().Free())
	acquire(t, rpm, 15) // a burst of 10, then 5 at 100 ms: the clock moved 0.5 s
	room := rpm.Room()
	require.False(t, room.Free())
	require.Greater(t, room.Wait, time.Duration(0), "booked ahead")

	conc := r.For(provider.Config{Name: "conc", Limits: provider.Limits{Concurrency: 1}})
	ps := acquire(t, conc, 1)
	require.True(t, conc.Room().Full)
	ps[0].Done(provider.Response{}, nil)
	require.False(t, conc.Room().Full)

	// An adaptive limiter learns a provider's rate of 5 calls a second
	// from its 429s (as TestLimiterLearnsTheRate): its room then has that
	// rate, and a wait once its pace is booked ahead.
	l := r.For(provider.Config{Name: "learned"})
	require.Zero(t, l.Room().Rate, "not paced")
	const rate = 5.0
	tokens, last := rate, clock.Now()
	start := clock.Now()
	for clock.Now().Sub(start) < 10*time.Second && l.Status().Pace == 0 {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		now := clock.Now()
		tokens, last = math.Min(rate, tokens+now.Sub(last).Seconds()*rate), now
		clock.Advance(time.Millisecond)
		if tokens < 1 {
			p.Done(provider.Response{}, rateLimited(time.Second))
			continue
		}
		tokens--
		p.Done(provider.Response{}, nil)
	}
	require.InDelta(t, rate*LearnedBetaDefault, l.Room().Rate, 1, "the learned pace: %s", l.Status().Window())
	clock.Advance(2 * time.Second) // past any cooldown
	require.False(t, l.Room().Resting)
	for range 3 {
		p, err := l.Acquire(context.Background(), 0)
		require.NoError(t, err)
		p.Done(provider.Response{}, nil)
	}
	require.Greater(t, l.Room().Wait, time.Duration(0), "its pace is booked ahead")

	congest(t, rpm, time.Second)
	require.True(t, rpm.Room().Resting, "a shared cooldown")

	// Most answers of the last second failures: failing, until they age.
	f := r.For(provider.Config{Name: "failing"})
	ps = acquire(t, f, 3)
	ps[0].Done(provider.Response{}, nil)
	ps[1].Done(provider.Response{}, serverErr())
	require.False(t, f.Room().Failing, "one failure")
	ps[2].Done(provider.Response{}, serverErr())
	require.True(t, f.Room().Failing, "two of three answers failed")
	require.False(t, f.Room().Free())
	clock.Advance(2 * time.Second)
	require.False(t, f.Room().Failing, "a second later")
}
