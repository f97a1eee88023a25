package jspull_test

import (
	"runtime"
	"sync"
	"testing"
	"time"
	"weak"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/jspull"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A Msg speaks JetStream's ack protocol, and reads an ack subject as
// nats.go does (both forms).
func TestMsgAcksAndMetadata(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, jetstream.ConsumerConfig{})
	sub, err := e.nc.SubscribeSync("test.reply")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	m := jspull.NewMsg(&nats.Msg{Reply: "test.reply"}, e.nc)
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
	require.ErrorIs(t, jspull.NewMsg(&nats.Msg{}, e.nc).Ack(), jetstream.ErrMsgNoReply)

	// The same message through nats.go: the same metadata.
	batch, err := e.cons.FetchNoWait(1)
	require.NoError(t, err)
	real := <-batch.Messages()
	require.NotNil(t, real)
	want, err := real.Metadata()
	require.NoError(t, err)
	got, err := jspull.NewMsg(&nats.Msg{Reply: real.Reply()}, e.nc).Metadata()
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, jspull.NewMsg(&nats.Msg{Reply: real.Reply()}, e.nc).DoubleAck(t.Context()))

	for reply, f := range map[string]jspull.AckFields{
		"$JS.ACK.S.C.3.10.9.1700000000000000000.5":                 {Stream: "S", Consumer: "C", Delivered: 3, Sseq: 10, Cseq: 9, Ts: 1700000000000000000, Pending: 5},
		"$JS.ACK.hub.ACCHASH.S.C.3.10.9.1700000000000000000.5.xyz": {Domain: "hub", Stream: "S", Consumer: "C", Delivered: 3, Sseq: 10, Cseq: 9, Ts: 1700000000000000000, Pending: 5},
		"$JS.ACK._.ACCHASH.S.C.1.2.3.4.5":                          {Stream: "S", Consumer: "C", Delivered: 1, Sseq: 2, Cseq: 3, Ts: 4, Pending: 5},
	} {
		got, err := jspull.AckTokens(reply)
		require.NoError(t, err, reply)
		require.Equal(t, f, got, reply)
	}
	for _, bad := range []string{"", "_INBOX.x", "$JS.ACK.S.C.3.10.9", "$JS.ACK.S.C.x.10.9.1.5", "$JS.ACK.a.b.S.C.1.2"} {
		_, err := jspull.AckTokens(bad)
		require.ErrorIs(t, err, jspull.ErrNotAck, bad)
	}
}

// Status reads the server's status messages as nats.go does.
func TestStatus(t *testing.T) {
	t.Parallel()
	status := func(code, desc string) *nats.Msg {
		return &nats.Msg{Header: nats.Header{"Status": {code}, "Description": {desc}}}
	}
	for _, c := range []struct {
		m      *nats.Msg
		record bool
		err    error
	}{
		{&nats.Msg{Data: []byte("x")}, true, nil},
		{&nats.Msg{}, true, nil},
		{&nats.Msg{Header: nats.Header{"Other": {"1"}}}, true, nil},
		{status("100", "Idle Heartbeat"), false, nil},
		{status("404", "No Messages"), false, jetstream.ErrNoMessages},
		{status("408", "Request Timeout"), false, nats.ErrTimeout},
		{status("409", "Consumer Deleted"), false, jetstream.ErrConsumerDeleted},
		{status("409", "Leadership Change"), false, jetstream.ErrConsumerLeadershipChanged},
		{status("409", "Batch Completed"), false, jetstream.ErrBatchCompleted},
		{status("409", "Message Size Exceeds MaxBytes"), false, jetstream.ErrMaxBytesExceeded},
		{status("503", ""), false, nats.ErrNoResponders},
	} {
		record, err := jspull.Status(c.m)
		require.Equal(t, c.record, record, c.m.Header)
		if c.err == nil {
			require.NoError(t, err, c.m.Header)
		} else {
			require.ErrorIs(t, err, c.err, c.m.Header)
		}
	}
	record, err := jspull.Status(status("409", "Exceeded MaxWaiting"))
	require.False(t, record)
	require.ErrorContains(t, err, "409 Exceeded MaxWaiting")
}

// A record held (a call, a backoff) keeps no other record in memory:
// nats.go leaves a delivered message linked to the one queued behind it,
// so a Msg over the core message would keep every record delivered after
// it in the same burst.
func TestHeldMsgKeepsNoOtherRecord(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newEnv(t, n, jetstream.ConsumerConfig{})
	var (
		mu    sync.Mutex
		held  *jspull.Msg
		weaks []weak.Pointer[byte]
		got   int
	)
	gate := make(chan struct{})
	p, err := jspull.Subscribe(e.nc, jspull.Config{Stream: streamName, Consumer: consName,
		OnMsg: func(m *jspull.Msg) {
			mu.Lock()
			first := held == nil
			if first {
				held = m
			} else {
				weaks = append(weaks, weak.Make(&m.Data()[0]))
			}
			got++
			mu.Unlock()
			if first {
				<-gate // the others queue up behind it meanwhile
			}
			_ = m.Ack()
		},
		OnRelease: func(int, bool, error) {}})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	require.NoError(t, p.Pull(jspull.Request{Batch: n, Expires: time.Minute}))
	testenv.Eventually(t, 30*time.Second, func() bool {
		ci, err := e.cons.Info(t.Context())
		return err == nil && ci.NumAckPending == n
	}, "every record delivered while the first is held")
	close(gate)
	testenv.Eventually(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return got == n }, "every record handed on")

	runtime.GC()
	runtime.GC()
	mu.Lock()
	defer mu.Unlock()
	alive := 0
	for _, w := range weaks {
		if w.Value() != nil {
			alive++
		}
	}
	require.LessOrEqual(t, alive, 2, "records kept in memory by the one held")
	require.Equal(t, "r0", string(held.Data()))
}
