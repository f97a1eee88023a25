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
// message cost more (timers showed in the worker's profile).
//
// A message whose delivery holds a claim of its call (worker/lease.go) has
// the claim renewed on the same beat, by renew, so that the claim stands
// as long as the call runs.
type beats struct {
	mu   sync.Mutex
	held map[jetstream.Msg]beat
	tick time.Duration // how often the map is scanned: a quarter of the shortest interval
	wake chan struct{} // a shorter interval than tick: rescan at once
	// renew renews the lease of a delivery whose beat is due (nil: none),
	// in a goroutine of its own; renewed is told when it is done.
	renew    func(d *delivery)
	renewal  *sync.Cond // on mu: a renewal ended
	leases   []*delivery
	renewals sync.WaitGroup // the renewals under way: run waits for them
	frozen   func() bool    // Config.Frozen
}

// leaseRenewers is how many leases are renewed at once.
const leaseRenewers = 8

type beat struct {
	every time.Duration
	last  time.Time
	// d is the delivery whose lease is renewed with the beat (attach);
	// renewing: its renewal is under way, and release waits for it.
	d        *delivery
	renewing bool
}

func newBeats(every time.Duration) *beats {
	b := &beats{held: map[jetstream.Msg]beat{}, tick: max(every/4, 10*time.Millisecond), wake: make(chan struct{}, 1)}
	b.renewal = sync.NewCond(&b.mu)
	return b
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
		bt.last = time.Time{}
		b.held[m] = bt
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// attach renews d's lease with m's beats from now on (m is d's message,
// held).
func (b *beats) attach(m jetstream.Msg, d *delivery) {
	b.mu.Lock()
	if bt, ok := b.held[m]; ok {
		bt.d = d
		b.held[m] = bt
	}
	b.mu.Unlock()
}

// release stops keeping m alive: it was acked, nak'ed or abandoned. A
// renewal of its delivery's lease under way is waited for: nothing
// touches the delivery once it is released (it is recycled).
func (b *beats) release(m jetstream.Msg) {
	b.mu.Lock()
	for b.held[m].renewing {
		b.renewal.Wait()
	}
	delete(b.held, m)
	b.mu.Unlock()
}

// renewed ends the renewal of m's delivery's lease.
func (b *beats) renewed(m jetstream.Msg) {
	b.mu.Lock()
	if bt, ok := b.held[m]; ok {
		bt.renewing = false
		b.held[m] = bt
	}
	b.mu.Unlock()
	b.renewal.Broadcast()
}

// count is the messages held.
func (b *beats) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.held)
}

// due returns the messages whose interval has passed by now, and counts
// them as beaten now. Their deliveries' leases, if renew is set and none
// is being renewed, are marked renewing and kept for takeLeases.
func (b *beats) due(now time.Time) []jetstream.Msg {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []jetstream.Msg
	for m, bt := range b.held {
		if now.Sub(bt.last) >= bt.every {
			out = append(out, m)
			bt.last = now
			if bt.d != nil && b.renew != nil && !bt.renewing {
				bt.renewing = true
				b.leases = append(b.leases, bt.d)
			}
			b.held[m] = bt
		}
	}
	return out
}

// takeLeases hands over the leases due marked renewing.
func (b *beats) takeLeases() []*delivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.leases
	b.leases = nil
	return l
}

// run sends the heartbeats until ctx is done.
func (b *beats) run(ctx context.Context) {
	b.mu.Lock()
	t := time.NewTimer(b.tick)
	b.mu.Unlock()
	defer t.Stop()
	defer b.renewals.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
		case <-t.C:
		}
		if b.frozen != nil && b.frozen() {
			b.mu.Lock()
			t.Reset(b.tick)
			b.mu.Unlock()
			continue
		}
		for _, m := range b.due(time.Now()) {
			_ = m.InProgress() // a lost one is caught by the next: BeatsPerAckWait
		}
		if ls := b.takeLeases(); len(ls) > 0 {
			// Each renewal is a request to the store: off this loop, so a
			// store slow to answer delays no heartbeat, a few at a time.
			b.renewals.Add(1)
			go func() {
				defer b.renewals.Done()
				var wg sync.WaitGroup
				sem := make(chan struct{}, leaseRenewers)
				for _, d := range ls {
					sem <- struct{}{}
					wg.Add(1)
					go func() {
						defer wg.Done()
						b.renew(d)
						b.renewed(d.msg)
						<-sem
					}()
				}
				wg.Wait()
			}()
		}
		b.mu.Lock()
		t.Reset(b.tick)
		b.mu.Unlock()
	}
}
