package ratelimit

import (
	"math"
	"time"

	"github.com/jetpool/jetpool/provider"
)

// HeadroomDefault is the share of a configured rpm/tpm that the limiter
// schedules. A provider counts requests when they arrive; network and
// scheduling jitter makes some arrive closer together than they were sent,
// and at a schedule of exactly 100% that jitter alone is a stream of 429s.
// 3% of slack lets the provider's own bucket build a small reserve.
const HeadroomDefault = 0.97

// Pace is the GCRA schedule of one budget: one unit every Interval, with
// bursts of up to Burst units.
type Pace struct {
	Interval time.Duration
	Burst    int
}

// PaceOf is the schedule of perMinute units a minute at headroom (0:
// HeadroomDefault), bursting up to one second's worth (at least one). A
// one-second burst is what providers quantise their per-minute limits to.
func PaceOf(perMinute int, headroom float64) Pace {
	if perMinute <= 0 {
		return Pace{}
	}
	if headroom <= 0 || headroom > 1 {
		headroom = HeadroomDefault
	}
	rate := float64(perMinute) * headroom / 60 // per second
	iv := time.Duration(float64(time.Second) / rate)
	return Pace{Interval: max(iv, time.Nanosecond), Burst: max(1, int(math.Floor(rate)))}
}

// On reports whether the schedule limits anything.
func (p Pace) On() bool { return p.Interval > 0 }

// tolerance is how far ahead of now the TAT may run before a unit must wait.
func (p Pace) tolerance() time.Duration { return time.Duration(p.Burst-1) * p.Interval }

// Reserve books cost units at now on the schedule whose theoretical arrival
// time is tat. It returns when the units may be used (now, or later) and the
// new tat. GCRA with reservation: a caller that must wait books its place
// and sleeps until it, so waiters are spaced by Interval instead of polling
// together. A cost above Burst is allowed and pushes the schedule into debt
// (a big prompt is never starved).
func (p Pace) Reserve(tat, now time.Time, cost int) (at, next time.Time) {
	if !p.On() || cost <= 0 {
		return now, tat
	}
	if tat.Before(now) {
		tat = now
	}
	at = tat.Add(-p.tolerance())
	if at.Before(now) {
		at = now
	}
	return at, tat.Add(time.Duration(cost) * p.Interval)
}

// Adjust moves tat by delta units: positive when a call used more than was
// reserved, negative to give back what it did not use. The schedule never
// goes back before now (unused past capacity is not banked).
func (p Pace) Adjust(tat, now time.Time, delta int) time.Time {
	if !p.On() || delta == 0 {
		return tat
	}
	t := tat.Add(time.Duration(delta) * p.Interval)
	if delta < 0 && t.Before(now) {
		if tat.Before(now) {
			return tat
		}
		return now
	}
	return t
}

// Paces are the schedules of a provider's limits.
type Paces struct {
	Req, Tok Pace
}

// PacesOf returns the schedules of l at headroom.
func PacesOf(l provider.Limits, headroom float64) Paces {
	return Paces{Req: PaceOf(l.RPM, headroom), Tok: PaceOf(l.TPM, headroom)}
}

// reserve books one request of tokens on both schedules of s.
func (ps Paces) reserve(s *State, now time.Time, tokens int) time.Time {
	at, next := ps.Req.Reserve(s.ReqTAT, now, 1)
	if ps.Req.On() {
		s.ReqTAT = next
	}
	if ps.Tok.On() {
		atTok, nextTok := ps.Tok.Reserve(s.TokTAT, now, max(tokens, 1))
		s.TokTAT = nextTok
		if atTok.After(at) {
			at = atTok
		}
	}
	return at
}

// afterCooldown makes the schedules start at the end of a cooldown with an
// empty burst: the provider's bucket is empty after a 429, so the first
// calls after it are spaced, not fired together.
func (ps Paces) afterCooldown(s *State, until time.Time) {
	if ps.Req.On() {
		if t := until.Add(ps.Req.tolerance()); s.ReqTAT.Before(t) {
			s.ReqTAT = t
		}
	}
	if ps.Tok.On() {
		if t := until.Add(ps.Tok.tolerance()); s.TokTAT.Before(t) {
			s.TokTAT = t
		}
	}
}
