package jspull

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

// Msg is a record a Puller delivered: a jetstream.Msg over the core
// message's fields, acknowledged on the connection it came in on, as
// nats.go's own are. Its acks are JetStream's protocol: "+ACK", "-NAK"
// (with {"delay": ns}), "+WPI", "+TERM" to its reply subject.
//
// It keeps the core message's fields, not the message: nats.go leaves a
// delivered message linked to the one queued behind it in its
// subscription, and that one to the next, so a record held for seconds (a
// call, a backoff) would keep every record delivered after it in the same
// burst in memory, and theirs.
type Msg struct {
	subject, reply string
	header         nats.Header
	data           []byte
	nc             *nats.Conn
}

func newMsg(m *nats.Msg, nc *nats.Conn) *Msg {
	return &Msg{subject: m.Subject, reply: m.Reply, header: m.Header, data: m.Data, nc: nc}
}

var _ jetstream.Msg = (*Msg)(nil)

func (m *Msg) Data() []byte         { return m.data }
func (m *Msg) Headers() nats.Header { return m.header }
func (m *Msg) Subject() string      { return m.subject }
func (m *Msg) Reply() string        { return m.reply }
func (m *Msg) Ack() error           { return m.send(ackAck) }
func (m *Msg) Nak() error           { return m.send(ackNak) }
func (m *Msg) InProgress() error    { return m.send(ackProgress) }
func (m *Msg) Term() error          { return m.send(ackTerm) }
func (m *Msg) TermWithReason(reason string) error {
	return m.send([]byte(string(ackTerm) + " " + reason))
}

func (m *Msg) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return m.Nak()
	}
	return m.send(fmt.Appendf(nil, `%s {"delay": %d}`, ackNak, delay.Nanoseconds()))
}

// DoubleAck acks and waits for the server's answer.
func (m *Msg) DoubleAck(ctx context.Context) error {
	if m.reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	_, err := m.nc.RequestWithContext(ctx, m.reply, ackAck)
	return err
}

func (m *Msg) send(body []byte) error {
	if m.reply == "" {
		return jetstream.ErrMsgNoReply
	}
	return m.nc.Publish(m.reply, body)
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
func (m *Msg) Metadata() (*jetstream.MsgMetadata, error) {
	t, err := AckTokens(m.reply)
	if err != nil {
		return nil, err
	}
	md := &jetstream.MsgMetadata{Domain: t.Domain, Stream: t.Stream, Consumer: t.Consumer,
		NumDelivered: t.Delivered, NumPending: t.Pending, Timestamp: time.Unix(0, int64(t.Ts))}
	md.Sequence.Stream, md.Sequence.Consumer = t.Sseq, t.Cseq
	return md, nil
}

// ErrNotAck is returned by AckTokens for a reply subject that is no
// JetStream ack subject.
var ErrNotAck = errors.New("not a JetStream message: no ack subject")

// AckFields are the tokens of a JetStream ack subject.
type AckFields struct {
	Domain, Stream, Consumer           string
	Delivered, Sseq, Cseq, Ts, Pending uint64
}

// NewMsg wraps a record that came on nc (tests, and callers that pull by
// other means).
func NewMsg(m *nats.Msg, nc *nats.Conn) *Msg { return newMsg(m, nc) }

// Fields reads the message's ack subject without allocating (Metadata
// allocates its answer).
func (m *Msg) Fields() (AckFields, error) { return AckTokens(m.reply) }

// AckTokens splits a JetStream ack subject without allocating.
func AckTokens(reply string) (f AckFields, err error) {
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return f, fmt.Errorf("%w: %q", ErrNotAck, reply)
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
		f.Domain = tok[0]
		if f.Domain == "_" {
			f.Domain = ""
		}
		v = tok[2:9]
	default:
		return f, fmt.Errorf("%w: %q", ErrNotAck, reply)
	}
	f.Stream, f.Consumer = v[0], v[1]
	nums := [...]*uint64{&f.Delivered, &f.Sseq, &f.Cseq, &f.Ts, &f.Pending}
	for i, p := range nums {
		if *p, err = strconv.ParseUint(v[2+i], 10, 64); err != nil {
			return AckFields{}, fmt.Errorf("%w: %q", ErrNotAck, reply)
		}
	}
	return f, nil
}
