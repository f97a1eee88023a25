package ratelimit

import (
	"fmt"
	"math"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// Defaults of AIMD.
const (
	// AdaptiveInitialDefault (0) starts a provider without limits at
	// AdaptiveStartDefault, or the maximum when that is lower.
	AdaptiveInitialDefault = 0
	// AdaptiveStartDefault is where a provider without limits starts.
	AdaptiveStartDefault = 4
	// AdaptiveRampDefault is how long the initial ramp takes the window
	// from its start to the pool's concurrency, doubling evenly, before the
	// provider has answered anything. Until a first answer there is nothing
	// to learn from, and a slow start by round trips from 4 cannot reach a
	// pool of 1,000 before a short job is half done (at 100 ms calls it
	// loses eight round trips). In 60 ms a pool on an
	// endpoint that never pushes back runs at its concurrency within one
	// round trip, while an endpoint that answers 429 at once (they come
	// back in a millisecond, long before the first success) stops the ramp
	// a few calls past its bucket; a small pool doubles more slowly
	// (every 20 ms from 4 to 32), so it overshoots less. A slower ramp
	// with a hold cost short jobs at concurrency 1000 a little, and a
	// faster one made no more 429s on the rate-limit benchmark
	// (docs/ratelimits.md).
	AdaptiveRampDefault = 60 * time.Millisecond
	// AdaptiveRampHoldDefault is how long after its first call a process
	// waits before it ramps: long enough for the shared state's watch to
	// bring another process's announcement (a few milliseconds), so that
	// two processes starting together do not both ramp blind into one
	// bucket; short against the ramp itself.
	AdaptiveRampHoldDefault = 5 * time.Millisecond
	// AdaptiveMinDefault is the floor of a cut.
	AdaptiveMinDefault = 1
	// AdaptiveMaxDefault caps growth (the pool's own concurrency caps it too).
	AdaptiveMaxDefault = 1024
	// AdaptiveBetaDefault is the multiplicative decrease on congestion.
	AdaptiveBetaDefault = 0.7
	// AdaptiveFaultBetaDefault is the gentle trim when faults rise above
	// AdaptiveFaultShareDefault of the calls (once per round trip).
	AdaptiveFaultBetaDefault = 0.9
	// AdaptiveFaultShareDefault is the share of faults (5xx, dropped
	// streams, resets) among the breaker window's calls above which the
	// window is trimmed. Below it faults are noise that the retry layers
	// absorb: they say nothing about capacity.
	AdaptiveFaultShareDefault = 0.1
	// AdaptiveProbeDefault is how many round trips of success it takes to
	// grow by one above the level of the last cut. Below it the limit grows
	// by one a round trip (classic additive increase); above it, probing is
	// slow, because each probe that finds the ceiling costs a cohort of 429s.
	AdaptiveProbeDefault = 64
	// AdaptiveLatencyRiseDefault ends slow start when the fastest call of a
	// round is this much slower than the fastest call seen (a queue is
	// building at the provider), as TCP's HyStart does.
	AdaptiveLatencyRiseDefault = 1.5
)

// Change is a decision of the window: from what to what, why, when.
type Change struct {
	From   int       `json:"from"`
	To     int       `json:"to"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// String is "window 8 (was 32): 429s from openai at 12:01:03".
func (c Change) String() string {
	if c.At.IsZero() {
		return ""
	}
	return fmt.Sprintf("window %d (was %d): %s at %s", c.To, c.From, c.Reason, c.At.Format("15:04:05"))
}

// AIMD is adaptive concurrency for a provider without configured limits.
// It tells congestion (429, overload, a bucket the headers say is empty)
// from faults (a 5xx or a dropped stream on one call, which say little about
// capacity): congestion cuts multiplicatively, once per round trip; faults
// trim gently, and only when their share rises (the Limiter decides). The
// window ramps in time until the provider first answers, then grows by
// slow start (×2 a round trip while in use) until the first congestion, a
// latency rise or rate-limit headers saying the bucket is smaller than the
// window, then additively. It is not safe for concurrent use; the Limiter
// guards it.
type AIMD struct {
	Min, Max    float64
	Beta        float64
	FaultBeta   float64
	Probe       float64
	Ramp        time.Duration // the initial ramp's length, AdaptiveRampDefault; negative: none
	LatencyRise float64

	start    float64
	limit    float64
	ssthresh float64   // slow start below it; +Inf until the first cut
	ceiling  float64   // the limit at the last cut
	epoch    time.Time // calls started before it do not cut again

	rampFrom time.Time // when the window was last found full (zero: no one waits)
	rampBase float64   // the limit then
	rampHold time.Time // the ramp does not start before
	answered bool      // the provider answered: the initial ramp is over
	served   bool      // a call succeeded

	baseLat    time.Duration // fastest success seen
	roundMin   time.Duration // fastest success of this round
	roundN     int           // successes in this round
	roundSize  int           // of this round: the window when it began, at least 8
	tokensCall float64       // average tokens of a call (usage), for token buckets

	last Change
}

// NewAIMD returns an AIMD at initial (AdaptiveStartDefault when ≤ 0),
// capped at maxLimit (AdaptiveMaxDefault when ≤ 0).
func NewAIMD(initial, maxLimit int) *AIMD {
	if maxLimit <= 0 {
		maxLimit = AdaptiveMaxDefault
	}
	if initial <= 0 {
		initial = AdaptiveStartDefault
	}
	start := float64(min(initial, maxLimit))
	return &AIMD{Min: AdaptiveMinDefault, Max: float64(maxLimit), Beta: AdaptiveBetaDefault,
		FaultBeta: AdaptiveFaultBetaDefault, Probe: AdaptiveProbeDefault, Ramp: AdaptiveRampDefault,
		LatencyRise: AdaptiveLatencyRiseDefault, start: start, limit: start, ssthresh: math.Inf(1)}
}

// Limit is the number of calls that may be in flight at now.
func (a *AIMD) Limit(now time.Time) int {
	a.ramp(now)
	return max(int(a.limit), 1)
}

// Value is the exact limit (for metrics and tests).
func (a *AIMD) Value() float64 { return a.limit }

// Last is the window's last decision.
func (a *AIMD) Last() Change { return a.last }

// ramp applies the initial ramp: until the provider first answers, the
// limit doubles in time while calls wait for it. A window nobody waits for
// does not ramp: a pool that got one record first would otherwise send a
// whole ramped window at once when the rest arrived.
func (a *AIMD) ramp(now time.Time) {
	if a.answered || a.Ramp <= 0 || a.limit >= a.Max || a.rampFrom.IsZero() {
		return
	}
	steps := float64(now.Sub(a.rampFrom)) / float64(a.doubling())
	a.limit = max(a.limit, min(a.Max, a.rampBase*math.Exp2(min(steps, 30))))
}

// doubling is how long the initial ramp takes to double the window: Ramp
// spread over the doublings from the start to Max.
func (a *AIMD) doubling() time.Duration {
	return time.Duration(float64(a.Ramp) / max(math.Log2(a.Max/a.start), 1))
}

// Ramping reports whether the initial ramp is on: no answer yet.
func (a *AIMD) Ramping() bool { return !a.answered && a.Ramp > 0 && a.limit < a.Max }

// Hold keeps the ramp from starting before until.
func (a *AIMD) Hold(until time.Time) { a.rampHold = until }

// Full tells the ramp that the window is full at now (a call must wait):
// the ramp runs from then, or from the end of its hold.
func (a *AIMD) Full(now time.Time) {
	if a.Ramping() && a.rampFrom.IsZero() && !now.Before(a.rampHold) {
		a.ramp(now)
		a.rampFrom, a.rampBase = now, a.limit
	}
}

// NoRamp turns the initial ramp off: slow start from where the window is.
func (a *AIMD) NoRamp() { a.Ramp, a.rampFrom = -1, time.Time{} }

// Idle tells the ramp that no call waits any more at now: it stops where it
// is, until the window is full again.
func (a *AIMD) Idle(now time.Time) {
	if !a.rampFrom.IsZero() {
		a.ramp(now)
		a.rampFrom = time.Time{}
	}
}

// NextRamp is how long until the initial ramp lets one more call go (0:
// it will not; wait for a call to end instead).
func (a *AIMD) NextRamp(now time.Time) time.Duration {
	return a.RampTo(now, int(a.limit)+1)
}

// RampTo is how long until the initial ramp lets n calls be in flight (0:
// it will not, or they may be now). A waiter sleeps until its own turn, so
// a thousand waiters are not all woken at each step of the ramp.
func (a *AIMD) RampTo(now time.Time, n int) time.Duration {
	if a.Ramping() && a.rampFrom.IsZero() && now.Before(a.rampHold) {
		return a.rampHold.Sub(now) // then decide
	}
	if a.answered || a.Ramp <= 0 || a.limit >= a.Max || a.rampFrom.IsZero() {
		return 0
	}
	next := min(max(float64(n), math.Floor(a.limit)+1), a.Max)
	at := a.rampFrom.Add(time.Duration(math.Log2(next/a.rampBase) * float64(a.doubling())))
	return max(at.Sub(now), time.Millisecond)
}

// answer ends the initial ramp: the provider has said something.
func (a *AIMD) answer(now time.Time) {
	if !a.answered {
		a.ramp(now)
		a.answered = true
	}
}

// Refused takes a congestion answer (a 429 or an overload) met while inUse
// calls were in flight. As the first answer it ends the initial ramp at the
// calls in use, not at a window the ramp ran ahead to; and until the
// provider has served a call, each one takes its call's place out of the
// window, so the 429s of a bucket that is already empty do not each send
// the next call into it.
func (a *AIMD) Refused(now time.Time, inUse int) {
	if !a.answered {
		a.answer(now)
		a.limit = max(min(a.limit, float64(inUse)), a.Min)
	}
	if !a.served {
		a.limit = max(a.limit-1, a.Min)
	}
}

// Success grows the limit after a call that succeeded while inflight calls
// (counting it) were running, took latency and used tokens (0: unknown),
// with the rate-limit headers of its response. A limit that is not in use
// does not grow: an idle pool learns nothing about the provider.
func (a *AIMD) Success(inflight int, latency time.Duration, tokens int, rl retry.RateLimit, now time.Time) {
	a.answer(now)
	a.served = true
	switch {
	case tokens <= 0:
	case a.tokensCall == 0:
		a.tokensCall = float64(tokens)
	default:
		a.tokensCall = a.tokensCall*0.9 + float64(tokens)*0.1
	}
	slow := a.limit < a.ssthresh
	if slow && a.latencyRose(latency) {
		a.endSlowStart(now, fmt.Sprintf("slow start ended: latency rose from %s to %s",
			a.baseLat.Round(time.Millisecond), a.roundMin.Round(time.Millisecond)))
		return
	}
	if left, what := a.bucketLeft(rl); left >= 0 && float64(left) < a.limit {
		// The headers say the provider's bucket holds fewer calls than the
		// window: growing would only empty it.
		if slow {
			a.endSlowStart(now, fmt.Sprintf("slow start ended: %s %d below the window", what, left))
		}
		return
	}
	// Calls run in cohorts (they start together after a cooldown or a
	// batch of completions), so "the window was full when this call
	// started" is true for only the last few of each cohort; half full is
	// the signal that the limit is in use.
	if float64(inflight) < a.limit/2 {
		return
	}
	switch {
	case slow:
		a.limit += 1 // slow start: ×2 a round trip when the window is full
	case a.ceiling == 0 || a.limit < a.ceiling: // no cut yet, or below the last one
		a.limit += 1 / a.limit
	default:
		a.limit += 1 / (a.limit * a.Probe)
	}
	a.limit = min(a.limit, a.Max)
}

// bucketLeft is how many calls the rate-limit headers say the provider
// will still take (-1: unknown), and the header that says it.
func (a *AIMD) bucketLeft(rl retry.RateLimit) (int, string) {
	left, what := -1, ""
	if b := rl.Requests; b.Known {
		left, what = b.Remaining, "x-ratelimit-remaining-requests"
	}
	if b := rl.Tokens; b.Known && a.tokensCall > 0 {
		if n := int(float64(b.Remaining) / a.tokensCall); left < 0 || n < left {
			left, what = n, "x-ratelimit-remaining-tokens (in calls)"
		}
	}
	return left, what
}

// latencyRose tracks the fastest success of each round (a window's worth
// of successes, at least 8) against the fastest ever, and reports a round
// whose fastest call was LatencyRise times slower (and 10 ms more).
func (a *AIMD) latencyRose(latency time.Duration) bool {
	if latency <= 0 {
		return false
	}
	if a.baseLat == 0 || latency < a.baseLat {
		a.baseLat = latency
	}
	if a.roundN == 0 || latency < a.roundMin {
		a.roundMin = latency
	}
	if a.roundN == 0 {
		a.roundSize = max(8, int(a.limit))
	}
	a.roundN++
	if a.roundN < a.roundSize {
		return false
	}
	rose := float64(a.roundMin) > float64(a.baseLat)*a.LatencyRise && a.roundMin-a.baseLat > 10*time.Millisecond
	a.roundN = 0
	return rose
}

func (a *AIMD) endSlowStart(now time.Time, reason string) {
	a.ssthresh = a.limit
	a.note(a.limit, now, reason)
}

func (a *AIMD) note(from float64, now time.Time, reason string) {
	a.last = Change{From: max(int(from), 1), To: max(int(a.limit), 1), Reason: reason, At: now}
}

// Congestion cuts the limit after congestion (429s, an overload, an empty
// bucket) met by a call started at started, at now, while inflight calls
// were in flight, to the lower of Beta × the window in use and sustained,
// the window the provider has been serving (served rate times latency;
// +Inf when unknown). The window in use is the limit, or fewer calls when
// fewer were in flight (the initial ramp runs ahead of the calls, an idle
// pool's limit was never tested; as TCP's window validation). A rate limit
// measured in requests per second is not a concurrency: after a cooldown the
// provider's bucket is full, a whole window succeeds, and the limit alone
// would keep growing past what the rate allows. It reports whether it cut:
// only the first congestion of an epoch (calls started before the last cut
// are the same event) does.
func (a *AIMD) Congestion(started, now time.Time, inflight int, sustained float64, reason string) bool {
	a.answer(now)
	if started.Before(a.epoch) {
		return false
	}
	from := a.limit
	used := min(a.limit, max(float64(inflight), a.start))
	a.ceiling = min(used, max(sustained, a.Min))
	a.limit = max(min(used*a.Beta, sustained), a.Min)
	a.ssthresh = a.limit
	a.epoch = now
	a.note(from, now, reason)
	return true
}

// Faults trims the limit gently (FaultBeta) when faults have risen above
// their usual noise, once per epoch. It reports whether it trimmed.
func (a *AIMD) Faults(started, now time.Time, reason string) bool {
	a.answer(now)
	if started.Before(a.epoch) {
		return false
	}
	from := a.limit
	a.limit = max(a.limit*a.FaultBeta, a.Min)
	a.ssthresh = min(a.ssthresh, a.limit)
	a.epoch = now
	a.note(from, now, reason)
	return true
}
