package worker

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// pullEnv is an embedded JetStream with one job's work consumer, for the
// pool's own pulls.
type pullEnv struct {
	b    *broker.Broker
	cons jetstream.Consumer
	job  string
}

func newPullEnv(t *testing.T, records int, ackWait time.Duration) *pullEnv {
	t.Helper()
	ctx := t.Context()
	cfg := broker.Config{DataDir: t.TempDir(), Replicas: 1, LogLevel: "warn", Concurrency: 16, SyncInterval: "1s",
		AckWait: 5 * time.Second, MaxAckPending: 20000, DedupeWindow: time.Hour}
	b, err := broker.StartEmbedded(ctx, cfg, zerolog.Nop(), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.Ensure(ctx))
	e := &pullEnv{b: b, job: "pulljob"}
	for i := range records {
		_, err := b.JS.Publish(ctx, broker.WorkSubject(e.job, "a"), []byte{byte('a' + i)})
		require.NoError(t, err)
	}
	e.cons, err = b.JS.CreateOrUpdateConsumer(ctx, broker.StreamWork, jetstream.ConsumerConfig{Durable: broker.ConsumerName(e.job),
		FilterSubject: broker.WorkFilter(e.job), AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	require.NoError(t, err)
	return e
}

// taken is what a puller handed on: each record, and whether it had a slot.
type taken struct {
	mu      sync.Mutex
	msgs    []jetstream.Msg
	slotted []bool
}

func (tk *taken) take(m jetstream.Msg, r *pullReq) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.msgs = append(tk.msgs, m)
	slot := r.slotted < r.g.slots
	if slot {
		r.slotted++
	}
	tk.slotted = append(tk.slotted, slot)
}

func (e *pullEnv) puller(t *testing.T, tk *taken) *puller {
	t.Helper()
	pl, err := subscribePulls(e.b.NC, "$JS.API.CONSUMER.MSG.NEXT."+broker.StreamWork+"."+broker.ConsumerName(e.job),
		func() time.Duration { return time.Second }, tk.take)
	require.NoError(t, err)
	t.Cleanup(pl.close)
	return pl
}

// pullUntil pulls until want records came in all (a nak is on its way to
// the server as the next pull is), each pull ending at the server's word.
func pullUntil(t *testing.T, pl *puller, want int, msg string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < want; {
		n, _, err := pl.pull(grant{slots: 8}, nil)
		require.ErrorIs(t, err, jetstream.ErrNoMessages)
		if got += n; got < want && time.Now().After(deadline) {
			t.Fatalf("%s: %d of %d records after 10s", msg, got, want)
		}
	}
}

// A pull asks for what its grant may fill and hands each record on as it
// comes: the slots first, then the read-ahead. A pull the server cannot
// fill ends at its word (404), not at the silence bound; a record acked
// through the pool's own message type is gone; one naked comes again, its
// delivery counted.
func TestPullerFillsGrantsAndEndsAtTheServersWord(t *testing.T) {
	e := newPullEnv(t, 10, 5*time.Second)
	tk := &taken{}
	pl := e.puller(t, tk)
	pl.silence = time.Hour // an end by silence would hang the test

	got, slotted, err := pl.pull(grant{slots: 4, ahead: 2}, nil)
	require.NoError(t, err, "a full pull ends when its last record comes")
	require.Equal(t, 6, got)
	require.Equal(t, 4, slotted)
	require.Equal(t, []bool{true, true, true, true, false, false}, tk.slotted)

	got, slotted, err = pl.pull(grant{slots: 8}, nil)
	require.ErrorIs(t, err, jetstream.ErrNoMessages, "fewer records than asked: the server says there are no more")
	require.Equal(t, 4, got)
	require.Equal(t, 4, slotted)

	got, _, err = pl.pull(grant{slots: 8}, nil)
	require.ErrorIs(t, err, jetstream.ErrNoMessages)
	require.Zero(t, got, "every record is pending an ack")

	for i, m := range tk.msgs {
		md, err := m.Metadata()
		require.NoError(t, err)
		require.EqualValues(t, 1, md.NumDelivered)
		require.EqualValues(t, i+1, md.Sequence.Stream)
		require.Equal(t, broker.WorkSubject(e.job, "a"), m.Subject(), "a record keeps the subject it was stored under")
		if i == 0 {
			require.NoError(t, m.Nak())
		} else {
			require.NoError(t, m.Ack())
		}
	}
	tk.msgs = nil
	// The nak is on its way to the server as the next pull is: pull until
	// it lands.
	pullUntil(t, pl, 1, "the naked record comes again")
	require.Len(t, tk.msgs, 1, "the naked record, and only it, comes again")
	md, err := tk.msgs[0].Metadata()
	require.NoError(t, err)
	require.EqualValues(t, 2, md.NumDelivered)
	require.EqualValues(t, 1, md.Sequence.Stream)
}

// A record that comes while no pull is under way (its pull ended: the
// pool gave its slots back) is handed back at once, not held until its
// AckWait (an hour here) runs out. (One that comes while a later pull is
// under way is that pull's: a record does not say which pull it answers.)
func TestPullerHandsBackLateRecords(t *testing.T) {
	e := newPullEnv(t, 2, time.Hour)
	tk := &taken{}
	pl := e.puller(t, tk)
	// A pull of the puller's that the puller no longer waits for.
	require.NoError(t, e.b.NC.PublishRequest(pl.subject, pl.prefix+"999", []byte(`{"batch":1,"no_wait":true}`)))
	require.Eventually(t, func() bool { return pl.handedBack.Load() == 1 }, 10*time.Second, 5*time.Millisecond, "the late record handed back")
	pullUntil(t, pl, 2, "both records taken")
	delivered := map[uint64]uint64{}
	for _, m := range tk.msgs {
		md, err := m.Metadata()
		require.NoError(t, err)
		delivered[md.Sequence.Stream] = md.NumDelivered
	}
	require.Equal(t, map[uint64]uint64{1: 2, 2: 1}, delivered, "the late record came again, at once")
}

// A pull the server never answers (a leader frozen, a server gone with
// the request) ends after the silence bound, as nats.go's Fetch did; one
// the pool stops ends at once; a pull of a consumer nobody serves ends at
// the server's "no responders".
func TestPullerEndsSilentAndStoppedPulls(t *testing.T) {
	e := newPullEnv(t, 0, 5*time.Second)
	tk := &taken{}
	sink, err := e.b.NC.SubscribeSync("test.swallow")
	require.NoError(t, err)
	defer sink.Unsubscribe()
	pl, err := subscribePulls(e.b.NC, "test.swallow", func() time.Duration { return time.Second }, tk.take)
	require.NoError(t, err)
	defer pl.close()
	pl.silence = 20 * time.Millisecond
	_, _, err = pl.pull(grant{slots: 2}, nil)
	require.ErrorIs(t, err, nats.ErrTimeout)

	pl.silence = time.Hour
	stop := make(chan struct{})
	close(stop)
	got, _, err := pl.pull(grant{slots: 2}, stop)
	require.NoError(t, err)
	require.Zero(t, got)

	none, err := subscribePulls(e.b.NC, "$JS.API.CONSUMER.MSG.NEXT."+broker.StreamWork+".nobody", func() time.Duration { return time.Second }, tk.take)
	require.NoError(t, err)
	defer none.close()
	none.silence = time.Hour
	_, _, err = none.pull(grant{slots: 2}, nil)
	require.ErrorIs(t, err, nats.ErrNoResponders)
}

// The pool's message type speaks JetStream's ack protocol, and reads
// an ack subject as nats.go does (both forms).
func TestPulledMsgAcksAndMetadata(t *testing.T) {
	e := newPullEnv(t, 1, 5*time.Second)
	sub, err := e.b.NC.SubscribeSync("test.reply")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	m := &pulledMsg{msg: &nats.Msg{Reply: "test.reply"}, nc: e.b.NC}
	for _, c := range []struct {
		send func() error
		body string
	}{
		{m.Ack, "+ACK"},
		{m.Nak, "-NAK"},
		{func() error { return m.NakWithDelay(1500 * time.Millisecond) }, `-NAK {"delay": 1500000000}`},
		{func() error { return m.NakWithDelay(0) }, "-NAK"},
		{m.InProgress, "+WPI"},
		{m.Term, "+TERM"},
		{func() error { return m.TermWithReason("bad") }, "+TERM bad"},
	} {
		require.NoError(t, c.send())
		got, err := sub.NextMsg(5 * time.Second)
		require.NoError(t, err)
		require.Equal(t, c.body, string(got.Data))
	}
	require.ErrorIs(t, (&pulledMsg{msg: &nats.Msg{}, nc: e.b.NC}).Ack(), jetstream.ErrMsgNoReply)

	// The same message through nats.go: the same metadata.
	batch, err := e.cons.FetchNoWait(1)
	require.NoError(t, err)
	real := <-batch.Messages()
	require.NotNil(t, real)
	want, err := real.Metadata()
	require.NoError(t, err)
	got, err := (&pulledMsg{msg: &nats.Msg{Reply: real.Reply()}, nc: e.b.NC}).Metadata()
	require.NoError(t, err)
	require.Equal(t, want, got)

	for reply, f := range map[string]ackFields{
		"$JS.ACK.S.C.3.10.9.1700000000000000000.5":                 {stream: "S", consumer: "C", delivered: 3, sseq: 10, cseq: 9, ts: 1700000000000000000, pending: 5},
		"$JS.ACK.hub.ACCHASH.S.C.3.10.9.1700000000000000000.5.xyz": {domain: "hub", stream: "S", consumer: "C", delivered: 3, sseq: 10, cseq: 9, ts: 1700000000000000000, pending: 5},
		"$JS.ACK._.ACCHASH.S.C.1.2.3.4.5":                          {stream: "S", consumer: "C", delivered: 1, sseq: 2, cseq: 3, ts: 4, pending: 5},
	} {
		got, err := ackTokens(reply)
		require.NoError(t, err, reply)
		require.Equal(t, f, got, reply)
	}
	for _, bad := range []string{"", "_INBOX.x", "$JS.ACK.S.C.3.10.9", "$JS.ACK.S.C.x.10.9.1.5", "$JS.ACK.a.b.S.C.1.2"} {
		_, err := ackTokens(bad)
		require.ErrorIs(t, err, errNotAck, bad)
	}
}
