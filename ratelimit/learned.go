package ratelimit

import (
	"fmt"
	"time"
)

// Defaults of the learned pace.
const (
	// LearnedBetaDefault is the share of the rate served before a
	// congestion event that the learned pace keeps (and of the pace
	// itself at a later event): a little under what the provider took, so
	// that its bucket refills.
	LearnedBetaDefault = 0.97
	// LearnedProbeDefault is how fast the learned pace grows, as a share
	// of itself a second, while it holds calls back: slow, because each
	// probe past the provider's rate ends in a cohort of 429s: from just
	// under the provider's rate (after a cut) it passes it within seconds
	// and empties a bucket of a second's worth some seconds later, so
	// congestion events come several times less often than with the
	// window alone, whose steps of one call are a large share of the rate
	// of a provider that sustains few (docs/ratelimits.md has the runs).
	LearnedProbeDefault = 0.01
	// learnedMinServed and learnedMinSpan are the least a measure of the
	// provider's rate is taken from: successes, over a span.
	learnedMinServed = 5
	learnedMinSpan   = 500 * time.Millisecond
	// learnedHold is how long after the pace was set it does not grow.
	learnedHold = 2 * time.Second
)

// learnedPace is the request rate an adaptive limiter has learned for a
// provider that congests (429s, overloads, an empty bucket) without
// configured limits. A provider that limits requests a second is not
// limited in calls in flight: a window just above the calls its rate
// sustains drains its bucket, one just below it leaves the rate unused, and
// when it sustains four calls, one call more is a quarter too many.
//
// The rate is measured between two congestion events: the provider's
// bucket is empty at each (that is why it refused), so the calls it took
// between them — those that started after the first event and before the
// second, and succeeded — are what it refilled in that time, whatever its
// burst and however long the cooldowns in between. Each process counts its
// own calls as its share and publishes it with its window; every process
// books its calls on one shared schedule at the sum of the shares
// (Limiter.bookPace). The calls that
// started before the second event are known once they have ended, when the
// first call started after it succeeds. The pace is then
// LearnedBetaDefault of that rate, and grows by LearnedProbeDefault a
// second while it holds calls back, after a hold of learnedHold; a 429
// while it is above what was learned takes it back down, never below it
// (one-off 429s a provider sends at random must not wear it away). The
// window still caps the calls in flight. It is not safe for concurrent
// use; the Limiter guards it.
type learnedPace struct {
	rate   float64   // calls a second; 0: not learned
	base   float64   // the rate last learned from a measure
	tat    time.Time // the next free slot of this process's share (when the store is out)
	setAt  time.Time // when it was last set: calls started before are its cohort
	change Change    // the last time it was set, and why

	prevEvent, lastEvent time.Time // the last two congestion events
	inPrev, inLast       int       // successes started after each of them (and before the next)
	pending              bool      // the span between them is not measured yet
	reason               string    // of the last event
}

// on reports whether a pace was learned.
func (p *learnedPace) on() bool { return p.rate > 0 }

// event takes a congestion event at at (every process sees each once):
// the span since the one before can be measured once the calls started
// in it have ended.
func (p *learnedPace) event(at time.Time, reason string) {
	if p.pending {
		p.measure(at) // another event before the span was done: take it as it is
	}
	if !p.lastEvent.IsZero() {
		p.prevEvent, p.inPrev, p.pending = p.lastEvent, p.inLast, true
	}
	p.lastEvent, p.inLast, p.reason = at, 0, reason
}

// success counts a call that started at started and succeeded at now. The
// first success of a call started after the last event ends its span.
func (p *learnedPace) success(started, now time.Time) {
	switch {
	case p.lastEvent.IsZero():
	case started.After(p.lastEvent):
		p.inLast++
		if p.pending {
			p.measure(now)
		}
	case started.After(p.prevEvent) && p.pending:
		p.inPrev++
	}
}

// measure sets the pace from the span between the last two events, when
// enough was served in it to tell.
func (p *learnedPace) measure(now time.Time) {
	p.pending = false
	span := p.lastEvent.Sub(p.prevEvent)
	if p.inPrev < learnedMinServed || span < learnedMinSpan {
		return
	}
	served := float64(p.inPrev) / span.Seconds()
	from := p.rate
	p.base = served * LearnedBetaDefault
	p.rate, p.setAt = p.base, now
	p.change = Change{Reason: fmt.Sprintf("paced at %s (was %s): the provider took %.1f calls/s between two congestion events (%s)",
		paceText(p.rate), paceText(from), served, p.reason), At: now}
}

// refused takes a 429 of a call started at started, at now: a pace that
// grew past what was learned has found the provider's rate again, and goes
// back down, never below what was learned.
func (p *learnedPace) refused(started, now time.Time) {
	if !p.on() || started.Before(p.setAt) || p.rate <= p.base {
		return
	}
	from := p.rate
	p.rate, p.setAt = max(p.base, p.rate*LearnedBetaDefault), now
	p.change = Change{Reason: fmt.Sprintf("paced at %s (was %s): a 429 above the learned %s", paceText(p.rate),
		paceText(from), paceText(p.base)), At: now}
}

// held takes a call the pace holds back at now: demand is above it, and
// the provider may take more. Once the hold is over each call held grows
// this process's share by LearnedProbeDefault calls a second: while the
// schedule holds every call, it holds as many a second as its rate, so it
// grows by LearnedProbeDefault of itself a second.
func (p *learnedPace) held(now time.Time) {
	if p.on() && now.Sub(p.setAt) >= learnedHold {
		p.rate += LearnedProbeDefault
	}
}

// reserve books the next slot of this process's own share at now, when
// the shared schedule cannot be booked (the store is unreachable), and
// returns when the call may go.
func (p *learnedPace) reserve(now time.Time) time.Time {
	if !p.on() {
		return now
	}
	at := p.tat
	if at.Before(now) {
		at = now
	} else {
		p.held(now)
	}
	p.tat = at.Add(time.Duration(float64(time.Second) / p.rate))
	return at
}

// paceText is a pace as text: "19.0 calls/s", "none".
func paceText(rate float64) string {
	if rate <= 0 {
		return "none"
	}
	return fmt.Sprintf("%.1f calls/s", rate)
}
