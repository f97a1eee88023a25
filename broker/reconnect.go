package broker

import (
	"sync/atomic"
	"time"
)

// Reconnect is one of a connection's reconnections, before it happens:
// Done is closed when it does, and At then says when. A publish remembers
// the one ahead of it (Broker.NextReconnect) when it is sent: should it
// happen before the publish's ack comes, the publish went into a socket
// that died, and is most likely lost.
type Reconnect struct {
	done chan struct{}
	at   time.Time // set before done is closed
}

// Done is closed when the connection has reconnected.
func (r *Reconnect) Done() <-chan struct{} { return r.done }

// At is when the connection reconnected; valid once Done is closed.
func (r *Reconnect) At() time.Time { return r.at }

// reconnects hands out the next Reconnect and fires it.
type reconnects struct{ next atomic.Pointer[Reconnect] }

func newReconnects() *reconnects {
	r := &reconnects{}
	r.next.Store(&Reconnect{done: make(chan struct{})})
	return r
}

func (r *reconnects) fire() {
	old := r.next.Swap(&Reconnect{done: make(chan struct{})})
	old.at = time.Now()
	close(old.done)
}

// NextReconnect is the broker's connection's next reconnection (nil for a
// broker not made by Connect).
func (b *Broker) NextReconnect() *Reconnect {
	if b.reconnects == nil {
		return nil
	}
	return b.reconnects.next.Load()
}

// ReconnectGrace is how long after a reconnection a publish sent before it
// may still be acked (nats.go resends what it had buffered and not yet
// written) before it is counted lost and written again.
const ReconnectGrace = time.Second
