package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/retry"
)

// tallied is counts from pairs of signal and number.
func tallied(kv ...int) counts {
	var n counts
	for i := 0; i+1 < len(kv); i += 2 {
		n[kv[i]] += kv[i+1]
	}
	return n
}

var (
	ok        = int(sigOK)
	congested = int(sigCongestion)
	fault     = int(sigFault)
	overload  = int(sigOverload)
	refused   = int(sigRefused)
)

// The shared-state rule of Done, as a table: the outcome of one call and
// what this process saw around it → what changes for every process.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := t0
	rule := ruleConfig{Provider: "openai", Cooldown: time.Second, CongestionMin: 2, CongestionShare: 0.2, CongestionRun: 3,
		Breaker: BreakerConfig{MinCalls: 10, FailureRatio: 0.5}.withDefaults()}
	empty := retry.RateLimit{Requests: retry.Bucket{Known: true, Limit: 500, Remaining: 0, Reset: 700 * time.Millisecond}}
	for _, c := range []struct {
		name      string
		o         outcome
		rule      func(*ruleConfig)
		until     time.Duration // of the shared cooldown; 0: none
		congested bool          // a congestion event without a cooldown
		circuit   string
		reason    string
	}{
		{name: "a success changes nothing", o: outcome{Signal: sigOK, Recent: tallied(ok, 50)}},
		{name: "a one-off 429 among successes: only its record waits",
			o: outcome{Signal: sigCongestion, Wait: time.Second, Recent: tallied(ok, 50, congested, 1)}},
		{name: "two 429s among many successes are still one-off (under the share)",
			o: outcome{Signal: sigCongestion, Wait: time.Second, Recent: tallied(ok, 50, congested, 2)}},
		{name: "429s that are a fifth of the answers are congestion",
			o:     outcome{Signal: sigCongestion, Wait: 3 * time.Second, Cause: "RateLimitError: slow down", Recent: tallied(ok, 8, congested, 2)},
			until: 3 * time.Second, reason: "cooldown 3s: 2 of openai's last 10 answers said it is full: RateLimitError: slow down"},
		{name: "the first answers all 429s: congestion",
			o:     outcome{Signal: sigCongestion, Recent: tallied(congested, 2)},
			until: time.Second, reason: "cooldown 1s: 2 of openai's last 2 answers said it is full: "},
		{name: "three 429s in a row are congestion, however many successes came before",
			o:     outcome{Signal: sigCongestion, Wait: time.Second, Cause: "RateLimitError: x", Run: 3, Recent: tallied(ok, 300, congested, 3)},
			until: time.Second, reason: "cooldown 1s: 3 answers of openai in a row said it is full: RateLimitError: x"},
		{name: "two in a row among many successes are not",
			o: outcome{Signal: sigCongestion, Run: 2, Recent: tallied(ok, 300, congested, 2)}},
		{name: "a single 429 with nothing else seen is not enough",
			o: outcome{Signal: sigCongestion, Recent: tallied(congested, 1)}},
		{name: "overloads count as congestion",
			o:     outcome{Signal: sigOverload, Recent: tallied(overload, 3, ok, 3)},
			until: time.Second},
		{name: "an empty bucket on a success: congestion, no cooldown",
			o:         outcome{Signal: sigOK, RateLimit: empty, Recent: tallied(ok, 50)},
			congested: true, reason: "x-ratelimit-remaining-requests 0 from openai"},
		{name: "an empty bucket on a one-off 429: the longer of reset and Retry-After",
			o:     outcome{Signal: sigCongestion, Wait: 2 * time.Second, Cause: "RateLimitError: x", RateLimit: empty, Recent: tallied(ok, 50, congested, 1)},
			until: 2 * time.Second, reason: "cooldown 2s: x-ratelimit-remaining-requests 0 on a 429 from openai: RateLimitError: x"},
		{name: "an empty token bucket on a 429 without a reset or Retry-After: the default",
			o:     outcome{Signal: sigCongestion, RateLimit: retry.RateLimit{Tokens: retry.Bucket{Known: true}}, Recent: tallied(ok, 10, congested, 1)},
			until: time.Second},
		{name: "an empty token bucket on a success",
			o:         outcome{Signal: sigOK, RateLimit: retry.RateLimit{Tokens: retry.Bucket{Known: true}}, Recent: tallied(ok, 1)},
			congested: true, reason: "x-ratelimit-remaining-tokens 0 from openai"},
		{name: "a cancelled call's headers say nothing",
			o: outcome{Signal: sigNone, RateLimit: empty}},
		{name: "a share of 429s set by configuration",
			o:    outcome{Signal: sigCongestion, Recent: tallied(ok, 8, congested, 2)},
			rule: func(r *ruleConfig) { r.CongestionShare = 0.5 }},

		{name: "faults under the ratio keep the circuit closed",
			o: outcome{Signal: sigFault, Closed: true, Health: tallied(ok, 11, fault, 10)}},
		{name: "faults under min_calls keep it closed",
			o: outcome{Signal: sigFault, Closed: true, Health: tallied(fault, 9)}},
		{name: "half of at least min_calls failed: trip",
			o:       outcome{Signal: sigFault, Cause: "ServerError: boom", Closed: true, Health: tallied(ok, 5, fault, 5)},
			circuit: circuitTrip, reason: "circuit opened: 5 of openai's last 10 calls failed: ServerError: boom"},
		{name: "overloads are failures for the breaker (and congestion)",
			o:       outcome{Signal: sigOverload, Closed: true, Health: tallied(overload, 10), Recent: tallied(overload, 10)},
			until:   time.Second,
			circuit: circuitTrip},
		{name: "429s and 4xx are calls, not failures",
			o: outcome{Signal: sigFault, Closed: true, Health: tallied(fault, 6, congested, 4, refused, 3)}},
		{name: "a success never trips",
			o: outcome{Signal: sigOK, Closed: true, Health: tallied(fault, 20)}},
		{name: "an open circuit is not tripped again",
			o: outcome{Signal: sigFault, Closed: false, Health: tallied(fault, 20)}},
		{name: "the probe failed: reopen",
			o:       outcome{Signal: sigFault, Probe: true, Cause: "ServerError: boom"},
			circuit: circuitReopen, reason: "circuit reopened: the probe of openai failed: ServerError: boom"},
		{name: "the probe was answered: close",
			o: outcome{Signal: sigOK, Probe: true}, circuit: circuitClose, reason: "circuit closed: the probe of openai was answered"},
		{name: "the probe met a 400: the provider answered, close",
			o: outcome{Signal: sigRefused, Probe: true}, circuit: circuitClose},
		{name: "the probe met a 429: close (the cooldown rule deals with it)",
			o: outcome{Signal: sigCongestion, Probe: true, Recent: tallied(congested, 1)}, circuit: circuitClose},
		{name: "the probe timed out: the next waiter probes",
			o: outcome{Signal: sigTimeout, Probe: true}, circuit: circuitRelease},
		{name: "the probe was cancelled: the next waiter probes",
			o: outcome{Signal: sigNone, Probe: true}, circuit: circuitRelease},
		{name: "no breaker: nothing trips",
			o:    outcome{Signal: sigFault, Closed: true, Health: tallied(fault, 50)},
			rule: func(r *ruleConfig) { r.Breaker.Off = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rule
			if c.rule != nil {
				c.rule(&r)
			}
			o := c.o
			o.Now = now
			e := decide(o, r)
			if c.until == 0 {
				require.True(t, e.CooldownUntil.IsZero(), "no shared cooldown: %+v", e)
			} else {
				require.Equal(t, now.Add(c.until), e.CooldownUntil)
			}
			require.Equal(t, c.congested, e.Congested)
			require.Equal(t, c.circuit, e.Circuit)
			if c.reason != "" {
				require.Equal(t, c.reason, e.Reason)
			}
		})
	}
}

// apply writes an effect into the shared state: a new cooldown is an event
// (counted, noted), the cohort of calls sent before it only lengthens it;
// probe verdicts apply only to this process's own probe.
func TestApply(t *testing.T) {
	t.Parallel()
	b := BreakerConfig{Cooldown: 10 * time.Second}.withDefaults()
	now := t0.Add(time.Minute)
	cooling := State{CooldownUntil: now.Add(time.Second), CooldownSet: now.Add(-time.Second), Cooldowns: 1}
	mine := Breaker{State: CircuitHalfOpen, Probe: "me", ProbeUntil: now.Add(time.Minute), Trips: 1}
	theirs := Breaker{State: CircuitHalfOpen, Probe: "them", ProbeUntil: now.Add(time.Minute), Trips: 1}
	for _, c := range []struct {
		name    string
		s       State
		e       effect
		started time.Time
		want    func(t *testing.T, s State, fresh bool)
	}{
		{name: "a new cooldown", s: State{}, e: effect{CooldownUntil: now.Add(2 * time.Second), Cause: "429", Reason: "r"},
			started: now.Add(-100 * time.Millisecond), want: func(t *testing.T, s State, fresh bool) {
				require.True(t, fresh)
				require.Equal(t, now.Add(2*time.Second), s.CooldownUntil)
				require.Equal(t, "429", s.CooldownCause)
				require.Equal(t, 1, s.Cooldowns)
				require.Equal(t, now, s.CooldownSet)
				require.Equal(t, "r", s.Reason)
			}},
		{name: "the cohort lengthens it, and is no new event", s: cooling, e: effect{CooldownUntil: now.Add(3 * time.Second)},
			started: now.Add(-2 * time.Second), want: func(t *testing.T, s State, fresh bool) {
				require.False(t, fresh)
				require.Equal(t, now.Add(3*time.Second), s.CooldownUntil)
				require.Equal(t, 1, s.Cooldowns)
			}},
		{name: "the cohort never shortens it", s: cooling, e: effect{CooldownUntil: now.Add(500 * time.Millisecond)},
			started: now.Add(-2 * time.Second), want: func(t *testing.T, s State, fresh bool) {
				require.False(t, fresh)
				require.Equal(t, now.Add(time.Second), s.CooldownUntil)
			}},
		{name: "a call sent after the last cooldown ended is a new event", s: State{CooldownUntil: now.Add(-time.Second), Cooldowns: 3},
			e: effect{CooldownUntil: now.Add(time.Second)}, started: now.Add(-500 * time.Millisecond),
			want: func(t *testing.T, s State, fresh bool) {
				require.True(t, fresh)
				require.Equal(t, 4, s.Cooldowns)
				require.Equal(t, now, s.CongestedAt, "a new cooldown is a congestion event")
			}},
		{name: "an empty bucket is a congestion event, no cooldown", s: State{}, e: effect{Congested: true, Reason: "empty"},
			started: now.Add(-100 * time.Millisecond), want: func(t *testing.T, s State, fresh bool) {
				require.False(t, fresh)
				require.Equal(t, now, s.CongestedAt)
				require.Zero(t, s.CooldownUntil)
				require.Equal(t, "empty", s.Reason)
			}},
		{name: "the cohort of the last congestion event is not a new one", s: State{CongestedAt: now.Add(-50 * time.Millisecond)},
			e: effect{Congested: true}, started: now.Add(-100 * time.Millisecond),
			want: func(t *testing.T, s State, _ bool) { require.Equal(t, now.Add(-50*time.Millisecond), s.CongestedAt) }},
		{name: "trip a closed circuit", s: State{}, e: effect{Circuit: circuitTrip, LastError: "boom", Reason: "opened"},
			want: func(t *testing.T, s State, _ bool) {
				require.Equal(t, CircuitOpen, s.Breaker.State)
				require.Equal(t, now.Add(10*time.Second), s.Breaker.Until)
				require.Equal(t, "boom", s.Breaker.LastError)
				require.Equal(t, "opened", s.Reason)
			}},
		{name: "a circuit another process opened is left as it is", s: State{Breaker: Breaker{State: CircuitOpen, Until: now.Add(time.Second), Trips: 1}},
			e: effect{Circuit: circuitTrip}, want: func(t *testing.T, s State, _ bool) {
				require.Equal(t, now.Add(time.Second), s.Breaker.Until)
			}},
		{name: "reopen after my probe failed: twice as long", s: State{Breaker: mine}, e: effect{Circuit: circuitReopen},
			want: func(t *testing.T, s State, _ bool) {
				require.Equal(t, CircuitOpen, s.Breaker.State)
				require.Equal(t, 2, s.Breaker.Trips)
				require.Equal(t, now.Add(20*time.Second), s.Breaker.Until)
			}},
		{name: "close after my probe", s: State{Breaker: mine}, e: effect{Circuit: circuitClose},
			want: func(t *testing.T, s State, _ bool) {
				require.True(t, s.Breaker.Closed())
				require.Zero(t, s.Breaker.Trips)
			}},
		{name: "release my probe: open, due now", s: State{Breaker: mine}, e: effect{Circuit: circuitRelease},
			want: func(t *testing.T, s State, _ bool) {
				require.Equal(t, CircuitOpen, s.Breaker.State)
				require.Equal(t, now, s.Breaker.Until)
				require.Equal(t, 1, s.Breaker.Trips)
			}},
		{name: "another process's probe is not mine to decide", s: State{Breaker: theirs}, e: effect{Circuit: circuitClose},
			want: func(t *testing.T, s State, _ bool) { require.Equal(t, theirs, s.Breaker) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := c.s
			fresh := c.e.apply(&s, now, c.started, "me", b)
			c.want(t, s, fresh)
		})
	}
}

func TestSignalOf(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want signal
	}{
		{nil, sigOK},
		{&retry.Error{Class: retry.ClassRateLimit, Status: 429}, sigCongestion},
		{&retry.Error{Class: retry.ClassServer, Status: 529, ProviderType: "overloaded_error"}, sigOverload},
		{&retry.Error{Class: retry.ClassServer, ProviderType: "overloaded_error"}, sigOverload},
		{&retry.Error{Class: retry.ClassServer, Status: 503}, sigFault},
		{&retry.Error{Class: retry.ClassServer, Status: 503, ProviderType: "UNAVAILABLE"}, sigFault},
		{&retry.Error{Class: retry.ClassServer, Status: 503, ProviderType: "overloaded_error"}, sigFault},
		{&retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError"}, sigFault},
		{&retry.Error{Class: retry.ClassNetwork, TypeName: "APITimeoutError", Err: context.DeadlineExceeded}, sigTimeout},
		{&retry.Error{Class: retry.ClassNetwork, Err: fmt.Errorf("x: %w", context.Canceled)}, sigNone},
		{&retry.Error{Class: retry.ClassInvalidRequest, Status: 400}, sigRefused},
		{&retry.Error{Class: retry.ClassAuth, Status: 401}, sigRefused},
		{&retry.Error{Class: retry.ClassProgramming, TypeName: "EncodeError"}, sigNone},
	} {
		require.Equal(t, c.want, signalOf(c.err), "%v", c.err)
	}
}

func TestTally(t *testing.T) {
	t.Parallel()
	tl := newTally(time.Second)
	tl.add(t0, sigOK)
	tl.add(t0.Add(50*time.Millisecond), sigCongestion)
	tl.add(t0.Add(150*time.Millisecond), sigOK)
	require.Equal(t, tallied(ok, 2, congested, 1), tl.counts(t0.Add(200*time.Millisecond)))
	// A second later the first bucket has left the window.
	require.Equal(t, tallied(ok, 1), tl.counts(t0.Add(1050*time.Millisecond)))
	require.Equal(t, counts{}, tl.counts(t0.Add(time.Hour)))
	tl.add(t0.Add(time.Hour), sigFault) // a bucket reused after a long gap starts afresh
	require.Equal(t, tallied(fault, 1), tl.counts(t0.Add(time.Hour)))
	tl.reset()
	require.Equal(t, counts{}, tl.counts(t0.Add(time.Hour)))

	// A clock before 1970 counts the same (its buckets' slots are negative).
	old := time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)
	tl.add(old, sigOK)
	tl.add(old.Add(250*time.Millisecond), sigFault)
	require.Equal(t, tallied(ok, 1, fault, 1), tl.counts(old.Add(900*time.Millisecond)))
	require.Equal(t, tallied(fault, 1), tl.counts(old.Add(1050*time.Millisecond)))
}

func TestStatusWindow(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 12, 1, 3, 0, time.UTC)
	ch := Change{From: 32, To: 8, Reason: "429 from openai", At: at}
	require.Equal(t, "window 8 (was 32): 429 from openai at 12:01:03", Status{Mode: "adaptive", Limit: 8.4, Change: ch}.Window())
	require.Equal(t, "window 12; last change 32 → 8: 429 from openai at 12:01:03", Status{Mode: "adaptive", Limit: 12, Change: ch}.Window())
	require.Equal(t, "window 4", Status{Mode: "adaptive", Limit: 4}.Window())
	require.Equal(t, "limits, concurrency 3", Status{Mode: "limits", Limit: 3}.Window())
	require.Equal(t, "no window (adaptive: false)", Status{Mode: "none"}.Window())
}
