package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// pulledMsg is a work message the pool's own pulls delivered (pull.go): a
// jetstream.Msg over the core message, acknowledged on the connection it
// came in on, as nats.go's own are. Its acks are JetStream's protocol:
// "+ACK", "-NAK" (with {"delay": ns}), "+WPI", "+TERM" to its reply subject.
type pulledMsg struct {
	msg *nats.Msg
	nc  *nats.Conn
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func (m *pulledMsg) Data() []byte         { return m.msg.Data }
func (m *pulledMsg) Headers() nats.Header { return m.msg.Header }
func (m *pulledMsg) Subject() string      { return m.msg.Subject }
func (m *pulledMsg) Reply() string        { return m.msg.Reply }
func (m *pulledMsg) Ack() error           { return m.send(ackAck) }
func (m *pulledMsg) Nak() error           { return m.send(ackNak) }
func (m *pulledMsg) InProgress() error    { return m.send(ackProgress) }
func (m *pulledMsg) Term() error          { return m.send(ackTerm) }
func (m *pulledMsg) TermWithReason(reason string) error {
	return m.send([]byte(string(ackTerm) + " " + reason))
}

func (m *pulledMsg) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return m.Nak()
	}
	return m.send(fmt.Appendf(nil, `%s {"delay": %d}`, ackNak, delay.Nanoseconds()))
}

// DoubleAck acks and waits for the server's answer.
func (m *pulledMsg) DoubleAck(ctx context.Context) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	_, err := m.nc.RequestWithContext(ctx, m.msg.Reply, ackAck)
	return err
}

func (m *pulledMsg) send(body []byte) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	return m.nc.Publish(m.msg.Reply, body)
}

var (
	ackAck      = []byte("+ACK")
	ackNak      = []byte("-NAK")
	ackProgress = []byte("+WPI")
	ackTerm     = []byte("+TERM")
)

// Metadata reads the message's ack subject, as nats.go does:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>, or
// with <domain>.<account hash> after $JS.ACK and a token at the end.
func (m *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	t, err := ackTokens(m.msg.Reply)
	if err != nil {
		return nil, err
	}
	md := &jetstream.MsgMetadata{Domain: t.domain, Stream: t.stream, Consumer: t.consumer,
		NumDelivered: t.delivered, NumPending: t.pending, Timestamp: time.Unix(0, int64(t.ts))}
	md.Sequence.Stream, md.Sequence.Consumer = t.sseq, t.cseq
	return md, nil
}

// errNotAck is a reply subject that is no JetStream ack subject.
var errNotAck = errors.New("not a JetStream message: no ack subject")

type ackFields struct {
	domain, stream, consumer           string
	delivered, sseq, cseq, ts, pending uint64
}

// ackTokens splits a JetStream ack subject (Metadata) without allocating.
func ackTokens(reply string) (f ackFields, err error) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return f, fmt.Errorf("%w: %q", errNotAck, reply)
	}
	var tok [10]string
	n := 0
	for n < len(tok) {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			tok[n] = rest
			n++
			break
		}
		tok[n], rest = rest[:i], rest[i+1:]
		n++
	}
	// v1: 7 tokens after $JS.ACK; v2: at least 9 (a 10th, random, is
	// ignored, and so is anything after it).
	var v []string
	switch {
	case n == 7:
		v = tok[:7]
	case n >= 9:
		f.domain = tok[0]
		if f.domain == "_" {
			f.domain = ""
		}
		v = tok[2:9]
	default:
		return f, fmt.Errorf("%w: %q", errNotAck, reply)
	}
	f.stream, f.consumer = v[0], v[1]
	nums := [...]*uint64{&f.delivered, &f.sseq, &f.cseq, &f.ts, &f.pending}
	for i, p := range nums {
		if *p, err = strconv.ParseUint(v[2+i], 10, 64); err != nil {
			return ackFields{}, fmt.Errorf("%w: %q", errNotAck, reply)
		}
	}
	return f, nil
}
