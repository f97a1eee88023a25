package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// A delivery's next state meets a state a twin stored since it read its
// own (worker/statemerge.go): what the delivery adds is added to what is
// stored, and nothing of either is lost.
func TestMergeState(t *testing.T) {
	att := func(n int) retry.Attempt { return retry.Attempt{N: n, Class: retry.ClassServer} }
	base := &broker.RecordState{Replays: 1, Attempts: []retry.Attempt{att(1)}, Deliveries: 1, Handled: 1}
	// This delivery (the second) made two calls and is retried.
	ours := &broker.RecordState{Replays: 1, Attempts: []retry.Attempt{att(1), att(2), att(3)}, Deliveries: 2, Handled: 2}
	// Meanwhile a twin delivered after AckWait (its worker was stopped)
	// parked four times waiting for this one's claim.
	twin := &broker.RecordState{Replays: 1, Attempts: []retry.Attempt{att(1)}, Deliveries: 1, Handled: 6, Lost: 1, TwinWaited: true}

	got := mergeState(twin, base, ours)
	require.Equal(t, []retry.Attempt{att(1), att(2), att(3)}, got.Attempts, "its calls added")
	require.Equal(t, 2, got.Deliveries, "its delivery spent")
	require.Equal(t, 6, got.Handled, "the twin's deliveries stay accounted for: none is taken for lost")
	require.Equal(t, 1, got.Lost)
	require.True(t, got.TwinWaited)

	t.Run("nothing stored, or an earlier generation", func(t *testing.T) {
		require.Same(t, ours, mergeState(nil, base, ours))
		require.Same(t, ours, mergeState(&broker.RecordState{Replays: 0, Deliveries: 3}, base, ours))
	})
	t.Run("a later generation wins", func(t *testing.T) {
		require.Nil(t, mergeState(&broker.RecordState{Replays: 2}, base, ours))
	})
	t.Run("a first delivery, with no state read", func(t *testing.T) {
		first := &broker.RecordState{Replays: 1, Attempts: []retry.Attempt{att(1)}, Deliveries: 1, Handled: 1, HandBacks: 1}
		got := mergeState(twin, nil, first)
		require.Equal(t, []retry.Attempt{att(1), att(1)}, got.Attempts, "the twin's and its own")
		require.Equal(t, 2, got.Deliveries)
		require.Equal(t, 1, got.HandBacks)
		require.Equal(t, 6, got.Handled)
	})
	t.Run("a parked answer", func(t *testing.T) {
		withAnswer := *ours
		withAnswer.Answer = &broker.Result{ID: "r1", Status: broker.StatusOK}
		require.Equal(t, "r1", mergeState(twin, base, &withAnswer).Answer.ID)
	})
	t.Run("the other fields a delivery writes", func(t *testing.T) {
		// The twin was billed for one answered call and ran alone; this
		// delivery was billed for two more and was cut short mid-round.
		twin := &broker.RecordState{Replays: 1, Deliveries: 1, Usage: broker.Usage{InputTokens: 10, OutputTokens: 5}, Cost: 0.01, Alone: 3, Blamed: 1}
		base := &broker.RecordState{Replays: 1, Deliveries: 1, Usage: broker.Usage{InputTokens: 10, OutputTokens: 5}, Cost: 0.01}
		ours := &broker.RecordState{Replays: 1, Deliveries: 1, Usage: broker.Usage{InputTokens: 30, OutputTokens: 15, CachedInputTokens: 4}, Cost: 0.03, OpenCalls: 2, OpenRound: 1, Alone: 2}
		got := mergeState(twin, base, ours)
		require.Equal(t, broker.Usage{InputTokens: 30, OutputTokens: 15, CachedInputTokens: 4}, got.Usage, "every billed call counted once")
		require.InDelta(t, 0.03, got.Cost, 1e-12)
		require.Equal(t, 2, got.OpenCalls, "the cut-short delivery is ours")
		require.Equal(t, 1, got.OpenRound)
		require.Equal(t, 3, got.Alone)
		require.Equal(t, 1, got.Blamed)

		// A delivery that left the open calls as they were keeps the twin's.
		twin.OpenCalls, twin.OpenRound = 4, 2
		got = mergeState(twin, base, base)
		require.Equal(t, 4, got.OpenCalls)
		require.Equal(t, 2, got.OpenRound)
	})
}
