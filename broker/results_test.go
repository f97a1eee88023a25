package broker_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A job's counts come from its two counting consumers: made on first use
// for results already stored (an older job), kept exact as results are
// stored, replaced and split by reason.
func TestJobCountsFromCounters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	j := &broker.Job{ID: "cnt", Actions: []string{"a1", "a2"}, Total: 5}
	write := func(id, action, status, reason string) {
		t.Helper()
		require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: id, Job: j.ID, Action: action, Status: status, Reason: reason}))
	}
	write("r1", "a2", broker.StatusOK, "")
	write("r2", "a1", broker.StatusOK, "") // not final: a1 is not the last action
	write("r3", "a1", broker.StatusFailed, "permanent")

	want := func(ok, failed int64, byReason map[string]int64) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool {
			c, err := b.JobCounts(ctx, j, byReason != nil)
			require.NoError(t, err)
			return c.OK == ok && c.Failed == failed && c.Done == ok+failed && (byReason == nil || maps.Equal(c.ByReason, byReason))
		}, "counts ok=%d failed=%d %v", ok, failed, byReason)
	}
	want(1, 1, nil) // counters made now, over what is stored
	for _, name := range []string{broker.CounterName(j.ID, "ok"), broker.CounterName(j.ID, "failed")} {
		_, err := b.JS.Consumer(ctx, broker.StreamResults, name)
		require.NoError(t, err, name)
	}
	write("r1", "a2", broker.StatusOK, "") // written again: still one
	write("r2", "a2", broker.StatusOK, "")
	write("r4", "a2", broker.StatusFailed, "schema_violation")
	want(2, 2, nil)
	want(2, 2, map[string]int64{"permanent": 1, "schema_violation": 1})

	// They lapse after CounterIdle (never pulled); the next count makes
	// them again, exact.
	c, err := b.JS.Consumer(ctx, broker.StreamResults, broker.CounterName(j.ID, "ok"))
	require.NoError(t, err)
	require.Equal(t, broker.CounterIdle, c.CachedInfo().Config.InactiveThreshold)
	require.NoError(t, b.JS.DeleteConsumer(ctx, broker.StreamResults, broker.CounterName(j.ID, "ok")))
	want(2, 2, nil)
}

// A lookup nobody answers (a results stream being placed, or with no member
// up) is retried for a while, so a dispatch against a cluster made seconds
// ago does not fail on it; past the wait it is an error naming the stream.
// Not parallel: it sets the package's wait.
func TestLastMsgRetriesNoResponders(t *testing.T) {
	ctx := context.Background()
	b := testenv.Broker(t)
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r1", Job: "nr", Action: "a", Status: broker.StatusOK}))
	ok, err := b.HasOK(ctx, "nr", "a", "r1") // the stream's handle is kept from here on
	require.NoError(t, err)
	require.NotNil(t, ok)

	require.NoError(t, b.JS.DeleteStream(ctx, broker.StreamResults))
	var retries []string
	restore := broker.SetNoResponders(time.Minute, func(stream string) {
		retries = append(retries, stream)
		if len(retries) == 2 {
			require.NoError(t, b.Ensure(ctx)) // the stream is back, empty
		}
	})
	t.Cleanup(restore)
	ok, err = b.HasOK(ctx, "nr", "a", "r1")
	require.NoError(t, err)
	require.Nil(t, ok, "the stream came back empty")
	require.GreaterOrEqual(t, len(retries), 2)
	require.Equal(t, broker.StreamResults, retries[0])

	require.NoError(t, b.JS.DeleteStream(ctx, broker.StreamResults))
	retries = nil
	broker.SetNoResponders(100*time.Millisecond, func(stream string) { retries = append(retries, stream) })
	_, err = b.HasOK(ctx, "nr", "a", "r1")
	require.ErrorIs(t, err, jetstream.ErrStreamNotFound)
	require.ErrorContains(t, err, "no server answered a lookup in stream "+broker.StreamResults)
	require.NotEmpty(t, retries, "retried before giving up")
}

// silentFuture is a publish whose ack never comes (sent into a connection
// whose server froze).
type silentFuture struct{ m *nats.Msg }

func (f silentFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (f silentFuture) Err() <-chan error            { return nil }
func (f silentFuture) Msg() *nats.Msg               { return f.m }

// The wait for a result's ack runs from its publish: publishes lost
// together time out together, not one a full ResultAckTimeout after the
// other.
func TestAwaitResultDeadlineFromThePublish(t *testing.T) {
	f := silentFuture{nats.NewMsg("jetpool.results.j.a.ok.r1")}
	began := time.Now()
	err := broker.AwaitResult(context.Background(), f, began.Add(-broker.ResultAckTimeout+50*time.Millisecond))
	require.ErrorContains(t, err, "no ack from the store within")
	require.Less(t, time.Since(began), broker.ResultAckTimeout/2, "the deadline was mostly spent before the wait")
	err = broker.AwaitResult(context.Background(), f, began.Add(-time.Hour))
	require.ErrorContains(t, err, "no ack from the store within", "past its deadline at once")
}
