// Package jspull is a JetStream pull consumer's client protocol, written
// for a pool that gives every record a place before it asks for it: pull
// requests that overlap on one inbox subscription, each record handed to a
// callback as it arrives, and an account of how many asked-for records may
// still come, so that the places they were asked for can be given back the
// moment they cannot. Records are acked with JetStream's ack protocol on
// the connection they came in on (Msg).
//
// It keeps nats.go's Consume accounting (jetstream/pull.go): a record does
// not say which request it answers (the server serves its waiting requests
// in turn), so the Puller counts what all its requests may still bring;
// each record takes one from the count, a request that ends short
// (408 Request Timeout, 409 Batch Completed or Message Size Exceeds
// MaxBytes) takes what its Nats-Pending-Messages header says it will not
// bring, and what makes every request void (409 Leadership Change or
// Consumer Deleted, a reconnect, or silence past the requests' expiry and
// heartbeats) takes all of it. A request refused outright (Exceeded
// MaxWaiting, a bad request, no responders) is named by the last token of
// its reply subject and takes its own batch. A record that comes while
// the count is zero (its request was given up) is naked at once.
//
// Requests carry an expiry, not no_wait: a no_wait request that ends at
// the end of the stream is answered 404 without saying how much of it was
// filled, which overlapping requests cannot tell apart.
package jspull

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
)

// Config is what a Puller pulls and whom it hands records to.
type Config struct {
	// Stream and Consumer name the pull consumer.
	Stream, Consumer string
	// OnMsg takes each record, on the subscription's goroutine, in the
	// order they arrive; it must not block.
	OnMsg func(*Msg)
	// OnRelease is told that n records asked for will not come (their
	// places can be given back), and why: nil or nats.ErrTimeout for a
	// request that expired short, another error for one refused or made
	// void. empty is true when a request ended that brought nothing at
	// all as far as the Puller can tell (a 408 with its whole batch
	// pending). It is called with no lock of the Puller's held.
	OnRelease func(n int, empty bool, err error)
	// Silence is how long past a request's expiry (or two missed
	// heartbeats) the Puller waits for any word before it takes every
	// request for lost. Default SilenceDefault.
	Silence time.Duration
}

// SilenceDefault is Config.Silence's default: nats.go's Fetch gave up on a
// pull a second after its expiry too.
const SilenceDefault = time.Second

// Request is one pull request.
type Request struct {
	// Batch is how many records it asks for (at least 1).
	Batch int
	// Expires is how long the server holds it waiting for records
	// (required: see the package comment).
	Expires time.Duration
	// Heartbeat, when set, asks the server for a heartbeat (status 100)
	// while the request waits; at most half of Expires. Two missed
	// heartbeats void every request.
	Heartbeat time.Duration
}

// Puller is one subscription for the records of overlapping pull requests.
type Puller struct {
	nc      *nats.Conn
	cfg     Config
	sub     *nats.Subscription
	prefix  string // each request's reply subject is prefix + its number
	subject string // the consumer's next-records subject

	mu      sync.Mutex
	seq     uint64
	epoch   uint64           // requests numbered below it were made void
	pending int              // records the requests may still bring
	asked   map[uint64]asked // open requests, for answers that name one
	lastExp time.Time        // the open requests' latest expiry
	beat    time.Duration    // their longest heartbeat, 0 for none
	quietBy time.Time        // no word by then: every request is lost
	recon   uint64           // the connection's reconnects when the count last was zero
	watch   *time.Timer      // fires at quietBy, or sooner to look at the connection
	armed   bool
	closed  bool

	handedBack atomic.Int64
}

type asked struct {
	batch   int
	expires time.Time
}

// Subscribe makes a Puller for cfg's consumer on nc.
func Subscribe(nc *nats.Conn, cfg Config) (*Puller, error) {
	if cfg.OnMsg == nil || cfg.OnRelease == nil {
		return nil, errors.New("jspull: Config.OnMsg and OnRelease are required")
	}
	if cfg.Silence <= 0 {
		cfg.Silence = SilenceDefault
	}
	p := &Puller{nc: nc, cfg: cfg, prefix: nc.NewInbox() + ".", asked: map[uint64]asked{},
		subject: "$JS.API.CONSUMER.MSG.NEXT." + cfg.Stream + "." + cfg.Consumer}
	sub, err := nc.Subscribe(p.prefix+"*", p.onMsg)
	if err != nil {
		return nil, err
	}
	// What the caller gave places to, not the subscription, bounds what
	// is held.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	p.sub = sub
	p.watch = time.AfterFunc(time.Hour, p.onQuiet)
	p.watch.Stop()
	return p, nil
}

// Close ends the subscription and gives up every request: records still
// coming are not delivered (the server redelivers them after AckWait).
// OnRelease is told of the records given up.
func (p *Puller) Close() {
	_ = p.sub.Unsubscribe()
	p.mu.Lock()
	p.closed = true
	p.watch.Stop()
	p.armed = false
	n := p.voidLocked()
	p.mu.Unlock()
	if n > 0 {
		p.cfg.OnRelease(n, false, nil)
	}
}

// Pending is how many records the open requests may still bring.
func (p *Puller) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending
}

// Inbox is the subscription's subject without its last token: each
// request's reply subject is Inbox() and its number.
func (p *Puller) Inbox() string { return p.prefix }

// HandedBack counts the records that came with no request to take them
// (naked at once).
func (p *Puller) HandedBack() int64 { return p.handedBack.Load() }

// Pull sends r. Its records come to OnMsg; what of them will not come is
// told to OnRelease (also when the request cannot be sent: then err is the
// send's error too).
func (p *Puller) Pull(r Request) error {
	if r.Batch < 1 || r.Expires <= 0 || r.Heartbeat < 0 || 2*r.Heartbeat > r.Expires {
		return fmt.Errorf("jspull: bad request %+v (batch ≥ 1, expires > 0, heartbeat ≤ expires/2)", r)
	}
	now := time.Now()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nats.ErrBadSubscription
	}
	if p.pending == 0 {
		p.recon = p.nc.Stats().Reconnects
	}
	if len(p.asked) >= askedPrune {
		p.pruneLocked(now)
	}
	p.seq++
	seq := p.seq
	p.pending += r.Batch
	exp := now.Add(r.Expires)
	p.asked[seq] = asked{batch: r.Batch, expires: exp}
	if exp.After(p.lastExp) {
		p.lastExp = exp
	}
	p.beat = max(p.beat, r.Heartbeat)
	p.heardLocked(now)
	p.mu.Unlock()
	body := fmt.Appendf(nil, `{"batch":%d,"expires":%d`, r.Batch, r.Expires.Nanoseconds())
	if r.Heartbeat > 0 {
		body = fmt.Appendf(body, `,"idle_heartbeat":%d`, r.Heartbeat.Nanoseconds())
	}
	body = append(body, '}')
	err := p.nc.PublishRequest(p.subject, p.prefix+strconv.FormatUint(seq, 10), body)
	if err != nil {
		p.refused(seq, err)
	}
	return err
}

// onMsg takes one message of the subscription: a record, or the server's
// word on a request.
func (p *Puller) onMsg(m *nats.Msg) {
	record, err := Status(m)
	if !record {
		p.status(m, err)
		return
	}
	p.mu.Lock()
	if p.pending == 0 {
		p.mu.Unlock()
		p.late(m)
		return
	}
	p.pending--
	if p.pending == 0 {
		p.settledLocked()
	} else if p.beat > 0 {
		// Without heartbeats the bound is the requests' expiry, which a
		// record does not move.
		p.heardLocked(time.Now())
	}
	p.mu.Unlock()
	p.cfg.OnMsg(newMsg(m, p.nc))
}

// heardLocked moves the silence bound: the requests' latest expiry, or
// with heartbeats two of them from now, then Silence.
func (p *Puller) heardLocked(now time.Time) {
	by := p.lastExp
	if p.beat > 0 {
		by = now.Add(2 * p.beat)
	}
	p.quietBy = by.Add(p.cfg.Silence)
	if !p.armed {
		p.armed = true
		p.watch.Reset(max(p.quietBy.Sub(now), 0))
	}
}

// settledLocked: nothing more can come, so every request is over (a
// request that was filled is not answered).
func (p *Puller) settledLocked() {
	clear(p.asked)
	p.lastExp, p.beat = time.Time{}, 0
}

// askedPrune is how many open requests the Puller lets pile up (filled
// ones, which are never answered, while others keep the count above
// zero) before it forgets those past their expiry and Silence.
const askedPrune = 64

func (p *Puller) pruneLocked(now time.Time) {
	for seq, a := range p.asked {
		if now.After(a.expires.Add(p.cfg.Silence)) {
			delete(p.asked, seq)
		}
	}
}

// status acts on a status message (err nil: a heartbeat).
func (p *Puller) status(m *nats.Msg, err error) {
	seq, ok := p.seqOf(m.Subject)
	if !ok {
		return
	}
	if err == nil {
		p.mu.Lock()
		if p.pending > 0 {
			p.heardLocked(time.Now())
		}
		p.mu.Unlock()
		return
	}
	switch {
	case errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrBatchCompleted), errors.Is(err, jetstream.ErrMaxBytesExceeded):
		left, perr := pendingHeader(m)
		if perr != nil {
			p.void(err)
			return
		}
		p.short(seq, left, err)
	case errors.Is(err, jetstream.ErrConsumerDeleted), errors.Is(err, jetstream.ErrConsumerLeadershipChanged),
		errors.Is(err, jetstream.ErrServerShutdown), errors.Is(err, jetstream.ErrPinIDMismatch):
		p.void(err)
	default:
		// Refused as it came (MaxWaiting, a limit, a bad request, no
		// responders): that request alone.
		p.refused(seq, err)
	}
}

// short ends request seq with left of its batch not brought.
func (p *Puller) short(seq uint64, left int, err error) {
	p.mu.Lock()
	if seq < p.epoch {
		p.mu.Unlock()
		return
	}
	a, open := p.asked[seq]
	delete(p.asked, seq)
	left = min(left, p.pending)
	p.pending -= left
	if p.pending == 0 {
		p.settledLocked()
	}
	p.mu.Unlock()
	if left > 0 {
		p.cfg.OnRelease(left, open && left == a.batch, err)
	}
}

// refused ends request seq, none of which came.
func (p *Puller) refused(seq uint64, err error) {
	p.mu.Lock()
	a, open := p.asked[seq]
	if !open || seq < p.epoch {
		p.mu.Unlock()
		return
	}
	delete(p.asked, seq)
	n := min(a.batch, p.pending)
	p.pending -= n
	if p.pending == 0 {
		p.settledLocked()
	}
	p.mu.Unlock()
	if n > 0 {
		p.cfg.OnRelease(n, true, err)
	}
}

// void gives up every request made so far; their answers are let be.
func (p *Puller) void(err error) {
	p.mu.Lock()
	n := p.voidLocked()
	p.mu.Unlock()
	if n > 0 {
		p.cfg.OnRelease(n, false, err)
	}
}

func (p *Puller) voidLocked() int {
	n := p.pending
	p.pending = 0
	p.epoch = p.seq + 1
	p.settledLocked()
	return n
}

// ErrSilent is OnRelease's err when the requests went silent past their
// expiry and heartbeats, or the connection reconnected under them (a
// server gone with them).
var ErrSilent = errors.New("jspull: pull requests went silent")

// onQuiet runs at the silence bound, and voids the requests if they are
// still silent.
func (p *Puller) onQuiet() {
	p.mu.Lock()
	p.armed = false
	if p.closed || p.pending == 0 {
		p.mu.Unlock()
		return
	}
	if now := time.Now(); now.Before(p.quietBy) && p.nc.Stats().Reconnects == p.recon {
		// The bound moved since the timer was set: sleep on to it,
		// looking at the connection meanwhile.
		p.armed = true
		p.watch.Reset(min(p.quietBy.Sub(now), p.cfg.Silence))
		p.mu.Unlock()
		return
	}
	n := p.voidLocked()
	p.mu.Unlock()
	p.cfg.OnRelease(n, false, ErrSilent)
}

// late hands back a record no request can take: at once, for a later
// pull (nats.go drops such a record, which comes back after AckWait).
func (p *Puller) late(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	_ = newMsg(m, p.nc).Nak()
	p.handedBack.Add(1)
}

// seqOf is the request a status names in its subject's last token.
func (p *Puller) seqOf(subject string) (uint64, bool) {
	rest, ok := strings.CutPrefix(subject, p.prefix)
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(rest, 10, 64)
	return seq, err == nil
}

func pendingHeader(m *nats.Msg) (int, error) {
	return strconv.Atoi(m.Header.Get("Nats-Pending-Messages"))
}

// Status tells a record from the server's status messages on a pull's
// reply subject (nats.go's checkMsg): 404 no messages, 408 a request that
// expired (or found others pending), 409 a conflict (the consumer deleted,
// its leader changed, a batch completed, a limit exceeded), 503 no
// responders, 400 a bad request; 100, a heartbeat, is neither a record nor an end (err nil).
func Status(m *nats.Msg) (record bool, err error) {
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
	case "400":
		return false, jetstream.ErrBadRequest
	case "404":
		return false, jetstream.ErrNoMessages
	case "408":
		return false, nats.ErrTimeout
	case "423":
		return false, jetstream.ErrPinIDMismatch
	case "503":
		return false, nats.ErrNoResponders
	case "409":
		switch d := strings.ToLower(desc); {
		case strings.Contains(d, "consumer deleted"):
			return false, jetstream.ErrConsumerDeleted
		case strings.Contains(d, "leadership change"):
			return false, jetstream.ErrConsumerLeadershipChanged
		case strings.Contains(d, "batch completed"):
			return false, jetstream.ErrBatchCompleted
		case strings.Contains(d, "message size exceeds maxbytes"):
			return false, jetstream.ErrMaxBytesExceeded
		case strings.Contains(d, "server shutdown"):
			return false, jetstream.ErrServerShutdown
		}
	}
	return false, errors.New("nats: pull: " + status + " " + desc)
}
