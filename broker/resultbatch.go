package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
)

// ResultBatcher stores results in group commits where every write is
// synced (Config.Batched): a result waits in a queue, one loop takes every
// result waiting — up to AtomicBatchMax, or resultBatchBytes — and stores
// them as one atomic batch (PublishAtomic), one write and one fsync for
// all, then tells each of its result's waiter. "Stored before ack" holds:
// a record is acked only once its result's batch is stored. While a batch
// is being stored the next one fills, so the more records finish at once,
// the fewer fsyncs each costs.
type ResultBatcher struct {
	b     *Broker
	queue chan *BatchedResult
	// off: the server or the stream takes no atomic batches; each result
	// is published alone (Publish refuses, the caller publishes it itself).
	off     atomic.Bool
	batches atomic.Int64
	mu      sync.RWMutex // Publish holds it to read closed; Close to set it
	closed  bool
	done    chan struct{}
}

// BatchedResult is a result queued in a ResultBatcher, until its batch is
// stored (Wait).
type BatchedResult struct {
	msg  *nats.Msg
	done chan struct{}
	err  error
}

// Wait waits until the result's batch is stored (nil) or failed, or ctx
// is done.
func (f *BatchedResult) Wait(ctx context.Context) error {
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resultBatchBytes bounds a batch's bytes: a result may be large (an
// answer of megabytes), and a batch is one proposal on a cluster.
const resultBatchBytes = 4 << 20

// ErrBatcherClosed is Publish after Close, or on a batcher that is off:
// the caller publishes the result alone.
var ErrBatcherClosed = errors.New("result batcher closed")

// NewResultBatcher starts a batcher that queues up to room results.
func (b *Broker) NewResultBatcher(room int) *ResultBatcher {
	rb := &ResultBatcher{b: b, queue: make(chan *BatchedResult, max(room, 1)), done: make(chan struct{})}
	go rb.loop()
	return rb
}

// Publish queues r for the next batch. ErrBatcherClosed: publish it alone.
func (rb *ResultBatcher) Publish(r *Result) (*BatchedResult, error) {
	m, err := resultMsg(r)
	if err != nil {
		return nil, err
	}
	f := &BatchedResult{msg: m, done: make(chan struct{})}
	rb.mu.RLock()
	defer rb.mu.RUnlock()
	if rb.closed || rb.off.Load() {
		return nil, ErrBatcherClosed
	}
	rb.queue <- f // the caller holds a slot for it: room is never short
	return f, nil
}

// Close stores what is queued and stops the loop; Publish refuses after.
func (rb *ResultBatcher) Close() {
	rb.mu.Lock()
	if !rb.closed {
		rb.closed = true
		close(rb.queue)
	}
	rb.mu.Unlock()
	<-rb.done
}

// Batches is how many batches were stored.
func (rb *ResultBatcher) Batches() int64 { return rb.batches.Load() }

func (rb *ResultBatcher) loop() {
	defer close(rb.done)
	var batch []*BatchedResult
	var msgs []*nats.Msg
	for first := range rb.queue {
		batch, msgs = append(batch[:0], first), append(msgs[:0], first.msg)
		size := len(first.msg.Data)
	fill:
		for len(batch) < AtomicBatchMax && size < resultBatchBytes {
			select {
			case f, ok := <-rb.queue:
				if !ok {
					break fill
				}
				batch, msgs = append(batch, f), append(msgs, f.msg)
				size += len(f.msg.Data)
			default:
				break fill
			}
		}
		rb.store(batch, msgs)
		clear(batch)
		clear(msgs)
	}
}

// store stores one batch and tells its waiters; a batch the server does
// not take as one is published a result at a time, and the batcher is off.
func (rb *ResultBatcher) store(batch []*BatchedResult, msgs []*nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), ResultAckTimeout)
	defer cancel()
	var err error
	if len(msgs) == 1 {
		_, err = rb.b.JS.PublishMsg(ctx, msgs[0])
	} else {
		err = rb.b.PublishAtomic(ctx, msgs)
	}
	if errors.Is(err, ErrAtomicUnsupported) {
		rb.off.Store(true)
		rb.b.Log.Warn().Str("stream", StreamResults).
			Msg("the results stream takes no atomic batches (nats-server 2.12 or later, allow_atomic on the stream): results are stored one by one")
		for _, f := range batch {
			ClearBatch(f.msg)
			_, f.err = rb.b.JS.PublishMsg(ctx, f.msg)
			if f.err != nil {
				f.err = fmt.Errorf("write result %s: %w", f.msg.Subject, f.err)
			}
			close(f.done)
		}
		return
	}
	if err == nil {
		rb.batches.Add(1)
	} else {
		err = fmt.Errorf("write %d results: %w", len(batch), err)
	}
	for _, f := range batch {
		f.err = err
		close(f.done)
	}
}
