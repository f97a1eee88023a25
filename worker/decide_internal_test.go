package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// decide, the rules of a record that ran, one row each (docs/design.md §9).
func TestDecide(t *testing.T) {
	now := time.Unix(10_000, 0)
	on := retry.Policy{Enabled: true}.WithDefaults() // 3 attempts × 3 deliveries
	raise := on
	raise.OnExhausted = retry.Raise
	transient := &retry.Error{Class: retry.ClassServer, Message: "503 service unavailable"}
	failedCall := func(n int) retry.Attempt {
		return retry.Attempt{N: n, Delivery: 1, Class: retry.ClassServer, Error: "ServerError: 503"}
	}
	cooling := &waitFor{provider: "p", until: now.Add(time.Minute), cause: "RateLimitError: 429 slow down", class: retry.ClassRateLimit}
	circuit := &waitFor{provider: "p", until: now.Add(time.Minute), cause: "ServerError: 503", class: retry.ClassServer, kind: ratelimit.WaitCircuit}
	longCooling := &waitFor{provider: "p", until: now.Add(9*time.Minute + 40*time.Second), cause: "RateLimitError: 429 quota", class: retry.ClassRateLimit}
	shortWait := on
	shortWait.MaxWait = 12 * time.Second
	subSecondWait := on
	subSecondWait.MaxWait = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		pol   retry.Policy
		n     int // JetStream's delivery count
		state *broker.RecordState
		end   sessionEnd
		check func(t *testing.T, o outcome)
	}{
		{name: "a success is stored, its calls counted over every delivery", pol: on, n: 3,
			state: &broker.RecordState{Deliveries: 1, Handled: 2, Attempts: []retry.Attempt{failedCall(1)}},
			end:   sessionEnd{output: "ok", calls: 1},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDone, o.kind)
				require.Equal(t, 2, o.result.Recovery.Attempts, "one failed call before, one now")
				require.Equal(t, 2, o.result.Recovery.Deliveries, "deliveries that made calls")
			}},
		{name: "a stopping worker hands the record back, attempts kept", pol: on, n: 1,
			end: sessionEnd{canceled: true, calls: 1, attempts: []retry.Attempt{failedCall(1)}, err: transient},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeHandBack, o.kind)
				require.Len(t, o.state.Attempts, 1)
				require.Equal(t, 1, o.state.Handled)
				require.Zero(t, o.state.Deliveries, "a hand-back spends no delivery")
			}},
		{name: "a paused job hands the record back, attempts and open round kept", pol: on, n: 2,
			state: &broker.RecordState{Handled: 1, HandBacks: 1, Attempts: []retry.Attempt{failedCall(1)}, OpenCalls: 1, OpenRound: 1},
			end:   sessionEnd{paused: true, calls: 1, cutRound: 1, cutFirst: true, attempts: []retry.Attempt{failedCall(2)}, err: transient},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeHandBack, o.kind)
				require.Len(t, o.state.Attempts, 2, "the attempts of both deliveries")
				require.Equal(t, 2, o.state.HandBacks)
				require.Equal(t, 2, o.state.OpenCalls, "the next delivery continues the round")
				require.Equal(t, 2, o.state.OpenRound)
				require.Zero(t, o.state.Deliveries, "a hand-back spends no delivery")
			}},
		{name: "a cancelled record is dead-lettered cancelled, retryable", pol: on, n: 1,
			end: sessionEnd{err: &retry.Error{Class: retry.ClassUnknown, TypeName: "JobCancelled", Message: "cancelled"}, reason: retry.ReasonCancelled,
				calls: 1, attempts: []retry.Attempt{failedCall(1)}},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, broker.StatusCancelled, o.result.Status)
				require.True(t, o.result.Error.Retryable, "retry --reason cancelled runs it")
				require.Empty(t, o.raise, "a cancel fails no job")
			}},
		{name: "a transient failure is redelivered: a delivery spent", pol: on, n: 1,
			end: sessionEnd{err: transient, calls: 3, attempts: []retry.Attempt{failedCall(1), failedCall(2), failedCall(3)}},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeRetry, o.kind)
				require.Equal(t, 1500*time.Millisecond, o.delay)
				require.Equal(t, 1, o.state.Deliveries)
				require.Len(t, o.state.Attempts, 3)
			}},
		{name: "the exec budget counts deliveries that made calls, not parks", pol: on, n: 9,
			state: &broker.RecordState{Deliveries: 1, Handled: 8, Waits: 6},
			end:   sessionEnd{err: transient, calls: 3},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeRetry, o.kind, "delivery 2 of 3, though JetStream has delivered it 9 times")
				require.Equal(t, 2, o.state.Deliveries)
			}},
		{name: "exhausted after the last charged delivery", pol: on, n: 3,
			state: &broker.RecordState{Deliveries: 2, Handled: 2},
			end:   sessionEnd{err: transient, calls: 3},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, retry.ReasonExhausted, o.entry.Reason)
				require.Equal(t, 3, o.entry.Deliveries)
			}},
		{name: "retry off: one call, then dead-lettered", pol: retry.Policy{}.WithDefaults(), n: 1,
			end: sessionEnd{err: &retry.Error{Class: retry.ClassRateLimit, Message: "429"}, calls: 1},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, 1, o.entry.Attempts)
				require.Empty(t, o.raise)
			}},
		{name: "a permanent error is dead-lettered at once, and raise fails the job", pol: raise, n: 1,
			end: sessionEnd{err: &retry.Error{Class: retry.ClassAuth, Message: "invalid api key"}, calls: 1},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, retry.ReasonPermanent, o.entry.Reason)
				require.NotEmpty(t, o.raise)
			}},
		{name: "the session's own reason wins (max_calls)", pol: on, n: 1,
			end: sessionEnd{err: transient, calls: 2, reason: retry.ReasonMaxCalls},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, retry.ReasonMaxCalls, o.entry.Reason)
			}},
		{name: "return_last keeps the last answer in the failed result", pol: on, n: 1,
			end: sessionEnd{err: &retry.Error{Class: retry.ClassSchemaViolation, Message: "missing title"}, calls: 1, text: `{"author":"x"}`},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, retry.ReasonSchemaViolation, o.entry.Reason)
				require.Equal(t, `{"author":"x"}`, o.result.Output)
			}},
		{name: "a call that could not go parks the record: no attempt, no delivery", pol: on, n: 1,
			end: sessionEnd{wait: cooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.GreaterOrEqual(t, o.delay, time.Minute)
				require.LessOrEqual(t, o.delay, time.Minute+6*time.Second, "a little jitter")
				require.Zero(t, o.state.Deliveries)
				require.Equal(t, 1, o.state.Waits)
				require.Empty(t, o.state.Attempts)
				require.Equal(t, 1, o.state.Handled)
			}},
		{name: "retry off waits too, and still makes its one call later", pol: retry.Policy{}.WithDefaults(), n: 4,
			state: &broker.RecordState{Handled: 3, Waits: 3, Waited: 3 * time.Minute},
			end:   sessionEnd{wait: cooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.Equal(t, 4, o.state.Waits)
			}},
		{name: "a wait longer than what is left of max_wait is waited up to max_wait", pol: on, n: 31,
			state: &broker.RecordState{Handled: 30, Waits: 30, Waited: 29*time.Minute + 30*time.Second},
			end:   sessionEnd{wait: cooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind, "the cooldown may end early (limits reset)")
				require.Equal(t, 30*time.Second, o.delay, "back when max_wait is up, not when the cooldown says")
				require.Equal(t, retry.MaxWaitDefault, o.state.Waited)
			}},
		{name: "a known cooldown past max_wait is waited, not dead-lettered at once", pol: shortWait, n: 1,
			end: sessionEnd{wait: longCooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.Equal(t, 12*time.Second, o.delay)
				require.Equal(t, 12*time.Second, o.state.Waited)
				require.Zero(t, o.state.Deliveries)
			}},
		{name: "max_wait waited and the provider still closed: dead-lettered, saying so", pol: shortWait, n: 2,
			state: &broker.RecordState{Handled: 1, Waits: 1, Waited: 12 * time.Second},
			end:   sessionEnd{wait: longCooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, retry.ReasonMaxWait, o.entry.Reason)
				require.Equal(t, "waited 12s in all for provider p, up to max_wait 12s: it was in a shared cooldown, which takes no calls for another 9m40s "+
					"(RateLimitError: 429 quota); no call was made", o.entry.Error)
				require.Zero(t, o.entry.Attempts)
			}},
		{name: "max_wait under a second reads in milliseconds", pol: subSecondWait, n: 2,
			state: &broker.RecordState{Handled: 1, Waits: 1, Waited: 300 * time.Millisecond},
			end:   sessionEnd{wait: longCooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Contains(t, o.entry.Error, "waited 300ms in all for provider p, up to max_wait 300ms")
			}},
		{name: "a wait after calls in the same delivery cuts it short: not spent, continued", pol: on, n: 1,
			end: sessionEnd{wait: circuit, calls: 1, err: transient, attempts: []retry.Attempt{failedCall(1)}, cutRound: 1, cutFirst: true},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.Zero(t, o.state.Deliveries, "waiting spends no delivery")
				require.Len(t, o.state.Attempts, 1)
				require.Equal(t, 1, o.state.OpenCalls)
				require.Equal(t, 1, o.state.OpenRound)
			}},
		{name: "… on the last delivery too: parked, not exhausted", pol: on, n: 3,
			state: &broker.RecordState{Deliveries: 2, Handled: 2},
			end:   sessionEnd{wait: circuit, calls: 1, err: transient, attempts: []retry.Attempt{failedCall(7)}, cutRound: 1, cutFirst: true},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.Equal(t, 2, o.state.Deliveries)
				require.Equal(t, 1, o.state.OpenCalls)
			}},
		{name: "a delivery that continues one cut short and is cut again adds up", pol: on, n: 5,
			state: &broker.RecordState{Deliveries: 1, Handled: 4, OpenCalls: 1, OpenRound: 1, Attempts: []retry.Attempt{failedCall(1), failedCall(2), failedCall(3), failedCall(4)}},
			end:   sessionEnd{wait: circuit, calls: 1, err: transient, attempts: []retry.Attempt{failedCall(5)}, cutRound: 1, cutFirst: true},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.Equal(t, 2, o.state.OpenCalls)
				require.Equal(t, 2, o.state.OpenRound)
			}},
		{name: "a spent delivery starts the next budget afresh", pol: on, n: 4,
			state: &broker.RecordState{Handled: 3, OpenCalls: 2, OpenRound: 2},
			end:   sessionEnd{err: transient, calls: 1, attempts: []retry.Attempt{failedCall(3)}},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeRetry, o.kind)
				require.Equal(t, 1, o.state.Deliveries)
				require.Zero(t, o.state.OpenCalls)
				require.Zero(t, o.state.OpenRound)
			}},
		{name: "a hand-back at a stop cuts the delivery short too", pol: on, n: 1,
			end: sessionEnd{canceled: true, calls: 2, err: transient, attempts: []retry.Attempt{failedCall(1), failedCall(2)}, cutRound: 2, cutFirst: true},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeHandBack, o.kind)
				require.Equal(t, 2, o.state.OpenCalls)
			}},
		{name: "a circuit open past what is left of max_wait ends the record at once", pol: shortWait, n: 2,
			state: &broker.RecordState{Handled: 1, Waits: 1, Waited: 2 * time.Second},
			end:   sessionEnd{wait: circuit},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, retry.ReasonMaxWait, o.entry.Reason)
				require.Equal(t, "waited 2s in all for provider p: its circuit breaker was open, and takes no calls for another 1m0s, past max_wait 12s "+
					"(ServerError: 503); no call was made", o.entry.Error)
			}},
		{name: "a circuit whose probe is due within max_wait is waited for", pol: shortWait, n: 2,
			state: &broker.RecordState{Handled: 1, Waits: 1, Waited: 2 * time.Second},
			end:   sessionEnd{wait: &waitFor{provider: "p", until: now.Add(5 * time.Second), cause: "ServerError: 503", class: retry.ClassServer, kind: ratelimit.WaitCircuit}},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
			}},
		{name: "past max_wait with the circuit open: the diagnostic says the circuit ended it", pol: on, n: 40,
			state: &broker.RecordState{Handled: 39, Waits: 38, Waited: 29*time.Minute + 30*time.Second, OpenCalls: 2, OpenRound: 2,
				Attempts: []retry.Attempt{failedCall(1), failedCall(2)}},
			end: sessionEnd{wait: circuit},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, retry.ReasonMaxWait, o.entry.Reason)
				require.Equal(t, retry.ClassServer, o.entry.Class)
				require.Contains(t, o.entry.Error, "circuit breaker was open")
				require.Contains(t, o.entry.Error, "2 of the 9 calls its retry budget allows made before")
				require.Equal(t, 2, o.entry.Attempts)
				require.Contains(t, o.result.Error.Message, "circuit breaker was open")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &workflow.Action{Name: "act", Provider: "p", Retry: tc.pol}
			d := &delivery{msg: &fakeMsg{data: []byte(`{}`)}, job: "job", action: a, env: &broker.Envelope{ID: "r1"}, n: tc.n, state: tc.state}
			end := tc.end
			tc.check(t, decide(decision{d: d, end: &end, now: now, jitter: 0.5}))
		})
	}
}

// A failed result's retryable says whether running the record again as it
// is may succeed: a transient or unknown failure, or a cancel, which is
// no failure of the record's.
func TestResultRetryable(t *testing.T) {
	for _, tc := range []struct {
		reason retry.Reason
		class  retry.Class
		want   bool
	}{
		{retry.ReasonExhausted, retry.ClassServer, true},
		{retry.ReasonExhausted, retry.ClassRateLimit, true},
		{retry.ReasonExhausted, retry.ClassUnknown, true},
		{retry.ReasonPermanent, retry.ClassInvalidRequest, false},
		{retry.ReasonPermanent, retry.ClassAuth, false},
		{retry.ReasonBudget, retry.ClassBudget, false},
		{retry.ReasonCancelled, retry.ClassUnknown, true},
		{retry.ReasonCancelled, retry.ClassServer, true},
	} {
		require.Equal(t, tc.want, retryable(tc.reason, tc.class), "%s, %s", tc.reason, tc.class)
	}
}
