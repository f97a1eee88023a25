// Package deadletter publishes, lists, purges and replays dead letters, and
// runs the poison-pill catcher that moves records past MaxDeliver to the DLQ.
package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// Entry is one dead letter: the record as it was for the action, and its story.
type Entry struct {
	Seq        uint64       `json:"seq,omitempty"`
	Job        string       `json:"job"`
	Record     string       `json:"record"`
	Action     string       `json:"action"`
	Reason     retry.Reason `json:"reason"`
	Class      retry.Class  `json:"class,omitempty"`
	Error      string       `json:"error"` // the diagnostic of docs/design.md §1
	Attempts   int          `json:"attempts"`
	Deliveries int          `json:"deliveries"`
	Provider   string       `json:"provider,omitempty"`
	Model      string       `json:"model,omitempty"`
	FailedAt   time.Time    `json:"failed_at"`
	Replays    int          `json:"replays"`
	// Worker names the worker process that failed the record (its
	// JETPOOL_WORKER_NAME, else host-pid); "" when no worker did (the
	// dispatcher's bad lines, the max-deliveries catcher).
	Worker string `json:"worker,omitempty"`
	// Trace is the W3C traceparent of the delivery that failed the record
	// (package tracing), "" when none was traced: a replay continues it.
	Trace string `json:"trace,omitempty"`
	Data  []byte `json:"-"` // the body: a work envelope, or the raw bad line
}

// MaxHeaderError bounds the Jetpool-Error header; the full diagnostic is
// kept in the result.
const MaxHeaderError = 4000

// Msg builds the DLQ message of e.
func (e *Entry) Msg() *nats.Msg {
	m := nats.NewMsg(broker.DLQSubject(e.Job, e.Action))
	m.Data = e.Data
	h := m.Header
	h.Set(broker.HeaderMsgID, "dlq."+e.Job+"."+e.Action+"."+broker.RecordToken(e.Record)+"."+strconv.Itoa(e.Replays))
	h.Set(broker.HeaderJob, e.Job)
	h.Set(broker.HeaderRecord, e.Record)
	h.Set(broker.HeaderAction, e.Action)
	h.Set(broker.HeaderReason, string(e.Reason))
	if e.Class != "" {
		h.Set(broker.HeaderErrorClass, string(e.Class))
	}
	msg := strings.ReplaceAll(strings.ReplaceAll(e.Error, "\r", " "), "\n", " ")
	if len(msg) > MaxHeaderError {
		msg = msg[:MaxHeaderError] + "…"
	}
	h.Set(broker.HeaderError, msg)
	h.Set(broker.HeaderAttempts, strconv.Itoa(e.Attempts))
	h.Set(broker.HeaderDeliveries, strconv.Itoa(e.Deliveries))
	if e.Provider != "" {
		h.Set(broker.HeaderProvider, e.Provider)
	}
	if e.Model != "" {
		h.Set(broker.HeaderModel, e.Model)
	}
	h.Set(broker.HeaderFailedAt, e.FailedAt.UTC().Format(time.RFC3339Nano))
	h.Set(broker.HeaderReplays, strconv.Itoa(e.Replays))
	if e.Worker != "" {
		h.Set(broker.HeaderWorker, e.Worker)
	}
	if e.Trace != "" {
		h[broker.HeaderTraceparent] = []string{e.Trace}
	}
	return m
}

// Publish writes e to the DLQ and waits for the server's acknowledgement.
// Callers ack or terminate the work message only after it returns nil.
func Publish(ctx context.Context, b *broker.Broker, e *Entry) error {
	if e.FailedAt.IsZero() {
		e.FailedAt = time.Now().UTC()
	}
	if _, err := b.JS.PublishMsg(ctx, e.Msg()); err != nil {
		return fmt.Errorf("dead-letter %s/%s/%s: %w", e.Job, e.Action, e.Record, err)
	}
	return nil
}

// FromMsg reads an entry back from a DLQ message.
func FromMsg(seq uint64, subject string, h nats.Header, data []byte) *Entry {
	e := &Entry{Seq: seq, Data: data}
	e.Job = h.Get(broker.HeaderJob)
	e.Record = h.Get(broker.HeaderRecord)
	e.Action = h.Get(broker.HeaderAction)
	if e.Job == "" || e.Action == "" {
		if p := broker.SubjectParts(subject); len(p) >= 2 {
			e.Job, e.Action = p[0], p[1]
		}
	}
	e.Reason = retry.Reason(h.Get(broker.HeaderReason))
	e.Class = retry.Class(h.Get(broker.HeaderErrorClass))
	e.Error = h.Get(broker.HeaderError)
	e.Attempts, _ = strconv.Atoi(h.Get(broker.HeaderAttempts))
	e.Deliveries, _ = strconv.Atoi(h.Get(broker.HeaderDeliveries))
	e.Provider = h.Get(broker.HeaderProvider)
	e.Model = h.Get(broker.HeaderModel)
	e.FailedAt, _ = time.Parse(time.RFC3339Nano, h.Get(broker.HeaderFailedAt))
	e.Replays, _ = strconv.Atoi(h.Get(broker.HeaderReplays))
	e.Worker = h.Get(broker.HeaderWorker)
	if v := h[broker.HeaderTraceparent]; len(v) > 0 {
		e.Trace = v[0]
	}
	return e
}

// Filter selects dead letters. Empty fields match everything.
type Filter struct {
	Job    string
	Action string
	Reason string
	Class  string
	Since  time.Duration // failed within this long ago
	Limit  int           // 0: no limit
	// Record selects one record's dead letters by its id.
	Record string
	// Seq selects one dead letter by its stream sequence (dlq list's
	// SEQ): read directly, not by walking the stream.
	Seq uint64
}

func (f Filter) match(e *Entry, now time.Time) bool {
	if f.Record != "" && e.Record != f.Record {
		return false
	}
	if f.Reason != "" && string(e.Reason) != f.Reason {
		return false
	}
	if f.Class != "" && string(e.Class) != f.Class {
		return false
	}
	if f.Since > 0 && now.Sub(e.FailedAt) > f.Since {
		return false
	}
	return true
}

// Each calls fn for every dead letter matching f, oldest first, reading the
// stream with an ordered consumer (constant memory).
func Each(ctx context.Context, b *broker.Broker, f Filter, fn func(*Entry) error) error {
	now := time.Now()
	if f.Seq > 0 {
		e, err := Get(ctx, b, f.Seq)
		// Read directly, it was not selected by subject: job and action
		// are checked here.
		if errors.Is(err, ErrNotFound) || err == nil && (!f.match(e, now) ||
			f.Job != "" && e.Job != f.Job || f.Action != "" && e.Action != f.Action) {
			return nil // as a walk that matched nothing
		}
		if err != nil {
			return err
		}
		return fn(e)
	}
	n := 0
	return b.ReadStream(ctx, broker.StreamDLQ, []string{broker.DLQFilter(f.Job, f.Action)}, func(msg jetstream.Msg) (bool, error) {
		meta, err := msg.Metadata()
		if err != nil {
			return false, err
		}
		e := FromMsg(meta.Sequence.Stream, msg.Subject(), msg.Headers(), msg.Data())
		if !f.match(e, now) {
			return false, nil
		}
		if err := fn(e); err != nil {
			return false, err
		}
		n++
		return f.Limit > 0 && n >= f.Limit, nil
	})
}

// List returns the dead letters matching f.
func List(ctx context.Context, b *broker.Broker, f Filter) ([]*Entry, error) {
	var out []*Entry
	err := Each(ctx, b, f, func(e *Entry) error { out = append(out, e); return nil })
	return out, err
}

// ErrNotFound is returned by Get when no dead letter has that sequence.
var ErrNotFound = errors.New("no dead letter with that sequence")

// Get reads one dead letter by stream sequence.
func Get(ctx context.Context, b *broker.Broker, seq uint64) (*Entry, error) {
	s, err := b.Stream(ctx, broker.StreamDLQ)
	if err != nil {
		return nil, err
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %d", ErrNotFound, seq)
	}
	if err != nil {
		return nil, err
	}
	return FromMsg(m.Sequence, m.Subject, m.Header, m.Data), nil
}

// Purge deletes the dead letters matching f and returns how many. The
// records' failed results stay: a purged record still counts as failed
// (it never succeeded), it is only no longer replayable.
func Purge(ctx context.Context, b *broker.Broker, f Filter) (int, error) {
	var seqs []uint64
	if err := Each(ctx, b, f, func(e *Entry) error { seqs = append(seqs, e.Seq); return nil }); err != nil {
		return 0, err
	}
	for i, seq := range seqs {
		if err := b.DeleteMsg(ctx, broker.StreamDLQ, seq); err != nil {
			return i, err
		}
	}
	return len(seqs), nil
}

// Envelope decodes the entry's body as a work envelope.
func (e *Entry) Envelope() (*broker.Envelope, error) {
	var env broker.Envelope
	if err := json.Unmarshal(e.Data, &env); err != nil {
		return nil, err
	}
	if !env.HasRecord() {
		return nil, errors.New("not a work envelope")
	}
	return &env, nil
}
