package ratelimit

import (
	"math"
	"time"
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
