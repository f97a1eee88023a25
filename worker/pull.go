package worker

import (
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/jspull"
)

// A busy job's pulls are the pool's own (internal/jspull): requests that
// overlap on one subscription the job's fetch loop keeps, each asking for
// what a grant may fill (free slots, read-ahead room). The fetch loop does
// not wait for a request's records: it sends the request and goes back for
// the next slots, so records keep flowing to slots while a pull is under
// way. A record does not say which request it answers, so the grants are
// pooled: each record takes a slot of them while any is owed, else a place
// in the read-ahead; what the requests will not bring (the server's count
// when one expires short, everything when the consumer goes or the
// requests go silent) is given back, read-ahead room first. An idle job's
// long poll still goes through nats.go's Fetch (fetch.go longPoll).

// busyPullExpiry is how long the server holds a busy job's request for
// records it does not have yet: a job that runs dry gives its slots back
// that much later. Requests carry an expiry rather than no_wait, since a
// no_wait request ending at the end of the stream does not say how much of
// it was filled (internal/jspull).
const busyPullExpiry = 100 * time.Millisecond

// jobPulls is a busy job's pull requests and what their grants still owe.
type jobPulls struct {
	jr *jobRunner
	pl *jspull.Puller

	mu           sync.Mutex
	slots, ahead int  // given to requests, neither filled nor given back
	last         int  // the last request's batch
	empty        bool // a request brought nothing: the job ran dry
	err          error
	// low wakes the fetch loop once what is owed is down to half the last
	// request (cap 1).
	low chan struct{}
}

// newJobPulls subscribes for the pulls of jr's consumer.
func newJobPulls(jr *jobRunner, nc *nats.Conn) (*jobPulls, error) {
	jp := &jobPulls{jr: jr, low: make(chan struct{}, 1)}
	pl, err := jspull.Subscribe(nc, jspull.Config{Stream: broker.StreamWork, Consumer: broker.ConsumerName(jr.id),
		OnMsg: jp.onMsg, OnRelease: jp.onRelease})
	if err != nil {
		return nil, err
	}
	jp.pl = pl
	return jp, nil
}

// close gives up every request (their grants go back); records still
// coming are redelivered by the server after AckWait.
func (jp *jobPulls) close() { jp.pl.Close() }

// request asks for what g may fill; its grant is owed until records fill
// it or the request gives it back.
func (jp *jobPulls) request(g grant) {
	jp.mu.Lock()
	jp.slots += g.slots
	jp.ahead += g.ahead
	jp.last = g.slots + g.ahead
	jp.mu.Unlock()
	// A request that cannot be sent is given back through onRelease.
	_ = jp.pl.Pull(jspull.Request{Batch: g.slots + g.ahead, Expires: busyPullExpiry})
}

// onMsg hands a record to an owed slot, else to the read-ahead.
func (jp *jobPulls) onMsg(m *jspull.Msg) {
	jp.mu.Lock()
	slot := jp.slots > 0
	if slot {
		jp.slots--
	} else {
		jp.ahead--
	}
	jp.wakeLocked()
	jp.mu.Unlock()
	jp.jr.pulledOne(m, slot, time.Now())
}

// wakeLocked wakes the fetch loop once what is owed is down to half the
// last request.
func (jp *jobPulls) wakeLocked() {
	if jp.slots+jp.ahead <= jp.last/2 {
		select {
		case jp.low <- struct{}{}:
		default:
		}
	}
}

// awaitLow waits until what is owed is down to half the last request, as
// nats.go's Consume sends its next request when its pending count falls
// below a threshold: the loop overlaps its next request with the last
// one's records without splitting the slots that come free meanwhile into
// many small requests.
func (jp *jobPulls) awaitLow(done <-chan struct{}) {
	for {
		jp.mu.Lock()
		low := jp.slots+jp.ahead <= jp.last/2
		jp.mu.Unlock()
		if low {
			return
		}
		select {
		case <-jp.low:
		case <-done:
			return
		}
	}
}

// onRelease gives back what the requests will not bring: read-ahead room
// first (records take slots first).
func (jp *jobPulls) onRelease(n int, empty bool, err error) {
	jp.mu.Lock()
	a := min(n, jp.ahead)
	s := min(n-a, jp.slots)
	jp.ahead -= a
	jp.slots -= s
	jp.empty = jp.empty || empty
	if err != nil && !errors.Is(err, nats.ErrTimeout) {
		jp.err = err
	}
	jp.wakeLocked()
	jp.mu.Unlock()
	p := jp.jr.p
	p.ahead.unreserve(a)
	p.giveSlots(s)
}

// state takes what the requests said since the last look: whether one ran
// dry, and the last error.
func (jp *jobPulls) state() (empty bool, err error) {
	jp.mu.Lock()
	defer jp.mu.Unlock()
	empty, err = jp.empty, jp.err
	jp.empty, jp.err = false, nil
	return empty, err
}
