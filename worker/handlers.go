// Package worker runs a pool of bounded concurrency that pulls records from
// the jobs' durable consumers, runs each action's session (the session-level
// retry), and acks, naks with delay (the exec-level retry) or dead-letters.
package worker

import (
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// task is one fetched message for a handler; pauses is the pause watch's
// reading when it was pulled (worker/lease.go).
type task struct {
	jr     *jobRunner
	msg    jetstream.Msg
	pauses time.Duration
}

// handlerIdle is how often handlers that found no work are let go: every
// handlerIdle, as many handlers end as were idle all the while at least
// (retireIdle).
const handlerIdle = 10 * time.Second

// run hands t to an idle handler goroutine, or starts one. Handlers live on
// between records: a new goroutine per record would grow its stack through
// the session's call chain every time (runtime.newstack showed in the
// worker's profile at zero latency). Their number never exceeds the records
// being handled: the slots, the records waiting out a backoff off their
// slot (at most Config.Resting), and results being stored (at
// most one per slot).
func (p *Pool) run(t task) {
	select {
	case p.tasks <- t:
	default:
		p.handlers.Add(1)
		go p.handler(t)
	}
}

func (p *Pool) handler(t task) {
	defer p.handlers.Done()
	s := &slot{p: p}
	for {
		p.handleTask(s, t)
		var ok bool
		if t, ok = p.nextTask(); !ok {
			return
		}
	}
}

// nextTask waits for the handler's next task (false: the handler ends: the
// pool stops, or retireIdle lets it go). It waits on no timer of its own:
// a timer reset and waited on for every record, its channel added to and
// taken from the timers' heap each time, showed in a zero-latency
// worker's profile. It counts itself idle meanwhile, for retireIdle.
//
// It waits with handlerStackKeep bytes of its frame on the stack: a parked
// goroutine that uses less than a quarter of its stack has it halved by
// the next garbage collection, and the handler's next record grew it back
// (runtime.copystack, every handler at every collection). Clearing the
// frame costs less than the copying it saves (docs/performance.md).
//
//go:noinline
func (p *Pool) nextTask() (task, bool) {
	var keep [handlerStackKeep]byte
	holdStack(&keep)
	p.idle.Add(1)
	var t task
	select {
	case t = <-p.tasks:
	case <-p.quit:
	}
	p.idle.lower(p.idle.Add(-1))
	return t, t.jr != nil
}

// idleHandlers counts the handlers waiting for a task, and the fewest
// that waited at once since retireIdle last looked.
type idleHandlers struct {
	atomic.Int64
	low atomic.Int64
}

// lower notes n handlers waiting, if fewer than the least so far.
func (h *idleHandlers) lower(n int64) {
	for {
		low := h.low.Load()
		if n >= low || h.low.CompareAndSwap(low, n) {
			return
		}
	}
}

// retireIdle lets handlers go that the pool did without: every period
// (handlerIdle), as many as never fell below idle since the last look
// (each retirement is a task no record is in, taken only by a handler that
// waits).
func (p *Pool) retireIdle(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	p.idle.low.Store(p.idle.Load())
	for {
		select {
		case <-t.C:
		case <-p.quit:
			return
		}
	retire:
		for n := p.idle.low.Swap(p.idle.Load()); n > 0; n-- {
			select {
			case p.tasks <- task{}:
			default:
				break retire // none waits now
			}
		}
	}
}

// handlerStackKeep is the frame nextTask keeps while a handler waits: more
// than a quarter of the stack a record's call chain grows a handler's to
// (8 KiB stopped the copying at zero latency; 4 KiB left a third of it).
const handlerStackKeep = 8 << 10

// holdStack keeps its argument's array on its caller's stack frame.
//
//go:noinline
func holdStack(b *[handlerStackKeep]byte) { b[0] = 1 }

func (p *Pool) handleTask(s *slot, t task) {
	s.t, s.held = t, true
	handedOver := false
	defer func() {
		// The slot goes on at the latest when the record is done.
		s.release()
		if !handedOver {
			p.pulled.Done()
		}
	}()
	handedOver = t.jr.handle(p.hctx, t.msg, t.pauses, s)
}
