package jspull_test

import (
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/jspull"
	"github.com/jetpool/jetpool/internal/testenv"
)

func subscribe(t *testing.T, e *env, s *sink, silence time.Duration) *jspull.Puller {
	t.Helper()
	cfg := s.config()
	cfg.Silence = silence
	p, err := jspull.Subscribe(e.nc, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// A filled request ends without a word; one the stream cannot fill ends at
// its expiry with the server's count of what it did not bring (408), which
// is released; one that brought nothing is released as empty.
func TestPullerFillsAndReleasesShortRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 10, jetstream.ConsumerConfig{})
	s := newSink(false)
	p := subscribe(t, e, s, time.Hour) // an end by silence would hang the test

	require.NoError(t, p.Pull(jspull.Request{Batch: 6, Expires: time.Minute}))
	settle(t, p, s, 6, "a request the stream fills")
	require.Zero(t, s.released)

	require.NoError(t, p.Pull(jspull.Request{Batch: 8, Expires: 200 * time.Millisecond}))
	settle(t, p, s, 14, "a request the stream fills short")
	require.Equal(t, 4, s.released, "the four records the stream did not have")
	require.ErrorIs(t, s.lastErr(), nats.ErrTimeout)
	require.Zero(t, s.empties)

	require.NoError(t, p.Pull(jspull.Request{Batch: 8, Expires: 200 * time.Millisecond}))
	settle(t, p, s, 22, "a request nothing fills (every record awaits its ack)")
	require.Equal(t, 12, s.released)
	require.Equal(t, 1, s.empties)

	for i, m := range s.msgs {
		md, err := m.Metadata()
		require.NoError(t, err)
		require.EqualValues(t, 1, md.NumDelivered)
		require.EqualValues(t, i+1, md.Sequence.Stream, "records come in stream order")
		require.Equal(t, string(m.Data()), "r"+strconv.Itoa(i))
		if i == 0 {
			require.NoError(t, m.Nak())
		} else {
			require.NoError(t, m.Ack())
		}
	}
	// The naked record, and only it, comes again.
	require.NoError(t, p.Pull(jspull.Request{Batch: 4, Expires: 300 * time.Millisecond}))
	settle(t, p, s, 26, "the naked record")
	require.Len(t, s.msgs, 11)
	md, err := s.msgs[10].Metadata()
	require.NoError(t, err)
	require.EqualValues(t, 2, md.NumDelivered)
	require.EqualValues(t, 1, md.Sequence.Stream)
	require.Zero(t, p.HandedBack())
}

// Many requests in flight at once, of random sizes, on one subscription:
// every record comes exactly once, and every record asked for either came
// or was released. Beside it nats.go's own Consume drains the same
// consumer: between them each record is delivered once.
func TestPullerOverlappingRequestsBesideNatsConsume(t *testing.T) {
	t.Parallel()
	const records = 6000
	e := newEnv(t, records, jetstream.ConsumerConfig{MaxWaiting: 1024})
	s := newSink(true)
	p := subscribe(t, e, s, jspull.SilenceDefault)

	var theirs sync.Map
	cc, err := e.cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err == nil {
			_, dup := theirs.LoadOrStore(md.Sequence.Stream, true)
			if dup {
				panic("nats.go's Consume saw a record twice")
			}
		}
		_ = m.Ack()
	}, jetstream.PullMaxMessages(20))
	require.NoError(t, err)
	defer cc.Stop()

	rng := rand.New(rand.NewPCG(1, 2))
	asked := 0
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, _ := s.count()
		n := 0
		theirs.Range(func(any, any) bool { n++; return true })
		if got+n >= records {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d + %d of %d records after 60s", got, n, records)
		// Keep up to eight requests' worth in flight.
		if p.Pending() < 8*16 {
			b := 1 + rng.IntN(32)
			require.NoError(t, p.Pull(jspull.Request{Batch: b, Expires: 250 * time.Millisecond}))
			asked += b
		} else {
			testenv.Tick()
		}
	}
	cc.Stop()
	settle(t, p, s, asked, "every request over")
	s.mu.Lock()
	defer s.mu.Unlock()
	mine := 0
	for seq, n := range s.seen {
		require.Equal(t, 1, n, "record %d handed on %d times", seq, n)
		_, both := theirs.Load(seq)
		require.False(t, both, "record %d delivered to both", seq)
		mine++
	}
	total := mine
	theirs.Range(func(any, any) bool { total++; return true })
	require.Equal(t, records, total)
	require.Positive(t, mine)
	require.Zero(t, p.HandedBack(), "no record came without a request to take it")
}

// Under max_ack_pending the server holds a request's records back: the
// request ends at its expiry, short by what it could not bring, and once
// the records are acked the next request brings more.
func TestPullerUnderMaxAckPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 30, jetstream.ConsumerConfig{MaxAckPending: 10})
	s := newSink(false)
	p := subscribe(t, e, s, time.Hour)
	require.NoError(t, p.Pull(jspull.Request{Batch: 25, Expires: 300 * time.Millisecond}))
	require.NoError(t, p.Pull(jspull.Request{Batch: 5, Expires: 300 * time.Millisecond}))
	settle(t, p, s, 30, "requests held back by max_ack_pending")
	require.Len(t, s.msgs, 10, "no more than max_ack_pending unacked")
	require.Equal(t, 20, s.released)
	for _, m := range s.msgs {
		require.NoError(t, m.DoubleAck(t.Context()))
	}
	require.NoError(t, p.Pull(jspull.Request{Batch: 10, Expires: time.Minute}))
	settle(t, p, s, 40, "acked: the next ten")
	require.Len(t, s.msgs, 20)
}

// A request waiting with heartbeats is kept alive by them past a silence
// bound shorter than its expiry, and ends at the expiry; one nobody
// answers (no responders, or swallowed) ends at once, or after its expiry
// and the silence bound.
func TestPullerHeartbeatsAndSilence(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, jetstream.ConsumerConfig{})
	s := newSink(false)
	p := subscribe(t, e, s, 50*time.Millisecond)
	began := time.Now()
	require.NoError(t, p.Pull(jspull.Request{Batch: 3, Expires: 1500 * time.Millisecond, Heartbeat: 200 * time.Millisecond}))
	settle(t, p, s, 3, "a waiting request with heartbeats")
	require.ErrorIs(t, s.lastErr(), nats.ErrTimeout, "ended at the server's word, not by silence")
	require.GreaterOrEqual(t, time.Since(began), 1500*time.Millisecond)

	// A consumer nobody serves: no responders.
	none := newSink(false)
	cfg := none.config()
	cfg.Consumer = "nobody"
	np, err := jspull.Subscribe(e.nc, cfg)
	require.NoError(t, err)
	defer np.Close()
	require.NoError(t, np.Pull(jspull.Request{Batch: 2, Expires: time.Minute}))
	settle(t, np, none, 2, "no responders")
	require.ErrorIs(t, none.lastErr(), nats.ErrNoResponders)

	// A request swallowed (a leader frozen, a server gone with it): given
	// up after its expiry and the silence bound.
	sw, err := e.nc.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + streamName + ".swallow")
	require.NoError(t, err)
	defer sw.Unsubscribe()
	lost := newSink(false)
	cfg = lost.config()
	cfg.Consumer, cfg.Silence = "swallow", 50*time.Millisecond
	lp, err := jspull.Subscribe(e.nc, cfg)
	require.NoError(t, err)
	defer lp.Close()
	began = time.Now()
	require.NoError(t, lp.Pull(jspull.Request{Batch: 4, Expires: 200 * time.Millisecond}))
	settle(t, lp, lost, 4, "a swallowed request")
	require.ErrorIs(t, lost.lastErr(), jspull.ErrSilent)
	require.GreaterOrEqual(t, time.Since(began), 250*time.Millisecond)
}

// A record that comes with no request to take it (its request was given
// up) is naked at once, not held until its AckWait (an hour) runs out.
func TestPullerHandsBackLateRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, jetstream.ConsumerConfig{AckWait: time.Hour})
	s := newSink(false)
	p := subscribe(t, e, s, time.Hour)
	// A request on the Puller's subscription that it did not make.
	inbox := p.Inbox()
	require.NoError(t, e.nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+streamName+"."+consName, inbox+"999", []byte(`{"batch":1,"expires":60000000000}`)))
	testenv.Eventually(t, 10*time.Second, func() bool { return p.HandedBack() == 1 }, "the late record handed back")
	require.NoError(t, p.Pull(jspull.Request{Batch: 2, Expires: time.Minute}))
	settle(t, p, s, 2, "both records")
	delivered := map[uint64]uint64{}
	for _, m := range s.msgs {
		md, err := m.Metadata()
		require.NoError(t, err)
		delivered[md.Sequence.Stream] = md.NumDelivered
	}
	require.Equal(t, map[uint64]uint64{1: 2, 2: 1}, delivered, "the late record came again, at once")
}

// A request refused as it comes (MaxWaiting) releases its own batch only;
// the consumer deleted voids every request waiting.
func TestPullerRefusedAndConsumerDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 0, jetstream.ConsumerConfig{MaxWaiting: 2})
	s := newSink(false)
	p := subscribe(t, e, s, time.Hour)
	for _, b := range []int{3, 4, 5} {
		require.NoError(t, p.Pull(jspull.Request{Batch: b, Expires: time.Minute}))
	}
	testenv.Eventually(t, 10*time.Second, func() bool { _, rel := s.count(); return rel == 5 }, "the third request refused")
	require.ErrorContains(t, s.lastErr(), "Exceeded MaxWaiting")
	require.Equal(t, 7, p.Pending(), "the two waiting are still counted")

	require.NoError(t, e.js.DeleteConsumer(t.Context(), streamName, consName))
	settle(t, p, s, 12, "the consumer deleted")
	require.ErrorIs(t, s.lastErr(), jetstream.ErrConsumerDeleted)
}

// The server restarts under waiting requests: they are given up (the
// reconnect, or their silence), and pulls after it go on; every record is
// acked once, none is handed on again after its ack was confirmed.
func TestPullerServerRestart(t *testing.T) {
	t.Parallel()
	const records = 400
	e := newEnv(t, records, jetstream.ConsumerConfig{AckWait: 2 * time.Second})
	var mu sync.Mutex
	acked := map[uint64]bool{}
	var dup []uint64
	s := newSink(false)
	cfg := s.config()
	cfg.Silence = 200 * time.Millisecond
	cfg.OnMsg = func(m *jspull.Msg) {
		s.onMsg(m)
		go func() {
			f, _ := m.Fields()
			if m.DoubleAck(t.Context()) != nil {
				return // lost with the server: redelivered after AckWait
			}
			mu.Lock()
			if acked[f.Sseq] {
				dup = append(dup, f.Sseq)
			}
			acked[f.Sseq] = true
			mu.Unlock()
		}()
	}
	p, err := jspull.Subscribe(e.nc, cfg)
	require.NoError(t, err)
	defer p.Close()
	done := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	restarted := false
	deadline := time.Now().Add(90 * time.Second)
	for done() < records {
		require.True(t, time.Now().Before(deadline), "%d of %d records acked after 90s", done(), records)
		if !restarted && done() >= records/4 {
			// Requests waiting as the server goes.
			require.NoError(t, p.Pull(jspull.Request{Batch: 50, Expires: 30 * time.Second, Heartbeat: 100 * time.Millisecond}))
			e.srv.Shutdown()
			e.srv.WaitForShutdown()
			e.start()
			restarted = true
			continue
		}
		if p.Pending() < 20 {
			require.NoError(t, p.Pull(jspull.Request{Batch: 10, Expires: 300 * time.Millisecond, Heartbeat: 100 * time.Millisecond}))
		} else {
			testenv.Tick()
		}
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return p.Pending() == 0 }, "requests over")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, dup, "records handed on again after their ack was confirmed")
	require.Len(t, acked, records)
}
