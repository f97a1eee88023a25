// Package pause notices the times the process did not run: stopped
// (SIGSTOP, Ctrl-Z, docker pause), its machine suspended or its VM
// migrated. Nothing in the process sees such a pause happen; after it,
// every timer that fell due meanwhile fires at once, and the world moved
// on (a claim lapsed, a message was delivered again elsewhere). A watcher
// ticks and measures each gap between its ticks, by the monotonic clock and
// by the wall clock (a suspended machine's monotonic clock may stand still
// while the wall clock does not); a gap far past its tick is a pause.
//
// Two uses: a caller that must not act on a stale right (a call's claim)
// checks whether a pause came since it last confirmed it (Lost), and a
// timeout that must not cut off what arrived while the process was stopped
// is made with WithTimeoutCause.
package pause

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Watch.
const (
	// TickDefault is how often a watch looks at the clocks.
	TickDefault = 100 * time.Millisecond
	// SlackDefault is how late a tick may be before the gap counts as a
	// pause: a process on a loaded machine is not scheduled for a while
	// at times, and a short such wait is no pause of interest.
	SlackDefault = time.Second
	// ThawGrace is the most a timeout that fell due during a pause waits
	// on (WithTimeoutCause).
	ThawGrace = 2 * time.Second
)

// Watch measures the pauses of the process. The zero value is not usable:
// New, or Process.
type Watch struct {
	tick, slack time.Duration
	now         func() time.Time

	mu   sync.Mutex
	last time.Time // the last tick seen, with its monotonic reading
	lost time.Duration
	// holds is how many users keep the watch ticking (Hold); a watch
	// nobody holds looks at nothing, and sees no pause.
	holds  int
	stop   chan struct{} // closed when the last hold ends
	driven bool          // ticked by the caller (New): always looking
	count  atomic.Int64
}

// New makes a watch that the caller drives with Tick, looking at the
// clocks every tick (TickDefault when 0) and counting a gap more than
// slack (SlackDefault when 0) past its tick as a pause; now is the clock
// (time.Now when nil).
func New(tick, slack time.Duration, now func() time.Time) *Watch {
	if tick <= 0 {
		tick = TickDefault
	}
	if slack <= 0 {
		slack = SlackDefault
	}
	if now == nil {
		now = time.Now
	}
	return &Watch{tick: tick, slack: slack, now: now, last: now(), driven: true}
}

var process = &Watch{tick: TickDefault, slack: SlackDefault, now: time.Now}

// Process is the watch of this process: it ticks (one goroutine, one
// timer) while anything holds it (Hold).
func Process() *Watch { return process }

// Hold keeps the watch looking until release is called: pauses are seen
// only while it is held. Holds nest.
func (w *Watch) Hold() (release func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holds++
	if w.holds == 1 && !w.driven {
		w.last = w.now()
		w.stop = make(chan struct{})
		go w.run(w.stop)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.holds--
			if w.holds == 0 && !w.driven {
				close(w.stop)
			}
		})
	}
}

func (w *Watch) run(stop chan struct{}) {
	t := time.NewTicker(w.tick)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.Tick()
		case <-stop:
			return
		}
	}
}

// Tick looks at the clocks: a gap since the last tick beyond the tick and
// its slack is added to the time lost.
func (w *Watch) Tick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	if gap := w.gap(now); gap > 0 {
		w.lost += gap
		w.count.Add(1)
	}
	w.last = now
}

// gap is how much of the time since the last tick the process did not
// run, if more than the slack; 0 otherwise, and while nothing holds the
// watch. Lock held.
func (w *Watch) gap(now time.Time) time.Duration {
	if w.holds == 0 && !w.driven {
		return 0
	}
	mono := now.Sub(w.last)
	wall := now.Round(0).Sub(w.last.Round(0)) // the wall clocks alone
	if g := max(mono, wall) - w.tick; g > w.slack {
		return g
	}
	return 0
}

// Lost is the time the process is known not to have run while the watch
// was held: every pause seen, and one just over in the sense that the
// watch's own tick is overdue now (a caller woken by a thaw may run
// before the watch's goroutine does). Two readings that differ mean a
// pause came between them.
func (w *Watch) Lost() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost + w.gap(w.now())
}

// Count is the number of pauses seen so far.
func (w *Watch) Count() int64 { return w.count.Load() }

// WithTimeoutCause is context.WithTimeoutCause, but a timeout that falls
// due after a pause gives the process a grace first (ThawGrace at most):
// a call whose answer arrived while the process was stopped is read when
// it thaws, instead of being cut off by a timer that fell due while
// nothing ran, and paid for again. Only a grace, not the whole pause: a
// process starved on a loaded machine can look paused for a second now and
// then, and its timeouts must still end its calls about on time. The
// context has no Deadline.
func (w *Watch) WithTimeoutCause(parent context.Context, d time.Duration, cause error) (context.Context, context.CancelFunc) {
	x := w.timeout(parent, d, cause)
	return x.ctx, x.stop
}

// runTimeout is a timeout of running time (WithTimeoutCause).
type runTimeout struct {
	w       *Watch
	ctx     context.Context
	cancel  context.CancelCauseFunc
	cause   error
	release func()

	mu   sync.Mutex // t is set after AfterFunc returns, and its callback may run first
	t    *time.Timer
	mark time.Duration // Lost when the timeout began, or last moved on
}

func (w *Watch) timeout(parent context.Context, d time.Duration, cause error) *runTimeout {
	x := &runTimeout{w: w, cause: cause, release: w.Hold()}
	x.ctx, x.cancel = context.WithCancelCause(parent)
	x.mark = w.Lost()
	x.mu.Lock()
	x.t = time.AfterFunc(d, x.fire)
	x.mu.Unlock()
	return x
}

// fire is the timer: after a pause since it was set (or last moved on),
// it moves the deadline on by a grace (ThawGrace at most), in which what
// arrived meanwhile is read; otherwise it ends the context with the
// timeout's cause.
func (x *runTimeout) fire() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if lost := x.w.Lost(); lost > x.mark {
		x.t.Reset(min(lost-x.mark, ThawGrace))
		x.mark = lost
		return
	}
	x.cancel(x.cause)
	x.release()
}

func (x *runTimeout) stop() {
	x.mu.Lock()
	x.t.Stop()
	x.mu.Unlock()
	x.cancel(context.Canceled)
	x.release()
}
