package broker_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A job's counts come from its three counting consumers: made on first use
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

	cancelled := int64(0)
	want := func(ok, failed int64, byReason map[string]int64) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() bool {
			c, err := b.JobCounts(ctx, j, byReason != nil)
			require.NoError(t, err)
			return c.OK == ok && c.Failed == failed && c.Cancelled == cancelled && c.Done == ok+failed+cancelled &&
				(byReason == nil || maps.Equal(c.ByReason, byReason))
		}, "counts ok=%d failed=%d cancelled=%d %v", ok, failed, cancelled, byReason)
	}
	want(1, 1, nil) // counters made now, over what is stored
	for _, name := range []string{broker.CounterName(j.ID, "ok"), broker.CounterName(j.ID, "failed"), broker.CounterName(j.ID, "cancelled")} {
		_, err := b.JS.Consumer(ctx, broker.StreamResults, name)
		require.NoError(t, err, name)
	}
	write("r1", "a2", broker.StatusOK, "") // written again: still one
	write("r2", "a2", broker.StatusOK, "")
	write("r4", "a2", broker.StatusFailed, "schema_violation")
	want(2, 2, nil)
	want(2, 2, map[string]int64{"permanent": 1, "schema_violation": 1})
	// A cancelled record is counted apart: it did not fail.
	write("r5", "a1", broker.StatusCancelled, "cancelled")
	cancelled = 1
	want(2, 2, nil)
	want(2, 2, map[string]int64{"permanent": 1, "schema_violation": 1, "cancelled": 1})

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
func TestAwaitPublishDeadlineFromThePublish(t *testing.T) {
	f := silentFuture{nats.NewMsg("jetpool.results.j.a.ok.r1")}
	began := time.Now()
	err := broker.AwaitPublish(context.Background(), f, began.Add(-broker.ResultAckTimeout+50*time.Millisecond), nil)
	require.ErrorContains(t, err, "no ack from the store within")
	require.Less(t, time.Since(began), broker.ResultAckTimeout/2, "the deadline was mostly spent before the wait")
	err = broker.AwaitPublish(context.Background(), f, began.Add(-time.Hour), nil)
	require.ErrorContains(t, err, "no ack from the store within", "past its deadline at once")
}

// ackingFuture acks when ack is closed.
type ackingFuture struct {
	m   *nats.Msg
	ack chan *jetstream.PubAck
}

func (f ackingFuture) Ok() <-chan *jetstream.PubAck { return f.ack }
func (f ackingFuture) Err() <-chan error            { return nil }
func (f ackingFuture) Msg() *nats.Msg               { return f.m }

// A publish sent before the connection reconnected is most likely lost
// with the socket: its wait ends ReconnectGrace after the reconnection, so
// the write is made again seconds sooner; one acked within the grace (the
// library resent it) is stored.
func TestAwaitPublishEndsSoonAfterAReconnect(t *testing.T) {
	m := nats.NewMsg("jetpool.results.j.a.ok.r1")
	rc, fire := broker.NewReconnect()
	began := time.Now()
	time.AfterFunc(50*time.Millisecond, fire)
	err := broker.AwaitPublish(context.Background(), silentFuture{m}, began, rc)
	require.ErrorContains(t, err, "of reconnecting: the write is made again")
	took := time.Since(began)
	require.GreaterOrEqual(t, took, broker.ReconnectGrace, "the grace is waited")
	require.Less(t, took, broker.ResultAckTimeout, "not the whole ack timeout")

	rc, fire = broker.NewReconnect()
	f := ackingFuture{m, make(chan *jetstream.PubAck, 1)}
	fire()
	time.AfterFunc(100*time.Millisecond, func() { f.ack <- &jetstream.PubAck{Stream: broker.StreamResults, Sequence: 1} })
	require.NoError(t, broker.AwaitPublish(context.Background(), f, time.Now(), rc), "acked within the grace")

	// No reconnection: the ack timeout from the publish, as before.
	rc, _ = broker.NewReconnect()
	err = broker.AwaitPublish(context.Background(), silentFuture{m}, time.Now().Add(-broker.ResultAckTimeout+50*time.Millisecond), rc)
	require.ErrorContains(t, err, "no ack from the store within")
}

// Of two deliveries that claim a record's call, one wins, whatever their
// numbers; a claim lapses once left alone for its ttl, and the delivery
// that takes it over learns the calls made under it; a claim of an
// earlier replay generation does not stand; a claim let go stands against
// nobody.
func TestClaim(t *testing.T) {
	b := testenv.Broker(t)
	ctx := context.Background()
	bid := func(record string, replays int, holder string, n int, ttl time.Duration) (broker.Claimed, bool) {
		t.Helper()
		c, ok, err := b.Claim(ctx, broker.Bid{Job: "j", Action: "a", Record: record, Replays: replays, Holder: holder, Delivery: n, Calls: 1, TTL: ttl})
		require.NoError(t, err)
		return c, ok
	}
	won := func(record string, replays int, holder string, n int, ttl time.Duration) bool {
		t.Helper()
		_, ok := bid(record, replays, holder, n, ttl)
		return ok
	}
	first, ok := bid("r1", 0, "w1/1", 1, time.Minute)
	require.True(t, ok, "the first claim wins")
	require.False(t, won("r1", 0, "w2/7", 1, time.Minute), "a twin's claim loses (the same delivery, as new)")
	require.False(t, won("r1", 0, "w2/7", 2, time.Minute), "so does a later delivery's, while the claim stands (its holder may be stopped, holding its answer)")
	// The holder makes two more calls, each recorded first.
	rev, retaken, err := b.RenewClaim(ctx, broker.Bid{Job: "j", Action: "a", Record: "r1", Holder: "w1/1", Delivery: 1, Calls: 3, TTL: time.Minute}, first.Rev)
	require.NoError(t, err)
	require.False(t, retaken)
	require.Greater(t, rev, first.Rev)
	took, ok := bid("r1", 0, "w2/8", 2, time.Nanosecond)
	require.True(t, ok, "a lapsed claim is taken over")
	require.Equal(t, 3, took.LapsedCalls, "with the calls its holder recorded")
	_, _, err = b.RenewClaim(ctx, broker.Bid{Job: "j", Action: "a", Record: "r1", Holder: "w1/1", Delivery: 1, Calls: 4, TTL: time.Minute}, rev)
	require.ErrorIs(t, err, broker.ErrClaimTaken, "the silent holder, back, finds its claim taken")
	require.True(t, won("r1", 1, "w3/2", 1, time.Minute), "a claim of an earlier replay does not stand")
	require.True(t, won("r2", 0, "w2/7", 1, time.Minute), "another record's claim is its own")

	c, ok := bid("r3", 0, "w1/1", 1, time.Minute)
	require.True(t, ok)
	require.NoError(t, b.Unclaim(ctx, "j", "a", "r3", c.Rev))
	again, ok := bid("r3", 0, "w2/1", 2, time.Minute)
	require.True(t, ok, "a claim let go stands against nobody")
	require.Zero(t, again.LapsedCalls, "and hands on no calls: its delivery recorded them")
	require.NoError(t, b.Unclaim(ctx, "j", "a", "r3", c.Rev), "letting go of a claim taken over since leaves it alone")
	require.False(t, won("r3", 0, "w3/1", 2, time.Minute), "the claim taken over stands")

	// A claim that vanished under its holder (aged out while it was
	// stopped) is taken again on renewal, and said so.
	d, ok := bid("r4", 0, "w1/1", 1, time.Minute)
	require.True(t, ok)
	require.NoError(t, b.Unclaim(ctx, "j", "a", "r4", d.Rev))
	_, retaken, err = b.RenewClaim(ctx, broker.Bid{Job: "j", Action: "a", Record: "r4", Holder: "w1/1", Delivery: 1, Calls: 2, TTL: time.Minute}, d.Rev)
	require.NoError(t, err)
	require.True(t, retaken)
}

// EachResult hands a job's results on in stream order (they are decoded
// on every core beside the read), and a stored result that does not decode
// ends the read with an error naming its subject, after every result before
// it.
func TestEachResultInStreamOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	const n = 3000
	for i := range n {
		require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: fmt.Sprintf("r%d", i), Job: "ord", Action: "a", Status: broker.StatusOK, Output: i}))
	}
	var got []string
	require.NoError(t, b.EachResult(ctx, "ord", func(r *broker.Result) error {
		got = append(got, r.ID)
		return nil
	}))
	require.Len(t, got, n)
	for i, id := range got {
		require.Equal(t, fmt.Sprintf("r%d", i), id)
	}

	bad := broker.ResultSubject("ord", "a", broker.OutcomeOK, "torn")
	_, err := b.JS.Publish(ctx, bad, []byte(`{"id":"torn","status":`))
	require.NoError(t, err)
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "after", Job: "ord", Action: "a", Status: broker.StatusOK}))
	got = nil
	err = b.EachResult(ctx, "ord", func(r *broker.Result) error {
		got = append(got, r.ID)
		return nil
	})
	require.ErrorContains(t, err, "read the results of job ord: result "+bad+": unexpected end of JSON input")
	require.Len(t, got, n, "every result before the torn one, none after it")
}
