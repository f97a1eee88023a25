package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
)

// brokerStore is the completer's store: the pool's broker.
type brokerStore struct{ p *Pool }

// pubFuture is an async publish and when it was sent: its wait ends
// ResultAckTimeout after that (broker.AwaitPublish).
type pubFuture struct {
	f    jetstream.PubAckFuture
	sent time.Time
	rc   *broker.Reconnect // the connection's next reconnection when it was sent
}

func (f pubFuture) wait(ctx context.Context) error {
	return broker.AwaitPublish(ctx, f.f, f.sent, f.rc)
}

// release gives the result's buffer back once its ack came
// (broker.ReleaseResult).
func (f pubFuture) release() { broker.ReleaseResult(f.f.Msg()) }

// batchFuture is a result in a group commit (broker.ResultBatcher).
type batchFuture struct{ f *broker.BatchedResult }

func (f batchFuture) wait(ctx context.Context) error { return f.f.Wait(ctx) }

// release keeps the buffer: a group commit's messages are its batcher's.
func (f batchFuture) release() {}

// ack acks msg on the main connection, the one its result was written on
// (pulls, heartbeats and naks go on the pulls connection, docs/decisions.md):
// acked on the pulls connection, each record's writes were split over two
// connections, each then written and read in smaller pieces, and zero-
// latency work against an external server ran slower than with acks here
// (jetpool bench --external, alternated: docs/performance.md). The ack is the one Msg.Ack sends; a
// message without a reply subject (none from a pull consumer) is acked by
// Msg.Ack.
func (s brokerStore) ack(msg jetstream.Msg) {
	if r := msg.Reply(); r != "" {
		_ = s.p.b.NC.Publish(r, ackPayload)
		return
	}
	_ = msg.Ack()
}

// ackPayload is the body of JetStream's ack, as Msg.Ack sends it.
var ackPayload = []byte("+ACK")

func (s brokerStore) publishResult(r *broker.Result) (future, error) {
	if rb := s.p.results; rb != nil {
		f, err := rb.Publish(r)
		if err == nil {
			return batchFuture{f}, nil
		}
		if !errors.Is(err, broker.ErrBatcherClosed) {
			return nil, err
		}
	}
	sent, rc := time.Now(), s.p.b.NextReconnect()
	f, err := s.p.b.PublishResult(r)
	if err != nil {
		return nil, err
	}
	return pubFuture{f, sent, rc}, nil
}

// forward publishes the record to the next action, with this action's
// output, without waiting for the store.
func (s brokerStore) forward(d *delivery, output any) (future, error) {
	env := &broker.Envelope{ID: d.env.ID, Record: d.env.Record, RawRecord: d.env.RawRecord, Line: d.env.Line,
		Outputs: make(map[string]any, len(d.env.Outputs)+1), Cost: d.recordCost(), Sum: d.env.Sum, Files: d.env.Files}
	for k, v := range d.env.Outputs {
		env.Outputs[k] = v
	}
	env.Outputs[d.action.Name] = output
	// The earlier actions' accounting goes with the record, so that the
	// last action's result adds up the whole record.
	env.Accounts = d.env.Accounts
	if d.account != nil {
		env.Accounts = append(slices.Clip(d.env.Accounts), *d.account)
	}
	m, err := broker.NewWorkMsg(d.job, d.next, env, d.replays)
	if err != nil {
		return nil, err
	}
	traceOn(d, m.Header) // worker/trace.go: the next action's deliveries under this one
	if d.revision > 1 {
		m.Header.Set(broker.HeaderRevision, strconv.Itoa(d.revision))
	}
	if d.unpaid() {
		// The one run of this action for the record: this is the one
		// publish of the next action's message.
		m.Header.Set(broker.HeaderFirstRun, "1")
	}
	if err := fits(s.p.b.NC.MaxPayload(), m, d.next); err != nil {
		return nil, err // worker/bounds.go: the completer dead-letters it as too_large
	}
	sent, rc := time.Now(), s.p.b.NextReconnect()
	f, err := s.p.b.JS.PublishMsgAsync(m)
	if err != nil {
		return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return pubFuture{f, sent, rc}, nil
}

func (s brokerStore) deadLetter(ctx context.Context, e *deadletter.Entry) error {
	return deadletter.Publish(ctx, s.p.b, e)
}

func (s brokerStore) writeResult(ctx context.Context, r *broker.Result) error {
	return s.p.b.WriteResult(ctx, r)
}

func (s brokerStore) saveState(ctx context.Context, d *delivery, st *broker.RecordState) error {
	base := d.saved
	if base == nil {
		base = d.state
	}
	rev, err := s.p.b.MergeState(ctx, d.job, d.action.Name, d.env.ID, d.stateRev, st, func(stored *broker.RecordState) *broker.RecordState {
		return mergeState(stored, base, st) // worker/statemerge.go
	})
	if err == nil {
		d.stateRev, d.saved = rev, st
	}
	return err
}

// stopReserve lets an embedded store at its limit take some of the disk it
// keeps free, for the answers parkHeld parks (broker.Broker.StopReserve).
func (s brokerStore) stopReserve() bool { return s.p.b.StopReserve() }

func (s brokerStore) clearState(ctx context.Context, d *delivery) error {
	return s.p.b.ClearState(ctx, d.job, d.action.Name, d.env.ID)
}

func (s brokerStore) unclaim(ctx context.Context, d *delivery) error {
	return s.p.b.Unclaim(ctx, d.job, d.action.Name, d.env.ID, d.claimRev())
}

func (s brokerStore) deleteResult(ctx context.Context, seq uint64) error {
	return s.p.b.DeleteMsg(ctx, broker.StreamResults, seq)
}

// failJob fails the job (on_exhausted: raise): workers stop running its
// records; what is queued is dead-lettered with reason job_failed.
func (s brokerStore) failJob(ctx context.Context, d *delivery, diag string) error {
	j, err := s.p.b.UpdateJob(ctx, d.job, func(j *broker.Job) bool {
		if j.Status == broker.JobFailed {
			return false
		}
		j.Status = broker.JobFailed
		j.Reason = fmt.Sprintf("action %s, record %s: %s", d.action.Name, d.env.ID, diag)
		return true
	})
	if err != nil {
		return err
	}
	s.p.mu.Lock()
	jr := s.p.jobs[d.job]
	s.p.mu.Unlock()
	if jr != nil {
		jr.setJob(j)
	}
	return nil
}
