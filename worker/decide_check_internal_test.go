package worker

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// decide on what a check found instead of a session, one row per verdict:
// the outcome, and what the completer then does with it — the writes, the
// ack or the nak and its delay — read from a fake store's journal.
func TestDecideCheck(t *testing.T) {
	now := time.Unix(10_000, 0)
	stored := &broker.Result{ID: "r1", Status: broker.StatusOK, Output: "answer", Action: "act", Job: "job"}
	storedFailure := &broker.Result{ID: "r1", Status: broker.StatusFailed, Action: "act", Job: "job"}
	poison := &retry.Error{Class: retry.ClassProgramming, TypeName: "PoisonRecord", Message: "3 of its deliveries ended with no word from any worker"}
	earlier := &broker.RecordState{Deliveries: 1, Handled: 1, Attempts: []retry.Attempt{{N: 1, Delivery: 1, Class: retry.ClassServer, Error: "ServerError: 503"}}}
	for _, tc := range []struct {
		name  string
		v     verdict
		n     int // JetStream's delivery count (1 when 0)
		state *broker.RecordState
		next  string // the next action
		raise bool   // the action's on_exhausted is raise
		kind  outcomeKind
		// reason and retryable: a dead letter's, and its failed result's
		// when it has one.
		reason    retry.Reason
		retryable bool
		// want is the completer's journal once the record is settled.
		want  []string
		check func(t *testing.T, o outcome)
	}{
		{name: "another delivery here holds the record: let go, nothing written, no ack, no nak",
			v: verdict{kind: verdictYield}, kind: outcomeYield},
		{name: "stopping while a check waited for the store: nothing at all, redelivered after AckWait",
			v: verdict{kind: verdictAbandon}, kind: outcomeAbandon},
		{name: "a late message of a dispatch that lost the job: acked, nothing stored or forwarded",
			v: verdict{kind: verdictDropped}, next: "second", kind: outcomeSettled, want: []string{"ack"}},
		{name: "a success stored already: forwarded again (deduplicated), acked, not paid twice",
			v: verdict{kind: verdictStored, result: stored}, n: 2, next: "second", kind: outcomeSettled, want: []string{"forward", "ack"},
			check: func(t *testing.T, o outcome) { require.Same(t, stored, o.result) }},
		{name: "a failure stored already: acked, not dead-lettered again",
			v: verdict{kind: verdictStored, result: storedFailure}, n: 2, next: "second", kind: outcomeSettled, want: []string{"ack"}},
		{name: "an answer parked in the state: stored, forwarded, acked, its state cleared",
			v: verdict{kind: verdictAnswered, result: stored}, n: 2, state: &broker.RecordState{Handled: 1}, next: "second",
			kind: outcomeDone, want: []string{"result:ok", "forward", "ack", "clear state"}},
		{name: "a cancelled job: dead-lettered cancelled, its result cancelled, the job not failed again",
			v: verdict{kind: verdictJobStopped, job: &broker.Job{ID: "job", Status: broker.JobCancelled, Reason: "by alice"}}, raise: true,
			kind: outcomeDeadLetter, reason: retry.ReasonCancelled, retryable: true,
			want: []string{"dead letter cancelled", "result:cancelled", "ack"},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, "job cancelled: the job was cancelled before this record's call: by alice", o.entry.Error)
				require.Equal(t, broker.StatusCancelled, o.result.Status)
				require.Empty(t, o.raise)
			}},
		{name: "a failed job: dead-lettered job_failed with the job's reason and earlier calls, the job not failed again",
			v: verdict{kind: verdictJobStopped, job: &broker.Job{ID: "job", Status: broker.JobFailed, Reason: "action act raised"}}, raise: true,
			n: 2, state: earlier, kind: outcomeDeadLetter, reason: retry.ReasonJobFailed, retryable: true,
			want: []string{"dead letter job_failed", "result:failed", "ack", "clear state"},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, "job failed: action act raised", o.entry.Error)
				require.Equal(t, 1, o.entry.Attempts, "the earlier delivery's call")
				require.Len(t, o.result.Recovery.Failures, 1)
				require.Empty(t, o.raise)
			}},
		{name: "a job over its budget: dead-lettered budget, no call made",
			v:    verdict{kind: verdictJobStopped, job: &broker.Job{ID: "job", Status: broker.JobFailed, Reason: "max_cost reached", MaxCost: 1, Cost: 1.5}},
			kind: outcomeDeadLetter, reason: retry.ReasonBudget, retryable: false,
			want: []string{"dead letter budget", "result:failed", "ack"},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, retry.ClassBudget, o.entry.Class)
				require.Equal(t, "job failed: max_cost reached", o.entry.Error)
			}},
		{name: "a poison record: dead-lettered max_deliveries, its earlier calls in its result",
			v: verdict{kind: verdictPoisoned, final: poison}, n: 4, state: earlier,
			kind: outcomeDeadLetter, reason: retry.ReasonMaxDeliveries, retryable: false,
			want: []string{"dead letter max_deliveries", "result:failed", "ack", "clear state"},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, retry.ClassProgramming, o.entry.Class)
				require.Equal(t, 4, o.entry.Deliveries)
				require.Equal(t, "failed permanently: PoisonRecord: 3 of its deliveries ended with no word from any worker", o.entry.Error)
				require.Len(t, o.result.Recovery.Failures, 1, "the earlier call is in its story")
			}},
		{name: "a batch-mode record whose template fails: dead-lettered programming_error, no call listed",
			v: verdict{kind: verdictUnbatchable, final: &retry.Error{Class: retry.ClassProgramming, TypeName: "TemplateError", Message: "no field x"}},
			n: 2, state: earlier,
			kind: outcomeDeadLetter, reason: retry.ReasonProgrammingError, retryable: false,
			want: []string{"dead letter programming_error", "result:failed", "ack", "clear state"},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, "failed permanently: TemplateError: no field x", o.entry.Error)
				require.Empty(t, o.result.Recovery.Failures, "it made no call here")
			}},
		{name: "a batch-mode record naming an image that cannot be sent: dead-lettered bad_input",
			v: verdict{kind: verdictUnbatchable, final: &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "BadInputError",
				Message: "image a.png: no such file", Err: workflow.ErrBadInput}},
			kind: outcomeDeadLetter, reason: retry.ReasonBadInput, retryable: false,
			want: []string{"dead letter bad_input", "result:failed", "ack"}},
		{name: "a batch-mode record the budget refuses: dead-lettered budget",
			v:    verdict{kind: verdictOverBudget, final: &retry.Error{Class: retry.ClassBudget, TypeName: "BudgetError", Message: "max_cost $1.00 reached"}},
			kind: outcomeDeadLetter, reason: retry.ReasonBudget, retryable: false,
			want: []string{"dead letter budget", "result:failed", "ack"}},
		{name: "a message that cannot be read: dead-lettered programming_error, no result (it names no record to count)",
			v:    verdict{kind: verdictUnreadable, cause: errors.New("envelope: unexpected end of JSON input")},
			kind: outcomeDeadLetter, reason: retry.ReasonProgrammingError,
			want: []string{"dead letter programming_error", "ack"},
			check: func(t *testing.T, o outcome) {
				require.Nil(t, o.result)
				require.Equal(t, "failed permanently: ProgrammingError: envelope: unexpected end of JSON input", o.entry.Error)
				require.Equal(t, retry.ClassProgramming, o.entry.Class)
				require.Equal(t, now.UTC(), o.entry.FailedAt)
				require.Equal(t, []byte(`{"id":"r1","record":{}}`), o.entry.Data, "the message as it came")
			}},
		{name: "a paid answer the store can never take: dead-lettered too_large, its calls counted, the write's diagnostic alone",
			v: verdict{kind: verdictTooLarge, calls: 2, final: &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "TooLargeError",
				Message: "its answer is larger than the server takes"}},
			n: 2, state: earlier, kind: outcomeDeadLetter, reason: retry.ReasonTooLarge, retryable: false,
			want: []string{"dead letter too_large", "result:failed", "ack", "clear state"},
			check: func(t *testing.T, o outcome) {
				require.Equal(t, 2, o.entry.Attempts, "one call before, the one that answered")
				require.Equal(t, 2, o.result.Recovery.Attempts)
				require.Equal(t, "failed permanently: TooLargeError: its answer is larger than the server takes", o.entry.Error)
			}},
		{name: "a twin may be calling: parked once for 2s and up to 2s more, nothing spent",
			v: verdict{kind: verdictTwin}, n: 2, state: &broker.RecordState{Deliveries: 1, Handled: 1},
			kind: outcomePark, want: []string{"state", "nak 3s"},
			check: func(t *testing.T, o outcome) {
				require.True(t, o.state.TwinWaited, "the next delivery does not wait again")
				require.Equal(t, 1, o.state.Deliveries, "no delivery spent")
				require.Equal(t, 2, o.state.Handled)
			}},
		{name: "a suspect while another runs alone: parked for 2s and up to 2s more",
			v: verdict{kind: verdictSuspect}, n: 3, kind: outcomePark, want: []string{"state", "nak 3s"},
			check: func(t *testing.T, o outcome) {
				require.False(t, o.state.TwinWaited)
				require.Zero(t, o.state.Deliveries)
				require.Equal(t, 2, o.state.Lost, "the deliveries before it ended with no word")
			}},
		{name: "a batch-mode record with no batcher yet: back in a second",
			v: verdict{kind: verdictBatchLater}, kind: outcomePark, want: []string{"state", "nak 1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			d := testDelivery(j, tc.next)
			d.n = max(tc.n, 1)
			d.state = tc.state
			if tc.raise {
				d.action.Retry.OnExhausted = retry.Raise
			}
			o := decide(decision{d: d, check: tc.v, now: now, jitter: 0.5, worker: "w1"})
			require.Equal(t, tc.kind, o.kind)
			if o.kind == outcomeDeadLetter {
				require.Equal(t, tc.reason, o.entry.Reason)
				require.Equal(t, "w1", o.entry.Worker)
				require.NotEmpty(t, o.entry.Error, "a dead letter says why")
				if o.result != nil {
					require.Equal(t, string(tc.reason), o.result.Reason)
					require.Equal(t, tc.retryable, o.result.Error.Retryable)
					require.Equal(t, o.entry.Error, o.result.Error.Message)
				}
			}
			if tc.check != nil {
				tc.check(t, o)
			}

			c, b, ctx := running(t, &fakeStore{j: j, fail: map[string]int{}}, 0)
			b.hold(d.msg, time.Hour, time.Now())
			own := newOwner()
			if c.complete(ctx, d, o, func() {}, owned{own}) {
				select {
				case <-own.finished:
				case <-time.After(10 * time.Second):
					t.Fatalf("not settled: %v", j.list())
				}
			}
			require.Equal(t, tc.want, j.list())
		})
	}
}

// A verdict that found nothing has no outcome: its session runs.
func TestDecideCheckRunIsNoOutcome(t *testing.T) {
	d := testDelivery(&journal{}, "")
	require.Panics(t, func() { decide(decision{d: d}) })
}

// An unreadable work message is dead-lettered under what its subject and
// headers name, by the worker that met it.
func TestUnreadableMessageNamesWhatItCan(t *testing.T) {
	jr := &jobRunner{id: "job", p: &Pool{id: "w1", cfg: Config{Clock: retry.SystemClock{}}}, wf: &workflow.Workflow{}}
	in := jr.decision(jr.broken(&fakeMsg{data: []byte("not json")}))
	in.check = verdict{kind: verdictUnreadable, cause: errors.New("envelope: invalid character 'o' in literal null")}
	o := decide(in)
	require.Equal(t, outcomeDeadLetter, o.kind)
	require.Equal(t, "job", o.entry.Job)
	require.Equal(t, "act", o.entry.Action, "from the subject")
	require.Equal(t, "unknown", o.entry.Record, "no record header")
	require.Equal(t, "w1", o.entry.Worker)
	require.Equal(t, []byte("not json"), o.entry.Data)
}
