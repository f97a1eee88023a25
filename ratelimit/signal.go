package ratelimit

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// signal is what one call's outcome says about the provider.
type signal uint8

const (
	// sigNone: nothing (the call was cancelled, or failed before any
	// request was sent).
	sigNone signal = iota
	// sigOK: a success.
	sigOK
	// sigRefused: an answer that is not the provider's failure (a 4xx
	// other than 429, an answer jetpool could not read).
	sigRefused
	// sigCongestion: the provider is full for us: a 429.
	sigCongestion
	// sigOverload: the provider is full for everyone: 529,
	// overloaded_error. Congestion for the window, a failure for the
	// breaker.
	sigOverload
	// sigFault: one call failed without saying anything about capacity: a
	// 5xx, a connection refused or reset, a stream that dropped.
	sigFault
	// sigTimeout: this call's own timeout (a hung or dripping endpoint, or
	// a long answer): neither a failure nor a success.
	sigTimeout
	nSignals
)

// signalOf classifies a call's error (nil: a success).
func signalOf(err error) signal {
	if err == nil {
		return sigOK
	}
	if errors.Is(err, context.Canceled) {
		return sigNone
	}
	e := retry.AsError(err)
	switch {
	case e.Class == retry.ClassRateLimit:
		return sigCongestion
	case Overloaded(e):
		return sigOverload
	case e.TypeName == "APITimeoutError" || errors.Is(e, context.DeadlineExceeded):
		return sigTimeout
	case e.Class == retry.ClassServer || e.Class == retry.ClassNetwork:
		return sigFault
	case e.Class == retry.ClassProgramming:
		return sigNone // never sent
	}
	return sigRefused
}

// Overloaded reports whether a server error says the provider as a whole is
// overloaded: a 529, or Anthropic's overloaded_error without a status (an
// error event inside a stream). That is congestion, like a 429. A 503 (or
// Gemini's UNAVAILABLE) on one call is a fault, whatever type its body
// names: it says little about capacity, and cutting on it collapsed
// adaptive concurrency under ordinary noise.
func Overloaded(e *retry.Error) bool {
	if e == nil || e.Status == 503 {
		return false
	}
	return e.Status == 529 || strings.Contains(strings.ToLower(e.ProviderType), "overloaded")
}

// counts are outcomes by signal.
type counts [nSignals]int

// calls is the outcomes that reached a verdict: all but none and timeouts.
func (n counts) calls() int {
	return n[sigOK] + n[sigRefused] + n[sigCongestion] + n[sigOverload] + n[sigFault]
}

// failures is what the breaker counts: faults and overloads.
func (n counts) failures() int { return n[sigFault] + n[sigOverload] }

// congested is the answers that said the provider is full.
func (n counts) congested() int { return n[sigCongestion] + n[sigOverload] }

// tallyBuckets is the resolution of a tally.
const tallyBuckets = 10

// tally counts outcomes over a sliding window, in tallyBuckets buckets. It
// is not safe for concurrent use (the Limiter guards it). Buckets start at
// Unix nanoseconds: this runs on every answer, and time.Time's Truncate and
// comparisons were most of its cost.
type tally struct {
	window  time.Duration
	buckets [tallyBuckets]struct {
		start int64 // Unix ns; 0: unused
		n     counts
	}
}

func newTally(window time.Duration) tally { return tally{window: max(window, time.Millisecond)} }

func (t *tally) width() int64 { return max(int64(t.window/tallyBuckets), 1) }

// add counts s at now.
func (t *tally) add(now time.Time, s signal) {
	w, ns := t.width(), now.UnixNano()
	slot := ns / w
	if ns%w < 0 { // a clock before 1970: round down, not toward zero
		slot--
	}
	b := &t.buckets[(slot%tallyBuckets+tallyBuckets)%tallyBuckets]
	if start := slot * w; b.start != start {
		b.start, b.n = start, counts{}
	}
	b.n[s]++
}

// counts sums the buckets inside the window ending at now.
func (t *tally) counts(now time.Time) counts {
	var out counts
	ns := now.UnixNano()
	from := ns - int64(t.window)
	for i := range t.buckets {
		b := &t.buckets[i] // not a copy
		if b.start > from && b.start <= ns {
			for j, v := range b.n {
				out[j] += v
			}
		}
	}
	return out
}

// reset forgets everything (a circuit that closed starts afresh).
func (t *tally) reset() {
	for i := range t.buckets {
		t.buckets[i].start, t.buckets[i].n = 0, counts{}
	}
}
