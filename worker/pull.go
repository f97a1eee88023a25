package worker

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
)

// A busy job's pulls are the pool's own: a request for the next records of
// the job's consumer ({"batch": n, "no_wait": true}, JetStream's pull
// protocol) whose records come to one subscription the job's fetch loop
// keeps for all its pulls, and are handed to their slots (or the
// read-ahead) by its callback as they arrive. nats.go's FetchNoWait, which
// it replaces there, subscribed and unsubscribed an inbox for every pull,
// passed each record through a goroutine of the pull's own and made a
// timer for each record (docs/performance.md). An idle job's long poll
// still goes through nats.go's Fetch (fetch.go longPoll): it is one a
// second at most, and wants its heartbeats and expiry.
//
// A fetch loop has one pull under way at a time, so every record on the
// subscription is the current pull's: a record comes on the subject it was
// stored under, and only the server's status messages (the pull's end)
// name the pull, in the last token of their subject.

// puller is a job's subscription for its pulls' records, and the pull
// under way.
type puller struct {
	nc      *nats.Conn
	sub     *nats.Subscription
	prefix  string // the subscription's subject without its last token: each pull's reply is prefix + its number
	subject string // the consumer's next-records subject
	silence time.Duration
	// take holds a record of r and gives it a slot of r's grant while
	// r.slotted is short of them, else a place in the read-ahead
	// (jobRunner.take); every is the job's heartbeat interval now.
	take  func(m jetstream.Msg, r *pullReq)
	every func() time.Duration

	mu  sync.Mutex
	seq uint64
	cur *pullReq // the pull under way, nil between pulls
	// handedBack counts the records that came between pulls (late).
	handedBack atomic.Int64
}

// pullReq is one pull: what its grant may fill, what it filled.
type pullReq struct {
	g       grant
	reply   string // prefix + the pull's number
	got     int
	slotted int
	seen    int // got at the last look for silence (pullSilence)
	err     error
	done    chan struct{}
	every   time.Duration // the job's heartbeat interval
}

// pullSilence is how long a pull may go without a record or an answer
// before it is taken for lost (a server or a leader gone with it): nats.go's
// Fetch ended a pull with no expiry after a second of silence too.
const pullSilence = time.Second

// newPuller subscribes for the pulls of jr's consumer.
func newPuller(jr *jobRunner, nc *nats.Conn) (*puller, error) {
	return subscribePulls(nc, "$JS.API.CONSUMER.MSG.NEXT."+broker.StreamWork+"."+broker.ConsumerName(jr.id), jr.heartbeatEvery,
		func(m jetstream.Msg, r *pullReq) { jr.take(m, r.g, &r.slotted, r.every) })
}

func subscribePulls(nc *nats.Conn, subject string, every func() time.Duration, take func(jetstream.Msg, *pullReq)) (*puller, error) {
	pl := &puller{nc: nc, prefix: nc.NewInbox() + ".", subject: subject, silence: pullSilence, take: take, every: every}
	sub, err := nc.Subscribe(pl.prefix+"*", pl.onMsg)
	if err != nil {
		return nil, err
	}
	// The slots, not the subscription, bound what a pool holds.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	pl.sub = sub
	return pl, nil
}

// close ends the subscription: records still coming are not delivered to
// this pool (the server redelivers them after AckWait).
func (pl *puller) close() { _ = pl.sub.Unsubscribe() }

// pull asks for what g may fill and waits until the records came (each
// handed to a slot, then to the read-ahead, as it arrives), the server
// said there are no more, or the pull went silent (pullSilence) or done
// was. got and slotted are the records it took and those it gave slots.
func (pl *puller) pull(g grant, done <-chan struct{}) (got, slotted int, err error) {
	r := &pullReq{g: g, done: make(chan struct{}), every: pl.every()}
	pl.mu.Lock()
	pl.seq++
	r.reply = pl.prefix + strconv.FormatUint(pl.seq, 10)
	pl.cur = r
	pl.mu.Unlock()
	body := fmt.Appendf(nil, `{"batch":%d,"no_wait":true}`, g.slots+g.ahead)
	if err := pl.nc.PublishRequest(pl.subject, r.reply, body); err != nil {
		pl.end(r, err)
	}
	silence := time.NewTimer(pl.silence)
	defer silence.Stop()
	for {
		select {
		case <-r.done:
		case <-done:
			pl.end(r, nil)
		case <-silence.C:
			pl.mu.Lock()
			quiet := r.got == r.seen
			r.seen = r.got
			pl.mu.Unlock()
			if !quiet {
				silence.Reset(pl.silence)
				continue
			}
			pl.end(r, nats.ErrTimeout)
		}
		pl.mu.Lock()
		defer pl.mu.Unlock()
		return r.got, r.slotted, r.err
	}
}

// end ends r, once: the subscription takes no more records for it (late
// ones are handed back).
func (pl *puller) end(r *pullReq, err error) {
	pl.mu.Lock()
	pl.endLocked(r, err)
	pl.mu.Unlock()
}

func (pl *puller) endLocked(r *pullReq, err error) {
	if pl.cur == r {
		pl.cur, r.err = nil, err
		close(r.done)
	}
}

// onMsg takes one message: a record of the pull under way, handed on at
// once, or the server's word that a pull is over.
func (pl *puller) onMsg(m *nats.Msg) {
	record, err := pullStatus(m)
	pl.mu.Lock()
	r := pl.cur
	switch {
	case !record:
		// The end of the pull its subject names (a status of an earlier
		// pull, which ended already, is let be); 100 is a heartbeat.
		if err != nil && r != nil && m.Subject == r.reply {
			pl.endLocked(r, err)
		}
		pl.mu.Unlock()
		return
	case r == nil:
		pl.mu.Unlock()
		pl.late(m)
		return
	}
	r.got++
	pl.take(&pulledMsg{msg: m, nc: pl.nc}, r)
	if r.got == r.g.slots+r.g.ahead {
		pl.endLocked(r, nil)
	}
	pl.mu.Unlock()
}

// late hands back a record that came between pulls (its pull ended, its
// slots went back): at once, for the next pull (nats.go's Fetch dropped
// such a record, which came back after AckWait).
func (pl *puller) late(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	_ = (&pulledMsg{msg: m, nc: pl.nc}).Nak()
	pl.handedBack.Add(1)
}

// pullStatus tells a record from the server's status messages on a
// pull's reply subject (nats.go's checkMsg): 404 no messages, 408 a pull
// that timed out or found others pending, 409 a conflict (the consumer
// deleted, its leader changed, a limit exceeded); 100, a heartbeat, is
// neither a record nor an end.
func pullStatus(m *nats.Msg) (record bool, err error) {
	if len(m.Data) > 0 || len(m.Header) == 0 {
		return true, nil
	}
	status := m.Header.Get("Status")
	if status == "" {
		return true, nil
	}
	desc := m.Header.Get("Description")
	switch status {
	case "100":
		return false, nil
	case "404":
		return false, jetstream.ErrNoMessages
	case "408":
		return false, nats.ErrTimeout
	case "503":
		return false, nats.ErrNoResponders
	case "409":
		switch d := strings.ToLower(desc); {
		case strings.Contains(d, "consumer deleted"):
			return false, jetstream.ErrConsumerDeleted
		case strings.Contains(d, "leadership change"):
			return false, jetstream.ErrConsumerLeadershipChanged
		}
	}
	return false, errors.New("nats: pull: " + status + " " + desc)
}
