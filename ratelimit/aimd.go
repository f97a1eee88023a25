package ratelimit

import (
	"math"
	"time"
)

// Defaults of AIMD.
const (
	// AdaptiveInitialDefault (0) starts a provider without limits at
	// AdaptiveStartDefault, or the maximum when that is lower; slow start
	// grows it by about half each round trip until the first cut.
	AdaptiveInitialDefault = 0
	// AdaptiveStartDefault is where a provider without limits starts. Slow
	// start (×1.5 a round trip) takes it to a pool of 100 in about eight
	// round trips; starting at 16 instead cost the rate-limit benchmark
	// 5–7 points of goodput (a bigger first cohort of 429s, a longer first
	// cooldown) for 5 points of efficiency at concurrency 100.
	AdaptiveStartDefault = 4
	// AdaptiveMinDefault is the floor of a cut.
	AdaptiveMinDefault = 1
	// AdaptiveMaxDefault caps growth (the pool's own concurrency caps it too).
	AdaptiveMaxDefault = 1024
	// AdaptiveBetaDefault is the multiplicative decrease on a 429 or overload.
	AdaptiveBetaDefault = 0.7
	// AdaptiveProbeDefault is how many round trips of success it takes to
	// grow by one above the level of the last cut. Below it the limit grows
	// by one a round trip (classic additive increase); above it, probing is
	// slow, because each probe that finds the ceiling costs a cohort of 429s.
	AdaptiveProbeDefault = 32
)

// AIMD is adaptive concurrency for a provider without configured limits:
// additive increase while calls succeed, multiplicative decrease on a 429
// or overload, once per congestion epoch (the calls already in flight when
// the cut happened do not cut again). It is not safe for concurrent use; the
// Limiter guards it.
type AIMD struct {
	Min, Max float64
	Beta     float64
	Probe    float64

	limit    float64
	ssthresh float64   // slow start below it; +Inf until the first cut
	ceiling  float64   // the limit at the last cut
	epoch    time.Time // calls started before it do not cut again
}

// NewAIMD returns an AIMD at initial (maxLimit when ≤ 0), capped at
// maxLimit (AdaptiveMaxDefault when ≤ 0).
func NewAIMD(initial, maxLimit int) *AIMD {
	if maxLimit <= 0 {
		maxLimit = AdaptiveMaxDefault
	}
	if initial <= 0 {
		initial = min(maxLimit, AdaptiveStartDefault)
	}
	return &AIMD{Min: AdaptiveMinDefault, Max: float64(maxLimit), Beta: AdaptiveBetaDefault,
		Probe: AdaptiveProbeDefault, limit: float64(min(initial, maxLimit)), ssthresh: math.Inf(1)}
}

// Limit is the number of calls that may be in flight now.
func (a *AIMD) Limit() int { return max(int(a.limit), 1) }

// Value is the exact limit (for metrics and tests).
func (a *AIMD) Value() float64 { return a.limit }

// Success grows the limit after a call that succeeded while inflight calls
// (counting it) were running. A limit that is not in use does not grow: an
// idle pool learns nothing about the provider.
func (a *AIMD) Success(inflight int) {
	// Calls run in cohorts (they start together after a cooldown or a
	// batch of completions), so "the window was full when this call
	// started" is true for only the last few of each cohort; half full is
	// the signal that the limit is in use.
	if float64(inflight) < a.limit/2 {
		return
	}
	switch {
	case a.limit < a.ssthresh:
		a.limit += 1 // slow start: about ×1.5 each round trip (half the cohort counts), so the first overshoot is a smaller cohort
	case a.limit < a.ceiling:
		a.limit += 1 / a.limit
	default:
		a.limit += 1 / (a.limit * a.Probe)
	}
	a.limit = min(a.limit, a.Max)
}

// Overload cuts the limit after a 429 or overload of a call started at
// started, at now. It reports whether it cut: only the first overload of an
// epoch does.
func (a *AIMD) Overload(started, now time.Time) bool {
	return a.OverloadTo(started, now, math.Inf(1))
}

// OverloadTo is Overload with an estimate of the window the provider
// sustains (its served rate times the call latency): the cut goes down to
// it when it is lower than Beta × limit, and probing is slow above it. A
// rate limit measured in requests per second is not a concurrency: after a
// cooldown the provider's bucket is full, a whole window succeeds, and the
// limit alone would keep growing past what the rate allows.
func (a *AIMD) OverloadTo(started, now time.Time, sustained float64) bool {
	if started.Before(a.epoch) {
		return false
	}
	a.ceiling = min(a.limit, max(sustained, a.Min))
	a.limit = max(min(a.limit*a.Beta, sustained), a.Min)
	a.ssthresh = a.limit
	a.epoch = now
	return true
}
