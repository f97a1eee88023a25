package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/tracing"
	"github.com/jetpool/jetpool/workflow"
)

// publish publishes the records of the input to the job's first action.
// With check set, it also validates them (the input is not checked yet:
// checking.go) and ends with errCheckFirst at the first line that is not
// good.
func (d *Dispatcher) publish(ctx context.Context, wf *workflow.Workflow, job *broker.Job, opts Options, fresh bool, check *checking) (*Result, error) {
	first := wf.Actions[0]
	p := d.newPublisher(job, opts)
	res := p.res
	if check != nil {
		// A dispatch that validates as it publishes renews its lease while
		// it waits for the store's acks too: synced writes may keep it
		// waiting longer than the lease's fence.
		t := time.NewTicker(leaseRenew)
		defer t.Stop()
		p.renewTick, p.renew = t.C, check.renew
	}
	var err error
	opts.readFiles = true
	res.inputHash, err = eachRecord(wf, opts, func(rec Record, le *LineError) error {
		if check != nil {
			if le != nil {
				return errCheckFirst
			}
			check.add(rec)
			if err := check.renew(ctx); err != nil {
				return err
			}
		}
		if le != nil {
			res.BadLines++
			return d.deadLetterBad(ctx, job.ID, first.Name, rec, le)
		}
		if opts.skip(rec) {
			res.Skipped++
			return nil
		}
		m, err := dispatchMsg(ctx, job, first.Name, rec, fresh)
		if err != nil {
			return err
		}
		return p.add(ctx, m)
	})
	if err == nil {
		err = p.flush(ctx)
	}
	if err == nil {
		err = p.drain(ctx, 0)
	}
	if err != nil && check != nil {
		// What is on its way lands (or fails) before the job is deleted,
		// lest a publish stored after the purge outlive it.
		settle(p.pending)
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// dispatchMsg is the work message of rec to the job's first action.
func dispatchMsg(ctx context.Context, job *broker.Job, action string, rec Record, fresh bool) (*nats.Msg, error) {
	env := &broker.Envelope{ID: rec.ID, RawRecord: rec.Raw, Line: rec.Line, Sum: broker.RecordSum(rec.Raw), Files: rec.Files}
	m, err := broker.NewDispatchMsg(job, action, env, 0)
	if err != nil {
		return nil, err
	}
	if fresh {
		m.Header.Set(broker.HeaderFirstRun, "1")
	}
	if tracing.Enabled() {
		// The root of the record's trace (docs/tracing.md): every
		// delivery, call and replay of it goes under this span.
		sctx, span := tracing.StartDispatch(ctx, tracing.Record{Job: job.ID, Action: action, ID: rec.ID})
		tracing.Inject(sctx, m.Header)
		span.End()
	}
	return m, nil
}

// publisher is one publish's state: the publishes awaiting their acks
// and, where records go in atomic batches, the batch being filled.
type publisher struct {
	d          *Dispatcher
	job        *broker.Job
	progress   func(published int64)
	res        *Result
	maxPending int
	pending    []jetstream.PubAckFuture
	// Where every write is synced, records go in atomic batches: one fsync
	// a batch instead of one a record (broker.PublishAtomic).
	atomic bool
	batch  []*nats.Msg
	// renew renews the dispatch's lease every renewTick while drain waits
	// (nil: no lease to renew).
	renewTick <-chan time.Time
	renew     func(context.Context) error
}

func (d *Dispatcher) newPublisher(job *broker.Job, opts Options) *publisher {
	maxPending := opts.MaxPending
	if maxPending <= 0 {
		maxPending = MaxPendingDefault
	}
	return &publisher{
		d: d, job: job, progress: opts.Progress, res: &Result{},
		maxPending: maxPending, pending: make([]jetstream.PubAckFuture, 0, maxPending),
		atomic: d.B.Cfg.Batched(),
	}
}

// add publishes m, or adds it to the batch (published when full).
func (p *publisher) add(ctx context.Context, m *nats.Msg) error {
	if !p.atomic {
		return p.async(ctx, m)
	}
	if p.batch = append(p.batch, m); len(p.batch) >= broker.AtomicBatchMax {
		return p.flush(ctx)
	}
	return nil
}

// drain waits for the acks of all pending publishes but the last keep.
func (p *publisher) drain(ctx context.Context, keep int) error {
	res := p.res
	n := len(p.pending) - keep
	for i := 0; i < n; {
		f := p.pending[i]
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				res.Duplicates++
			} else {
				res.Published++
			}
			i++
		case err := <-f.Err():
			p.pending = p.pending[i+1:] // those not answered yet
			return fmt.Errorf("publish %s: %w", f.Msg().Header.Get(broker.HeaderRecord), err)
		case <-p.renewTick:
			if err := p.renew(ctx); err != nil {
				p.pending = p.pending[i:]
				return err
			}
		case <-ctx.Done():
			p.pending = p.pending[i:]
			return ctx.Err()
		}
	}
	p.pending = append(p.pending[:0], p.pending[n:]...)
	if p.progress != nil {
		p.progress(res.Published + res.Duplicates)
	}
	return nil
}

func (p *publisher) async(ctx context.Context, m *nats.Msg) error {
	f, err := p.d.B.JS.PublishMsgAsync(m)
	if err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	p.pending = append(p.pending, f)
	if len(p.pending) >= p.maxPending {
		return p.drain(ctx, p.maxPending/2)
	}
	return nil
}

// flush publishes the batch, atomically where the server can.
func (p *publisher) flush(ctx context.Context) error {
	if len(p.batch) == 0 {
		return nil
	}
	err := p.d.B.PublishAtomic(ctx, p.batch)
	switch {
	case err == nil:
		p.res.Published += int64(len(p.batch))
		if p.progress != nil {
			p.progress(p.res.Published + p.res.Duplicates)
		}
	case errors.Is(err, broker.ErrAtomicUnsupported), errors.Is(err, broker.ErrAtomicDuplicate):
		// One by one instead, each deduplicated by its Nats-Msg-Id
		// (some may be stored already: a resumed dispatch, or a server
		// that stored the batch's messages as single ones).
		if errors.Is(err, broker.ErrAtomicUnsupported) {
			p.d.Log.Warn().Str("job", p.job.ID).Msg("the server does not take atomic batches here: publishing records one by one (JETPOOL_BATCH_WRITES)")
			p.atomic = false
		}
		for _, m := range p.batch {
			broker.ClearBatch(m)
			if err := p.async(ctx, m); err != nil {
				return err
			}
		}
	default:
		return err
	}
	p.batch = p.batch[:0]
	return nil
}

// settle waits a while for the publishes still on their way to be
// answered, whatever the answer.
func settle(pending []jetstream.PubAckFuture) {
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for _, f := range pending {
		select {
		case <-f.Ok():
		case <-f.Err():
		case <-timeout.C:
			return
		}
	}
}
