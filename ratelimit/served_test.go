package ratelimit

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The served rate in slices agrees with the exact one (every success kept
// for the window, summed by the same formula) within a slice's share of the
// window, and forgets what is older than the window.
func TestServedRateInSlices(t *testing.T) {
	t.Parallel()
	type success struct {
		at      time.Time
		latency time.Duration
	}
	exact := func(all []success, now time.Time) float64 {
		n, sum, oldest := 0, time.Duration(0), now
		for _, s := range all {
			if now.Sub(s.at) > servedWindow {
				continue
			}
			n++
			sum += s.latency
			if s.at.Before(oldest) {
				oldest = s.at
			}
		}
		return littles(n, sum, oldest, now)
	}
	var r servedRate
	var all []success
	now := time.Unix(1_700_000_000, 0)
	require.True(t, math.IsInf(r.sustained(now), 1), "nothing known yet")
	// 12 s of successes, 1 ms apart, latencies rising from 10 to 130 ms: the
	// ring wraps twice.
	for i := range 12_000 {
		now = now.Add(time.Millisecond)
		lat := 10*time.Millisecond + time.Duration(i)*10*time.Microsecond
		r.add(now, lat)
		all = append(all, success{now, lat})
		if i%500 == 499 {
			want, got := exact(all, now), r.sustained(now)
			require.InEpsilon(t, want, got, 0.03, "at %d: exact %.2f, in slices %.2f", i, want, got)
		}
	}
	// A pause longer than the window: everything is forgotten.
	now = now.Add(servedWindow + servedSlice)
	require.True(t, math.IsInf(r.sustained(now), 1))
	r.add(now, time.Millisecond)
	require.True(t, math.IsInf(r.sustained(now), 1), "one success is too little to go on")
}
