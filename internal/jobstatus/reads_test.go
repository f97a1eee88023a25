package jobstatus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A read that meets the store not answering is tried again within the
// bound; an answer that is an error ends it at once; no read outlives
// ReadTimeout or the bound.
func TestReadsBoundAndRetry(t *testing.T) {
	ctx := context.Background()
	calls := 0
	err := NewReads(time.Minute).Do(ctx, func(ctx context.Context) error {
		calls++
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		require.LessOrEqual(t, time.Until(dl), ReadTimeout)
		if calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, calls, "tried again while nobody answered")

	calls = 0
	refused := errors.New("permission denied")
	err = NewReads(time.Minute).Do(ctx, func(context.Context) error { calls++; return refused })
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, calls, "an answer is not asked again")

	calls = 0
	r := NewReads(300 * time.Millisecond)
	err = r.Do(ctx, func(ctx context.Context) error {
		calls++
		<-ctx.Done() // a leader that never answers
		return ctx.Err()
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, calls, 1)
	require.ErrorIs(t, r.Do(ctx, func(context.Context) error { t.Fatal("read after the bound"); return nil }), ErrNoTime,
		"once the bound is past, nothing more is read")
}
