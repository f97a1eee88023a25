package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// decide on what a check found instead of a session, one row per verdict:
// the outcome, and what the completer then does with it — the writes, the
// ack or the nak and its delay — read from a fake store's journal.
func TestDecideCheck(t *testing.T) {
	now := time.Unix(10_000, 0)
	for _, tc := range []struct {
		name  string
		v     verdict
		n     int // JetStream's delivery count (1 when 0)
		state *broker.RecordState
		next  string // the next action
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := &journal{}
			d := testDelivery(j, tc.next)
			d.n = max(tc.n, 1)
			d.state = tc.state
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
