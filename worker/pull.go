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
	empty        bool // a request brought nothing: the job ran dry
	err          error
	sentAt       time.Time // the request being timed (read-ahead sizing)
	rtt          time.Duration
}

// newJobPulls subscribes for the pulls of jr's consumer.
func newJobPulls(jr *jobRunner, nc *nats.Conn) (*jobPulls, error) {
	jp := &jobPulls{jr: jr}
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
	if jp.sentAt.IsZero() {
		jp.sentAt = time.Now()
	}
	jp.mu.Unlock()
	// A request that cannot be sent is given back through onRelease.
	_ = jp.pl.Pull(jspull.Request{Batch: g.slots + g.ahead, Expires: busyPullExpiry})
}

// onMsg hands a record to an owed slot, else to the read-ahead.
func (jp *jobPulls) onMsg(m *jspull.Msg) {
	now := time.Now()
	jp.mu.Lock()
	slot := jp.slots > 0
	if slot {
		jp.slots--
	} else {
		jp.ahead--
	}
	if !jp.sentAt.IsZero() {
		jp.rtt, jp.sentAt = now.Sub(jp.sentAt), time.Time{}
	}
	jp.mu.Unlock()
	jp.jr.pulledOne(m, slot, now)
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
	if s+a > 0 && jp.slots+jp.ahead == 0 {
		jp.sentAt = time.Time{}
	}
	jp.mu.Unlock()
	p := jp.jr.p
	p.ahead.unreserve(a)
	p.giveSlots(s)
}

// state takes what the requests said since the last look: whether one ran
// dry, the last round trip timed (0 for none), and the last error.
func (jp *jobPulls) state() (empty bool, rtt time.Duration, err error) {
	jp.mu.Lock()
	defer jp.mu.Unlock()
	empty, rtt, err = jp.empty, jp.rtt, jp.err
	jp.empty, jp.rtt, jp.err = false, 0, nil
	return empty, rtt, err
}
