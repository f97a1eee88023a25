package ratelimit

import (
	"fmt"
	"math"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Done reports the outcome of the permit's call: the whole response (its
// usage and rate-limit headers) and its error (nil on success). A call
// cancelled by its context is neither a success nor a failure. Done is
// idempotent.
//
// Done does three things, in order: it learns locally (this process's
// window, its tallies of recent answers), it decides what the outcome
// changes in the shared state (decide: a pure function of the outcome and
// the tallies, table-tested), and it writes that with one compare-and-set
// (effect.apply, also pure), together with the lease and token-estimate
// bookkeeping. Nothing is written for an ordinary success without limits.
func (p *Permit) Done(resp provider.Response, err error) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	l := p.l
	if p.probe {
		defer l.setProbing(false)
	}
	now := l.now()
	o := outcome{Now: now, Started: p.started, Signal: signalOf(err), RateLimit: resp.RateLimit, Probe: p.probe}
	if e := retry.AsError(err); e != nil {
		o.Wait, o.RateLimit, o.Cause = e.Wait(), e.RateLimit, e.Error()
	}
	l.logCapped(o.RateLimit)

	l.mu.Lock()
	l.learn(p, &o, resp.Usage, now)
	eff := decide(o, l.rule())
	if !eff.CooldownUntil.IsZero() && eff.CooldownUntil.After(l.localCooldown) {
		l.localCooldown = eff.CooldownUntil
	}
	win, publish := l.windowToPublish(now, o.Signal, eff)
	prev, prevAt := l.published, l.publishedAt
	if publish {
		// Taken as published now, not once the write is back: the calls
		// that end while it is on its way would each publish it too (at
		// zero latency, hundreds of compare-and-sets that conflict, a
		// sixth of a worker's CPU).
		l.published, l.publishedAt = win, now
	}
	l.notifyLocked()
	l.mu.Unlock()

	actual := resp.Usage.InputTokens + resp.Usage.OutputTokens
	correct := l.paces.Tok.On() && actual > 0 && actual != p.tokens
	if !(p.lease || correct || eff.writes() || publish) {
		return
	}
	l.write(p, now, eff, actual, correct, win, publish, prev, prevAt)
}

// write brings one call's outcome into the shared state: its lease given
// back, the token estimate corrected, the effect applied, the window
// published. It is apart from Done, which most calls leave before it, so
// that Done's frame stays small (see acquire).
func (l *Limiter) write(p *Permit, now time.Time, eff effect, actual int, correct bool, win Window, publish bool, prev Window, prevAt time.Time) {
	cfg := l.r.cfg
	st, uerr := l.r.store.Update(l.r.ctx, l.key, func(s *State) bool {
		now := l.now()
		l.bound(s, now)
		l.own(s)
		if p.lease {
			l.lease(s, now, -1)
		}
		if correct {
			s.TokTAT = l.paces.Tok.Adjust(s.TokTAT, now, actual-p.tokens)
		}
		if eff.apply(s, now, p.started, cfg.Holder, l.breaker) {
			l.cooldowns.Add(1)
		}
		if !eff.CooldownUntil.IsZero() {
			l.paces.afterCooldown(s, s.CooldownUntil)
		}
		if publish {
			l.publish(s, now, win)
		}
		s.Updated = now
		return true
	})
	if uerr != nil {
		if publish { // not published after all: the next call's Done tries again
			l.mu.Lock()
			if l.published == win && l.publishedAt.Equal(now) {
				l.published, l.publishedAt = prev, prevAt
			}
			l.mu.Unlock()
		}
		// The local cooldown, if any, still holds this process back until it ends.
		l.r.log.Warn().Err(uerr).Str("provider", l.name).Msg("rate-limit state not updated")
		return
	}
	l.observe(st) // the shared state holds the cooldown now: the local one ends there
}

// learn updates this process's view with one outcome (l.mu held): the
// window, the tallies and the counts, and fills o's tallies for decide.
func (l *Limiter) learn(p *Permit, o *outcome, usage provider.Usage, now time.Time) {
	sig := o.Signal
	switch sig {
	case sigNone, sigTimeout:
	case sigCongestion, sigOverload:
		l.run++
	default:
		l.run = 0
	}
	if sig != sigNone {
		l.recent.add(now, sig)
		l.health.add(now, sig)
	}
	o.Run = l.run
	switch sig {
	case sigCongestion, sigOverload, sigFault:
		// Only these answers' decisions read the tallies and the circuit (a
		// cooldown on congestion, the breaker and the fault share on
		// failures); summing them for every success was a third of Done at
		// zero latency.
		o.Recent, o.Health, o.Closed = l.recent.counts(now), l.health.counts(now), l.shared.Breaker.Closed()
	}
	switch sig {
	case sigCongestion, sigOverload:
		l.congested.Add(1)
	case sigFault:
		l.faults.Add(1)
	}
	if o.RateLimit.Empty() && sig != sigCongestion && sig != sigOverload {
		l.congested.Add(1)
	}
	if l.aimd == nil {
		return
	}
	l.inflight--
	switch sig {
	case sigNone:
	case sigOK:
		latency := now.Sub(p.started)
		l.aimd.Success(p.inflightAt, latency, usage.InputTokens+usage.OutputTokens, o.RateLimit, now)
		l.served.add(now, latency)
		l.pace.success(p.started, now)
	case sigFault:
		l.aimd.answer(now)
		// Faults say little about capacity one by one; a share above the
		// usual noise trims the window gently (a struggling endpoint
		// serves better with fewer calls), the breaker handles the rest.
		if n := o.Health; n.calls() >= l.breaker.MinCalls && float64(n[sigFault]) >= AdaptiveFaultShareDefault*float64(n.calls()) {
			l.aimd.Faults(p.started, now, fmt.Sprintf("faults from %s: %d of the last %d calls", l.name, n[sigFault], n.calls()))
		}
	case sigCongestion, sigOverload:
		// Congestion cuts with the shared cooldown it sets (observe);
		// until then it stops the initial ramp where the calls are.
		l.aimd.Refused(now, max(l.peak, l.inflight+1))
		l.pace.refused(p.started, now)
	default:
		l.aimd.answer(now)
	}
}

// rule is the configuration decide reads.
func (l *Limiter) rule() ruleConfig {
	return ruleConfig{Provider: l.name, Cooldown: l.r.cfg.Cooldown, CongestionMin: l.r.cfg.CongestionMin,
		CongestionShare: l.r.cfg.CongestionShare, CongestionRun: l.r.cfg.CongestionRun, Breaker: l.breaker}
}

// logCapped logs, once per provider, that a wait it asked for was capped.
func (l *Limiter) logCapped(rl retry.RateLimit) {
	if rl.Capped <= 0 {
		return
	}
	l.mu.Lock()
	first := !l.cappedLogged
	l.cappedLogged = true
	l.mu.Unlock()
	if first {
		l.r.log.Warn().Str("provider", l.name).Dur("asked", rl.Capped).Dur("max_retry_after", l.maxWait).
			Msgf("provider %s asked to wait %s; capped at max_retry_after %s (logged once)", l.name, rl.Capped, l.maxWait)
	}
}

// windowToPublish says whether this process's window should be written to
// the shared state with this outcome's update (l.mu held): on a change of
// the window's decision, or when it moved and a second has passed.
func (l *Limiter) windowToPublish(now time.Time, sig signal, eff effect) (Window, bool) {
	if l.aimd == nil || sig == sigNone {
		return Window{}, false
	}
	w := Window{N: l.aimd.Limit(now), Change: l.aimd.Last(), Pace: math.Round(l.pace.rate*10) / 10, Expires: now.Add(l.r.cfg.LeaseTTL)}
	switch {
	case w.Change != l.published.Change, paceMoved(l.published.Pace, w.Pace):
		return w, true
	case (w.N != l.published.N || w.Pace != l.published.Pace) && (eff.writes() || now.Sub(l.publishedAt) >= publishEvery):
		return w, true
	case now.Sub(l.publishedAt) >= l.r.cfg.LeaseTTL/2:
		return w, true // still alive: before it lapses
	}
	return w, false
}

// paceMoved reports whether a learned share moved enough to be published
// at once (the other processes book at the sum of the shares): learned,
// dropped, or by more than a tenth.
func paceMoved(from, to float64) bool {
	return (from == 0) != (to == 0) || math.Abs(to-from) > from/10
}

// publish writes this process's window into s, dropping lapsed ones.
func (l *Limiter) publish(s *State, now time.Time, w Window) {
	if s.Windows == nil {
		s.Windows = map[string]Window{}
	}
	for h, x := range s.Windows {
		if !now.Before(x.Expires) {
			delete(s.Windows, h)
		}
	}
	s.Windows[l.r.cfg.Holder] = w
}

// outcome is what the shared-state rule reads: one call's outcome, and what
// this process saw of the provider around it.
type outcome struct {
	Now, Started time.Time
	Signal       signal
	Cause        string          // the error's text
	Wait         time.Duration   // the provider's Retry-After or reset, capped by the adapter
	RateLimit    retry.RateLimit // the response's rate-limit headers
	Recent       counts          // this process's answers in the congestion window, this one included (for congestion, overload and faults only)
	Run          int             // congestion answers in a row, this one included
	Health       counts          // … in the breaker's window (the same)
	Probe        bool            // the call was the half-open circuit's probe
	Closed       bool            // the circuit is closed, as this process last saw it (the same)
}

// ruleConfig is the configuration of decide.
type ruleConfig struct {
	Provider        string
	Cooldown        time.Duration // when congestion names no wait
	CongestionMin   int
	CongestionShare float64
	CongestionRun   int
	Breaker         BreakerConfig
}

// Circuit changes of an effect.
const (
	circuitTrip    = "trip"    // open it: the provider is unhealthy
	circuitReopen  = "reopen"  // the probe failed: open again, for longer
	circuitClose   = "close"   // the probe was answered: close it
	circuitRelease = "release" // the probe said nothing: the next waiter probes
)

// effect is what one outcome changes in the shared state.
type effect struct {
	// Congested is a congestion event: every process cuts its window
	// once (a new cooldown is one too).
	Congested bool
	// CooldownUntil sets (or, for the cohort of calls that went before
	// it, extends) the shared cooldown; zero: no cooldown.
	CooldownUntil time.Time
	Cause         string // the cooldown's cause: the provider's words
	Circuit       string // "" or a circuit change
	LastError     string // the circuit's last error
	Reason        string // why, for the state's Reason
}

func (e effect) writes() bool { return e.Congested || !e.CooldownUntil.IsZero() || e.Circuit != "" }

// decide is the shared-state rule of Done: what one call's outcome changes
// for every process. It is pure.
//
// Congestion and the shared cooldown:
//   - a success whose rate-limit headers say a bucket is empty (remaining
//     0) is congestion: every window is cut, nothing waits (the bucket
//     refills as calls go, and the calls it cannot take meet 429s that
//     say how long to wait);
//   - a 429 whose headers say a bucket is empty sets the cooldown until
//     the longer of its Retry-After and that bucket's reset
//     (Config.Cooldown when it names neither);
//   - a 429 or an overload sets it until the provider's wait when it is
//     not one-off: CongestionRun of them in a row, or at least
//     CongestionMin of them and CongestionShare of this process's answers
//     in the congestion window (so two 429s before any success do). A
//     one-off 429 among successes changes nothing shared: only its record
//     waits (its session delay, never shorter than the Retry-After). A
//     single 429 before any success does not either: with a few percent of
//     random 429s, one among a ramp's first answers is as likely as not.
//
// The circuit (unless the breaker is off):
//   - the probe's outcome decides the half-open circuit: a failure (5xx,
//     overload, a failed connection) reopens it for longer; any answer
//     (success, 4xx, 429) closes it; a timeout or a cancellation hands the
//     probe to the next waiter;
//   - otherwise a failure opens a closed circuit when the breaker window's
//     counts trip it (FailureRatio of at least MinCalls calls). Timeouts of
//     single calls, 4xx and 429s are not failures.
func decide(o outcome, c ruleConfig) effect {
	var e effect
	wait := func(d time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return c.Cooldown
	}
	congestion := o.Signal == sigCongestion || o.Signal == sigOverload
	switch {
	case congestion && o.RateLimit.Empty():
		e.CooldownUntil = o.Now.Add(wait(max(o.RateLimit.EmptyReset(), o.Wait)))
		e.Cause = o.Cause
		e.Reason = fmt.Sprintf("cooldown %s: %s on a 429 from %s: %s", e.CooldownUntil.Sub(o.Now).Round(time.Millisecond),
			emptyBucket(o.RateLimit), c.Provider, o.Cause)
	case o.Signal != sigNone && o.RateLimit.Empty():
		e.Congested = true
		e.Reason = fmt.Sprintf("%s from %s", emptyBucket(o.RateLimit), c.Provider)
	case congestion:
		n, all := o.Recent.congested(), o.Recent.calls()
		var why string
		switch {
		case c.CongestionRun > 0 && o.Run >= c.CongestionRun:
			why = fmt.Sprintf("%d answers of %s in a row said it is full", o.Run, c.Provider)
		case n >= c.CongestionMin && float64(n) >= c.CongestionShare*float64(all):
			why = fmt.Sprintf("%d of %s's last %d answers said it is full", n, c.Provider, all)
		}
		if why != "" {
			e.CooldownUntil = o.Now.Add(wait(o.Wait))
			e.Cause = o.Cause
			e.Reason = fmt.Sprintf("cooldown %s: %s: %s", e.CooldownUntil.Sub(o.Now).Round(time.Millisecond), why, o.Cause)
		}
	}
	if c.Breaker.Off {
		return e
	}
	failure := o.Signal == sigFault || o.Signal == sigOverload
	switch {
	case o.Probe && failure:
		e.Circuit, e.LastError = circuitReopen, o.Cause
		e.Reason = fmt.Sprintf("circuit reopened: the probe of %s failed: %s", c.Provider, o.Cause)
	case o.Probe && (o.Signal == sigNone || o.Signal == sigTimeout):
		e.Circuit = circuitRelease
	case o.Probe:
		e.Circuit = circuitClose
		e.Reason = fmt.Sprintf("circuit closed: the probe of %s was answered", c.Provider)
	case failure && o.Closed && c.Breaker.trips(o.Health):
		e.Circuit, e.LastError = circuitTrip, o.Cause
		e.Reason = fmt.Sprintf("circuit opened: %d of %s's last %d calls failed: %s",
			o.Health.failures(), c.Provider, o.Health.calls(), o.Cause)
	}
	return e
}

// emptyBucket names the header that said a bucket is empty.
func emptyBucket(rl retry.RateLimit) string {
	if rl.Requests.Known && rl.Requests.Remaining <= 0 {
		return "x-ratelimit-remaining-requests 0"
	}
	return "x-ratelimit-remaining-tokens 0"
}

// apply writes e into s at now, for a call that started at started and
// whose process is holder. It is pure. A cooldown asked for by a call that
// went after the current one ended is a new event (counted, and it cuts
// every process's window); one asked for by the cohort of calls already on
// the wire when the cooldown was set is the same event, which may only ask
// for a longer wait. It reports whether it set a new cooldown.
func (e effect) apply(s *State, now, started time.Time, holder string, b BreakerConfig) (newCooldown bool) {
	if !e.CooldownUntil.IsZero() {
		switch {
		case !started.Before(s.CooldownUntil):
			s.CooldownUntil, s.CooldownCause, s.CooldownSet = e.CooldownUntil, e.Cause, now
			s.Cooldowns++
			s.note(now, e.Reason)
			newCooldown = true
		case e.CooldownUntil.After(s.CooldownUntil):
			s.CooldownUntil = e.CooldownUntil
		}
	}
	// A congestion event for every process, once per round trip: calls
	// that went before the last event are its cohort.
	if (newCooldown || e.Congested) && !started.Before(s.CongestedAt) {
		s.CongestedAt = now
		if e.Congested {
			s.note(now, e.Reason)
		}
	}
	mine := s.Breaker.State == CircuitHalfOpen && s.Breaker.Probe == holder
	switch {
	case e.Circuit == circuitTrip && s.Breaker.Closed():
		b.open(&s.Breaker, now, e.LastError)
		s.note(now, e.Reason)
	case e.Circuit == circuitReopen && mine:
		b.open(&s.Breaker, now, e.LastError)
		s.note(now, e.Reason)
	case e.Circuit == circuitClose && mine:
		s.Breaker.close()
		s.note(now, e.Reason)
	case e.Circuit == circuitRelease && mine:
		s.Breaker.release(now)
	}
	return newCooldown
}
