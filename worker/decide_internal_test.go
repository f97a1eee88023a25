package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
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
		{name: "past max_wait: dead-lettered, saying no call was made", pol: on, n: 31,
			state: &broker.RecordState{Handled: 30, Waits: 30, Waited: 29*time.Minute + 30*time.Second},
			end:   sessionEnd{wait: cooling},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, retry.ReasonMaxWait, o.entry.Reason)
				require.Contains(t, o.entry.Error, "no call was made")
				require.Zero(t, o.entry.Attempts)
			}},
		{name: "a wait after calls in the same delivery spends that delivery", pol: on, n: 1,
			end: sessionEnd{wait: cooling, calls: 1, err: transient, attempts: []retry.Attempt{failedCall(1)}},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomePark, o.kind)
				require.Equal(t, 1, o.state.Deliveries)
				require.Len(t, o.state.Attempts, 1)
			}},
		{name: "… and on the last delivery it is exhausted", pol: on, n: 3,
			state: &broker.RecordState{Deliveries: 2, Handled: 2},
			end:   sessionEnd{wait: cooling, calls: 1, err: transient, attempts: []retry.Attempt{failedCall(7)}},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, outcomeDeadLetter, o.kind)
				require.Equal(t, retry.ReasonExhausted, o.entry.Reason)
				require.Contains(t, o.entry.Error, "stopped taking calls")
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
