package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// A delivery that continues one cut short by a wait has the calls the cut
// one left: its first round the attempts of the cut round left, the
// delivery the calls of the two together (worker/resume.go).
func TestCallsLeft(t *testing.T) {
	t.Parallel()
	on := retry.Policy{Enabled: true, MaxAttempts: 3}.WithDefaults()
	repairing := &workflow.Expect{Format: workflow.FormatJSON, RepairAttempts: 2}
	for _, tc := range []struct {
		name          string
		a             workflow.Action
		state         *broker.RecordState
		prior         int
		calls, rounds int
		left          int
		spent         bool
	}{
		{name: "a fresh delivery: the attempts", a: workflow.Action{Retry: on}, left: 3},
		{name: "cut after one call: two left in the round", a: workflow.Action{Retry: on},
			state: &broker.RecordState{OpenCalls: 1, OpenRound: 1}, prior: 1, left: 2},
		{name: "cut twice in its first round: one left", a: workflow.Action{Retry: on},
			state: &broker.RecordState{OpenCalls: 2, OpenRound: 2}, prior: 2, left: 1},
		{name: "a state that leaves nothing still lets the first round call once", a: workflow.Action{Retry: on},
			state: &broker.RecordState{OpenCalls: 3, OpenRound: 3}, prior: 3, left: 1, spent: true},
		{name: "with repairs, cut in the repair round: the first round has what that round left",
			a:     workflow.Action{Retry: on, Expect: repairing},
			state: &broker.RecordState{OpenCalls: 4, OpenRound: 1}, prior: 4, left: 2},
		{name: "… its later rounds what the delivery left", a: workflow.Action{Retry: on, Expect: repairing},
			state: &broker.RecordState{OpenCalls: 4, OpenRound: 1}, prior: 4, calls: 3, rounds: 2, left: 2},
		{name: "… and once the nine are made, no round follows", a: workflow.Action{Retry: on, Expect: repairing},
			state: &broker.RecordState{OpenCalls: 4, OpenRound: 1}, prior: 4, calls: 5, rounds: 3, left: 0, spent: true},
		{name: "max_calls cuts it further", a: workflow.Action{Retry: on, MaxCalls: 2},
			state: &broker.RecordState{OpenCalls: 1, OpenRound: 1}, prior: 1, left: 1},
		{name: "a spent delivery's state starts afresh", a: workflow.Action{Retry: on},
			state: &broker.RecordState{Deliveries: 1}, prior: 3, left: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := &conversation{a: &tc.a, d: &delivery{action: &tc.a, state: tc.state}, run: &sessionEnd{calls: tc.calls},
				prior: tc.prior, rounds: tc.rounds}
			require.Equal(t, tc.left, c.callsLeft())
			require.Equal(t, tc.spent, c.deliverySpent())
		})
	}
}

// cutShort adds a cut delivery's calls to what an earlier cut left, and
// spent clears them.
func TestCutShort(t *testing.T) {
	t.Parallel()
	st := &broker.RecordState{}
	cutShort(st, &sessionEnd{})
	require.Zero(t, st.OpenCalls, "no call, nothing spent")
	cutShort(st, &sessionEnd{calls: 1, cutRound: 1, cutFirst: true})
	require.Equal(t, [2]int{1, 1}, [2]int{st.OpenCalls, st.OpenRound})
	cutShort(st, &sessionEnd{calls: 1, cutRound: 1, cutFirst: true})
	require.Equal(t, [2]int{2, 2}, [2]int{st.OpenCalls, st.OpenRound}, "the round it continued was cut again")
	cutShort(st, &sessionEnd{calls: 4, cutRound: 1, cutFirst: false})
	require.Equal(t, [2]int{6, 1}, [2]int{st.OpenCalls, st.OpenRound}, "cut in a later round")
	spent(st)
	require.Equal(t, [3]int{1, 0, 0}, [3]int{st.Deliveries, st.OpenCalls, st.OpenRound})
}
