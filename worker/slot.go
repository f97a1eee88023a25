package worker

import (
	"context"
	"time"
)

// RestingMax is how many records may wait out a session backoff off their
// call slot at once: RestingPerSlot per slot (Concurrency), and at least
// RestingMin; a record that finds no room waits in its slot. How many rest
// at once is the rate of records times the fault rate times the backoff: a
// small pool of fast calls (thousands of records a second, at a few
// per cent of transient faults and the default backoff of seconds) needs
// thousands, where its slots would give it a few hundred and its slots
// would fill with records sleeping in them. Each resting record keeps its
// goroutine and its record, so the bound is what the pool's memory may
// grow by when its provider falters.
func RestingMax(concurrency int) int { return max(RestingPerSlot*concurrency, RestingMin) }

const (
	RestingPerSlot = 4
	RestingMin     = 4096
)

// slot is a handler's hold on one of the pool's call slots for the record
// it handles. It is the handler's own (one for its life): every method runs
// on the handler's goroutine, before the record is handed over.
//
// It is the session's clock too (retry.Clock): a backoff between two calls
// is waited without the slot, which goes to another record meanwhile, so
// that transient faults with seconds of backoff do not leave the pool's
// slots sleeping. The record takes a slot again when its wait ends, before
// any slot goes to a record read ahead (Pool.back): its worst case, its
// attempts and its history are the session's, unchanged.
type slot struct {
	p    *Pool
	t    task
	held bool
}

// release hands the slot on for good (the record's calls are over); it is
// a no-op when the slot is not held.
func (s *slot) release() {
	if !s.held {
		return
	}
	s.held = false
	s.p.finishedCount.Add(1)
	s.p.handOn(s.t)
}

// handOn gives t's slot to a record back from its backoff, else to the
// oldest record read ahead, else back to the pool.
func (p *Pool) handOn(t task) {
	select {
	case p.back <- struct{}{}: // the taker counts itself in (reclaim)
		p.inFlightDone(t)
		return
	default:
	}
	if next, ok := p.ahead.take(); ok {
		t.jr.inFlight.Add(-1)
		next.jr.inFlight.Add(1)
		p.run(next)
		return
	}
	p.inFlightDone(t)
	<-p.sem
}

// inFlightDone ends t's count in flight. The in-flight counts (stats,
// status, metrics) follow the slot, so they never exceed Concurrency.
func (p *Pool) inFlightDone(t task) {
	p.inFlight.Add(-1)
	t.jr.inFlight.Add(-1)
	p.cfg.Metrics.InFlight(-1)
}

// reclaim takes a slot again for the record, within its job's share of
// the slots (worker/share.go): one handed on by a record that is done
// (handOn), or a free one. It fails only when ctx is done.
func (s *slot) reclaim(ctx context.Context) error {
	p, jr := s.p, s.t.jr
	jr.returning.Add(1)
	defer jr.returning.Add(-1)
	for {
		if err := jr.awaitReturn(ctx); err != nil {
			return err
		}
		select {
		case <-p.back:
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		if room, _ := jr.shareLeft(); room != 0 {
			break
		}
		// Its job's records took the room while it waited for the slot.
		<-p.sem
	}
	s.held = true
	p.inFlight.Add(1)
	s.t.jr.inFlight.Add(1)
	p.cfg.Metrics.InFlight(1)
	return nil
}

// Now is the pool's clock's.
func (s *slot) Now() time.Time { return s.p.cfg.Clock.Now() }

// Sleep waits d off the slot when the pool has room for another resting
// record, in it otherwise. ctx done: it returns ctx.Err(), the slot no
// longer held if it had been let go.
func (s *slot) Sleep(ctx context.Context, d time.Duration) error {
	p := s.p
	if d <= 0 || !s.held {
		return p.cfg.Clock.Sleep(ctx, d)
	}
	select {
	case p.resting <- struct{}{}:
	default:
		return p.cfg.Clock.Sleep(ctx, d)
	}
	defer func() { <-p.resting }()
	s.held = false
	p.handOn(s.t)
	err := p.cfg.Clock.Sleep(ctx, d)
	if err != nil {
		return err
	}
	return s.reclaim(ctx)
}
