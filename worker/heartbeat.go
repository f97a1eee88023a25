package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BeatsPerAckWait is how many heartbeats fit in a job consumer's AckWait.
// Six, so that a beat lost in a connection to a server that froze (the
// client finds it stale in 10-15 s), and one dropped while the consumer's
// leader changes, still leave beats that land in time: with a third of
// AckWait, a freeze of the results and consumer leader had three records
// redelivered to another worker and paid twice (TestChaosFrozenNode).
const BeatsPerAckWait = 6

// beats keeps alive every work message the pool holds, from its pull until
// its outcome has landed: read ahead, in a slot (calling, or waiting for a
// limiter permit or a cooldown), its result being stored or stored again
// after a failed write, waiting for room to be stored. A held message gets
// InProgress once a heartbeat interval of its job (AckWait /
// BeatsPerAckWait) has passed since its pull or its last heartbeat, and at
// once when the connection comes back after a loss (soon), so no delivery
// the pool still owns runs out its AckWait and is delivered again (paid
// twice). One goroutine and one map for every message: a timer per
// message cost more (timers were about 4 % of the worker's CPU).
type beats struct {
	mu   sync.Mutex
	held map[jetstream.Msg]beat
	tick time.Duration // how often the map is scanned: a quarter of the shortest interval
	wake chan struct{} // a shorter interval than tick: rescan at once
}

type beat struct {
	every time.Duration
	last  time.Time
}

func newBeats(every time.Duration) *beats {
	return &beats{held: map[jetstream.Msg]beat{}, tick: max(every/4, 10*time.Millisecond), wake: make(chan struct{}, 1)}
}

// hold starts keeping m alive every interval.
func (b *beats) hold(m jetstream.Msg, every time.Duration, now time.Time) {
	b.mu.Lock()
	b.held[m] = beat{every: every, last: now}
	shorter := every/4 < b.tick
	if shorter {
		b.tick = max(every/4, 10*time.Millisecond)
	}
	b.mu.Unlock()
	if shorter {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}

// soon makes every held message due now: the connection they are kept
// alive on came back, and the beats sent since its server went silent may
// be lost.
func (b *beats) soon() {
	b.mu.Lock()
	for m, bt := range b.held {
		b.held[m] = beat{every: bt.every}
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// release stops keeping m alive: it was acked, nak'ed or abandoned.
func (b *beats) release(m jetstream.Msg) {
	b.mu.Lock()
	delete(b.held, m)
	b.mu.Unlock()
}

// count is the messages held.
func (b *beats) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// due returns the messages whose interval has passed by now, and counts
// them as beaten now.
func (b *beats) due(now time.Time) []jetstream.Msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []jetstream.Msg
	for m, bt := range b.held {
		if now.Sub(bt.last) >= bt.every {
			out = append(out, m)
			b.held[m] = beat{every: bt.every, last: now}
		}
	}
	return out
}

// run sends the heartbeats until ctx is done.
func (b *beats) run(ctx context.Context) {
	b.mu.Lock()
	t := time.NewTimer(b.tick)
	b.mu.Unlock()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-t.C:
		}
		for _, m := range b.due(time.Now()) {
			_ = m.InProgress() // a lost one is caught by the next: BeatsPerAckWait
		}
		b.mu.Lock()
		t.Reset(b.tick)
		b.mu.Unlock()
	}
}
