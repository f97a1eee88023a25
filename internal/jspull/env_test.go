package jspull_test

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/internal/jspull"
	"github.com/jetpool/jetpool/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.ParallelWaits(4)
	goleak.VerifyTestMain(m)
}

const (
	streamName = "WORK"
	consName   = "C"
)

// env is an embedded JetStream server (loopback, a port of its own, a
// temporary store) that a test can restart, with one stream, one pull
// consumer and a client connection.
type env struct {
	t    *testing.T
	dir  string
	port int
	srv  *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
}

func newEnv(t *testing.T, records int, cc jetstream.ConsumerConfig) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), port: -1}
	e.start()
	t.Cleanup(func() { e.srv.Shutdown(); e.srv.WaitForShutdown() })
	nc, err := nats.Connect(e.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	e.nc = nc
	e.js, err = jetstream.New(nc)
	require.NoError(t, err)
	ctx := t.Context()
	_, err = e.js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{"work.>"},
		Retention: jetstream.WorkQueuePolicy})
	require.NoError(t, err)
	e.publish(records)
	cc.Durable = consName
	cc.AckPolicy = jetstream.AckExplicitPolicy
	if cc.AckWait == 0 {
		cc.AckWait = time.Minute
	}
	e.cons, err = e.js.CreateOrUpdateConsumer(ctx, streamName, cc)
	require.NoError(t, err)
	return e
}

func (e *env) publish(n int) {
	e.t.Helper()
	for i := range n {
		_, err := e.js.PublishAsync(fmt.Sprintf("work.%d", i%7), fmt.Appendf(nil, "r%d", i),
			jetstream.WithStallWait(30*time.Second))
		require.NoError(e.t, err)
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		e.t.Fatal("publishes not acked after 30s")
	}
}

// start starts the server (again, on the same port and store).
func (e *env) start() {
	e.t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: e.port, JetStream: true, StoreDir: e.dir, NoSigs: true, NoLog: true}
	srv, err := server.NewServer(opts)
	require.NoError(e.t, err)
	go srv.Start()
	require.True(e.t, srv.ReadyForConnections(10*time.Second), "server not ready")
	e.srv = srv
	e.port = srv.Addr().(*net.TCPAddr).Port
}

// sink is what a Puller handed on: the records, by stream sequence, and
// the releases.
type sink struct {
	mu       sync.Mutex
	msgs     []*jspull.Msg
	seen     map[uint64]int // stream sequence → deliveries handed on
	released int
	empties  int
	errs     []error
	ack      bool
}

func newSink(ack bool) *sink { return &sink{seen: map[uint64]int{}, ack: ack} }

func (s *sink) config() jspull.Config {
	return jspull.Config{Stream: streamName, Consumer: consName, OnMsg: s.onMsg, OnRelease: s.onRelease}
}

func (s *sink) onMsg(m *jspull.Msg) {
	f, err := m.Fields()
	if err != nil {
		panic(err)
	}
	s.mu.Lock()
	s.msgs = append(s.msgs, m)
	s.seen[f.Sseq]++
	s.mu.Unlock()
	if s.ack {
		_ = m.Ack()
	}
}

func (s *sink) onRelease(n int, empty bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released += n
	if empty {
		s.empties++
	}
	s.errs = append(s.errs, err)
}

func (s *sink) count() (msgs, released int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs), s.released
}

func (s *sink) lastErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) == 0 {
		return nil
	}
	return s.errs[len(s.errs)-1]
}

// settle waits until every record asked for came or was released.
func settle(t *testing.T, p *jspull.Puller, s *sink, asked int, msg string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		got, rel := s.count()
		return got+rel == asked && p.Pending() == 0
	}, "%s: records and releases do not add up to %d", msg, asked)
}
