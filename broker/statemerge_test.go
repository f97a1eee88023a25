package broker_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A state written on the revision read lands as it is; one whose entry
// another delivery wrote since is merged with what is stored; a merge
// that says nothing writes nothing.
func TestMergeState(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	ctx := context.Background()
	st, rev, err := b.LoadStateRev(ctx, "j", "a", "r1", 0)
	require.NoError(t, err)
	require.Nil(t, st)
	require.Zero(t, rev)
	never := func(*broker.RecordState) *broker.RecordState { t.Fatal("no merge without a conflict"); return nil }
	rev, err = b.MergeState(ctx, "j", "a", "r1", 0, &broker.RecordState{Deliveries: 1, Handled: 1}, never)
	require.NoError(t, err)

	// A twin parks meanwhile: the entry moves on.
	require.NoError(t, b.SaveState(ctx, "j", "a", "r1", &broker.RecordState{Deliveries: 1, Handled: 4, TwinWaited: true}))
	var seen *broker.RecordState
	_, err = b.MergeState(ctx, "j", "a", "r1", rev, &broker.RecordState{Deliveries: 2, Handled: 2}, func(stored *broker.RecordState) *broker.RecordState {
		seen = stored
		merged := *stored
		merged.Deliveries = 2
		return &merged
	})
	require.NoError(t, err)
	require.Equal(t, 4, seen.Handled, "the twin's state was read")
	got, rev, err := b.LoadStateRev(ctx, "j", "a", "r1", 0)
	require.NoError(t, err)
	require.Equal(t, broker.RecordState{Deliveries: 2, Handled: 4, TwinWaited: true}, *got)

	_, err = b.MergeState(ctx, "j", "a", "r1", rev-1, &broker.RecordState{Deliveries: 9}, func(*broker.RecordState) *broker.RecordState { return nil })
	require.NoError(t, err)
	got, err = b.LoadState(ctx, "j", "a", "r1", 0)
	require.NoError(t, err)
	require.Equal(t, 2, got.Deliveries, "a stale write merged to nothing is not made")
}
