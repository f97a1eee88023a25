package broker_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// An atomic batch is stored whole, with its messages' ids; one that holds
// an id already stored is refused whole (ErrAtomicDuplicate), and a stream
// that takes no batches refuses them (ErrAtomicUnsupported): in both cases
// nothing of the batch is stored.
func TestPublishAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{SyncInterval: "always"})
	require.True(t, b.Cfg.Batched(), "auto: the embedded server syncs every write")
	msgs := func(from, n int, subject string) []*nats.Msg {
		var out []*nats.Msg
		for i := from; i < from+n; i++ {
			m := nats.NewMsg(subject)
			m.Data = []byte("r" + strconv.Itoa(i))
			m.Header.Set(nats.MsgIdHdr, "atomic-"+strconv.Itoa(i))
			out = append(out, m)
		}
		return out
	}
	count := func(filter string) uint64 {
		n, err := b.Count(ctx, broker.StreamWork, filter)
		require.NoError(t, err)
		return n
	}
	require.NoError(t, b.PublishAtomic(ctx, msgs(0, 300, "jetpool.work.atomic.a")))
	require.EqualValues(t, 300, count("jetpool.work.atomic.>"))

	again := msgs(299, 10, "jetpool.work.atomic.a")
	require.ErrorIs(t, b.PublishAtomic(ctx, again), broker.ErrAtomicDuplicate)
	require.EqualValues(t, 300, count("jetpool.work.atomic.>"), "nothing of a refused batch is stored")
	broker.ClearBatch(again[0])
	require.Empty(t, again[0].Header.Get("Nats-Batch-Id"))

	_, err := b.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "NOBATCH", Subjects: []string{"nobatch.>"}})
	require.NoError(t, err)
	require.ErrorIs(t, b.PublishAtomic(ctx, msgs(0, 3, "nobatch.x")), broker.ErrAtomicUnsupported)
}

// JETPOOL_BATCH_WRITES: auto is on only for an embedded server that syncs
// every write; on and off say so; anything else is refused.
func TestBatchWritesConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  broker.Config
		want bool
	}{
		{broker.Config{SyncInterval: "always"}, true},
		{broker.Config{SyncInterval: "always", BatchWrites: "auto"}, true},
		{broker.Config{SyncInterval: "1s"}, false},
		{broker.Config{SyncInterval: "always", NATSURL: "nats://127.0.0.1:4222"}, false},
		{broker.Config{SyncInterval: "1s", NATSURL: "nats://127.0.0.1:4222", BatchWrites: "on"}, true},
		{broker.Config{SyncInterval: "always", BatchWrites: "off"}, false},
	} {
		require.Equal(t, c.want, c.cfg.Batched(), "%+v", c.cfg)
	}
	cfg := testenv.Config(t, testenv.Options{})
	cfg.BatchWrites = "sometimes"
	require.EqualError(t, cfg.Validate(), `JETPOOL_BATCH_WRITES: "sometimes" is not auto, on or off`)
}
