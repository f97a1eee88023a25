package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// The done count moves in steps (counted every 2 s, polled every 200 ms):
// the rate is that of the steps, smoothed, not of the polls.
func TestRateEstimateIsSmoothed(t *testing.T) {
	var r rateEstimate
	t0 := time.Unix(1000, 0)
	done := int64(0)
	for i := 0; i <= 300; i++ { // 60 s of polls at 100 records/s, counted every 2 s
		now := t0.Add(time.Duration(i) * 200 * time.Millisecond)
		if i > 0 && i%10 == 0 {
			done += 200
		}
		r.observe(now, done)
		if i > 10 {
			require.InDelta(t, 100, r.perSecond(), 0.001, "poll %d: steady steps, a steady rate", i)
		}
	}
	require.Equal(t, 40*time.Second, r.left(6000, 10000))

	// The rate halves: the estimate moves towards it over rateTau, not at once.
	now := t0.Add(60 * time.Second)
	for i := 1; i <= 5; i++ {
		now = now.Add(2 * time.Second)
		done += 100
		r.observe(now, done)
	}
	require.Greater(t, r.perSecond(), 60.0, "10 s after a change: still between the two rates")
	require.Less(t, r.perSecond(), 90.0)
	for i := 1; i <= 60; i++ {
		now = now.Add(2 * time.Second)
		done += 100
		r.observe(now, done)
	}
	require.InDelta(t, 50, r.perSecond(), 0.5, "two minutes on: the new rate")

	// Nothing finishes for rateStall: the rate falls, the ETA grows.
	before := r.left(done, done+1000)
	r.observe(now.Add(rateStall), done)
	require.Less(t, r.perSecond(), 50.0)
	require.Greater(t, r.left(done, done+1000), before)

	var fresh rateEstimate
	fresh.observe(t0, 0)
	require.Zero(t, fresh.left(0, 100), "no rate yet: no ETA")
}

func TestProgressLine(t *testing.T) {
	st := broker.Progress{Queued: 12, AckPending: 8}
	require.Equal(t, "records (12 queued, 8 in flight/waiting)", progressLine(st, nil, nil, 0, 0))
	require.Equal(t, "records (12 queued, 8 in flight/waiting; at extract 15, classify 0) 41.5 steps/s, ETA 2m10s",
		progressLine(st, []string{"extract", "classify"}, map[string]uint64{"extract": 15}, 41.5, 2*time.Minute+12*time.Second))
	require.Equal(t, 1*time.Minute+5*time.Second, roundLeft(65*time.Second+400*time.Millisecond))
	require.Equal(t, 3*time.Hour, roundLeft(3*time.Hour+20*time.Second))
}
