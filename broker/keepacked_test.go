package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// PurgeAcked purges a job's work up to its consumer's ack floor, and no
// further: a record acked above the floor (out of order) stays until the
// floor passes it, and other jobs' work is not touched. The default
// sync interval keeps the work-queue stream.
func TestPurgeAcked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{SyncInterval: "always"})
	for i := range 13 {
		job := "j"
		if i >= 10 {
			job = "k"
		}
		_, err := b.JS.Publish(ctx, broker.WorkSubject(job, "a"), []byte("x"))
		require.NoError(t, err)
	}
	c, err := b.EnsureConsumer(ctx, "j", -1)
	require.NoError(t, err)
	batch, err := c.Fetch(10, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	require.Len(t, msgs, 10)
	for _, i := range []int{0, 1, 2, 3, 4, 6} {
		require.NoError(t, msgs[i].DoubleAck(ctx))
	}
	floor, err := b.PurgeAcked(ctx, "j", 0)
	require.NoError(t, err)
	require.EqualValues(t, 5, floor)
	count := func(filter string) uint64 {
		n, err := b.Count(ctx, broker.StreamWork, filter)
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, 5, count(broker.WorkFilter("j")), "6-10 stay: 7 is acked above the floor")
	require.EqualValues(t, 3, count(broker.WorkFilter("k")), "another job's work is not touched")
	again, err := b.PurgeAcked(ctx, "j", floor)
	require.NoError(t, err)
	require.Equal(t, floor, again, "nothing new acked: nothing purged")
	none, err := b.PurgeAcked(ctx, "nojob", 0)
	require.NoError(t, err, "a job without a consumer has nothing to purge")
	require.Zero(t, none)

	// A process that would make a work-queue stream (it does not batch:
	// another server's, say) works with the stream as it was made.
	cfg := testenv.Config(t, testenv.Options{})
	cfg.NATSURL = b.NC.ConnectedUrl()
	other, err := broker.Connect(ctx, cfg, testenv.Logger(t))
	require.NoError(t, err)
	defer other.Close()
	require.False(t, other.Cfg.Batched())
	require.NoError(t, other.Ensure(ctx))
	keeps, err := other.WorkKeepsAcked(ctx)
	require.NoError(t, err)
	require.True(t, keeps, "a stream keeps the retention it was made with")

	plain := testenv.Broker(t)
	keeps, err = plain.WorkKeepsAcked(ctx)
	require.NoError(t, err)
	require.False(t, keeps, "a store synced on an interval keeps the work-queue stream")
}
