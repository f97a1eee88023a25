package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
)

// The completer is the one owner of a record's outcome once its session is
// over (river's job executor and its completer are the model): it carries out
// the outcome decide chose, under the rules that keep jetpool's promise
// (docs/durability.md):
//
//   - An answer paid for is stored before its work message is acked, and is
//     never thrown away: a write that fails is tried again, with backoff, the
//     work message kept alive meanwhile (beats), until it lands. Records
//     whose writes fail are held, at most Concurrency of them (room; up to four
//     times that where results go in group commits: CommitRoom);
//     once that is full the pool's slots fill and it stops pulling — work
//     pauses instead of burning calls. A pool that must stop first parks each answer
//     in the record's state (broker.RecordState.Answer), where the next
//     delivery finds it and stores it instead of calling the model again.
//   - A dead letter and its failed result are stored before the ack; a
//     record is handed back (nak) only with its state saved, so that every
//     delivery jetpool makes is accounted for.
//   - A write that can never succeed (the answer, or the record with it, is
//     larger than the server takes) fails the record with reason too_large
//     instead of being tried for ever.
//
// A success takes the fast path: its result and the next action's message
// are published at once without waiting, the slot goes to the next record,
// and the commit loop acks in publish order once the store has acked both.
type completer struct {
	st      store
	beats   *beats
	log     zerolog.Logger
	metrics Metrics
	now     func() time.Time

	// room bounds the records the completer holds after their slot went on
	// (being committed, or held after a failed write).
	room    chan struct{}
	commits chan *settling
	faults  faults

	// dieAfterWrites, for tests and drills (Config.DieAfterWrites).
	dieAfterWrites func(*delivery) bool
	// parkAfter is how long a paid answer is held unstored before it is
	// parked in its record's state too (parkLong); 0: never.
	parkAfter time.Duration

	mu     sync.Mutex
	held   []*settling
	wake   chan struct{} // something was held
	closed bool
}

// store is what the completer writes to: the broker in a pool
// (brokerStore), a fake in complete_test.go.
type store interface {
	publishResult(r *broker.Result) (future, error) // without waiting for the store
	forward(d *delivery, output any) (future, error)
	deadLetter(ctx context.Context, e *deadletter.Entry) error
	writeResult(ctx context.Context, r *broker.Result) error
	saveState(ctx context.Context, d *delivery, st *broker.RecordState) error
	clearState(ctx context.Context, d *delivery) error
	unclaim(ctx context.Context, d *delivery) error
	deleteResult(ctx context.Context, seq uint64) error
	failJob(ctx context.Context, d *delivery, diag string) error
	ack(msg jetstream.Msg) // once the outcome's writes have landed
}

// future is a publish waiting for the store's ack.
type future interface {
	wait(ctx context.Context) error
	// release, after wait returned nil, lets the write's buffer go to
	// another record's write.
	release()
}

// settling is a record whose outcome the completer is carrying out.
type settling struct {
	d *delivery
	o outcome
	// steps are the writes still to land, in order; then the final ack or
	// nak.
	steps []step
	// result and fwd are the fast path's publishes awaiting their acks.
	result, fwd future
	// own is told when the completer takes the record over and when it
	// lets go of it (the pool's in-flight count, per-job counters).
	own     owner
	handed  bool
	isHeld  bool
	since   time.Time // when a write first failed
	lastErr error
	// parked: its paid answer is in the record's state too (parkLong).
	parked bool
}

// owner is told when the completer takes a record over from its handler
// (handed) and when it is done with it (finished).
type owner interface {
	handed()
	finished()
}

// handOver makes the completer s's owner.
func (s *settling) handOver() {
	s.handed = true
	if s.own != nil {
		s.own.handed()
	}
}

// step is one write of an outcome.
type step struct {
	what   string // "result", "next action", "dead letter", "failed result", "state"
	stream string
	do     func(ctx context.Context) error
}

// writeTimeout bounds one try of a write; heldRetryMax the pause between
// tries of a held record's writes.
const (
	writeTimeout = 5 * time.Second
	heldRetryMin = 100 * time.Millisecond
	// heldRetryMax is short: a stream back from an election is written to
	// within a second, before a redelivery of a held record can look for
	// its result (TestChaosLeaderLoss paid records again that a 5 s pause
	// had left unstored after the results stream was back).
	heldRetryMax  = time.Second
	parkTimeout   = time.Second     // one try to park a long-held answer (parkLong)
	parkOnStopFor = 2 * time.Second // the last try to park held answers when the pool stops
)

func newCompleter(st store, b *beats, log zerolog.Logger, m Metrics, room int) *completer {
	return &completer{st: st, beats: b, log: log, metrics: m, now: time.Now,
		room: make(chan struct{}, room), commits: make(chan *settling, room), wake: make(chan struct{}, 1)}
}

// complete carries out o for d. release hands d's slot on; it is called
// once the calls are over and nothing else holds the slot. handedOver: the
// completer owns d now and calls finished when it is settled; otherwise d
// is settled (or abandoned) when complete returns.
func (c *completer) complete(ctx context.Context, d *delivery, o outcome, release func(), own owner) (handedOver bool) {
	// The delivery's own: one allocation a record less.
	s := &d.settle
	*s = settling{d: d, o: o, own: own}
	switch o.kind {
	case outcomeAbandon:
		c.letGo(d)
		return false
	case outcomeYield:
		c.letGo(d)
		if d.run != nil && d.run.fence != nil {
			c.log.Info().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Int("calls", d.run.calls).
				Msg("another delivery took this record's call over while this worker was silent (stopped or cut off) longer than its claim stands: no further call from here; the calls made here count in its budget")
		}
		return false
	case outcomeDone:
		if c.fast(ctx, s, release) {
			return true
		}
	}
	s.steps = c.stepsOf(s)
	return c.settle(ctx, s, release)
}

// fast publishes a success's writes without waiting and hands the record
// to the commit loop; false when it must go the slow way (no room while
// stopping past the deadline, or a publish refused at once).
func (c *completer) fast(ctx context.Context, s *settling, release func()) bool {
	select {
	case c.room <- struct{}{}: // most often: one channel, no select over two
	default:
		select {
		case c.room <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	d := s.d
	f, err := c.st.publishResult(s.o.result)
	if err == nil && d.next != "" {
		s.fwd, err = c.st.forward(d, s.o.result.Output)
	}
	if err != nil {
		<-c.room
		return false
	}
	s.result = f
	s.handOver()
	release()
	c.commits <- s // never blocks: it has room for every token
	return true
}

// settle runs s's writes now; when one fails the record is held (room
// permitting: else the handler waits here with its slot, and the pool
// stops pulling) and its writes are tried again by heldLoop.
func (c *completer) settle(ctx context.Context, s *settling, release func()) (handedOver bool) {
	if c.run(ctx, s) {
		c.finish(s)
		return false
	}
	select {
	case c.room <- struct{}{}:
	case <-ctx.Done():
		// Stopping past the deadline: no room is waited for; a paid
		// answer is parked for the next delivery, not dropped.
		c.park(s)
		return false
	}
	s.handOver()
	release()
	c.hold(s)
	return true
}

// commitLoop acks the fast path's records once the store has acked their
// writes, in publish order (the order the store acks them): a handler so
// waits for no store ack. A record whose write failed is held.
func (c *completer) commitLoop(quit <-chan struct{}) {
	for {
		select {
		case s := <-c.commits:
			what, stream := "result", broker.StreamResults
			err := s.result.wait(context.Background())
			if err == nil && s.fwd != nil {
				what, stream = "next action", broker.StreamWork
				err = s.fwd.wait(context.Background())
			}
			if err != nil {
				// Both are written again (each is idempotent: one message
				// per result subject, a deduplicated next-action message).
				s.steps = c.stepsOf(s)
				if broker.TooLarge(err) {
					c.tooLarge(s, step{what: what}, err)
				} else {
					s.lastErr = err
					c.faults.fail(what, stream, err, c.log)
				}
				c.hold(s)
				continue
			}
			c.faults.ok("result", c.log)
			s.result.release()
			c.finish(s)
			recycle(s.d)
			<-c.room
		case <-quit:
			return
		}
	}
}

// run tries each of s's remaining writes once, in order; true when all
// have landed. A write that can never land changes the outcome.
func (c *completer) run(ctx context.Context, s *settling) bool {
	for len(s.steps) > 0 {
		st := s.steps[0]
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
		err := st.do(wctx)
		cancel()
		if err == nil {
			c.faults.ok(st.what, c.log)
			s.steps = s.steps[1:]
			continue
		}
		if broker.TooLarge(err) {
			c.tooLarge(s, st, err)
			continue
		}
		s.lastErr = err
		if s.since.IsZero() {
			s.since = c.now()
		}
		c.faults.fail(st.what, st.stream, err, c.log)
		return false
	}
	return true
}

// hold keeps s for heldLoop, which tries its writes again until they land.
func (c *completer) hold(s *settling) {
	if s.since.IsZero() {
		s.since = c.now()
	}
	s.isHeld = true
	c.mu.Lock()
	if c.closed {
		// The pool stopped past its deadline: nothing tries again.
		c.mu.Unlock()
		c.park(s)
		<-c.room
		return
	}
	c.held = append(c.held, s)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// heldCount is the records held after a failed write.
func (c *completer) heldCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}

// heldLoop tries the held records' writes again, with backoff, until they
// land; when ctx is done (the pool stops past its deadline) it parks what
// it still holds and returns.
func (c *completer) heldLoop(ctx context.Context) {
	delay := heldRetryMin
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		if c.heldCount() == 0 {
			delay = heldRetryMin
			select {
			case <-c.wake:
			case <-ctx.Done():
				c.parkHeld()
				return
			}
		}
		t.Reset(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			c.parkHeld()
			return
		}
		c.mu.Lock()
		batch := c.held
		c.held = nil
		c.mu.Unlock()
		// A stream that failed a write in this pass is not tried again in
		// it: it is still failing, and trying each other record's write to
		// it would cost a write timeout apiece before the next pass. The
		// records bound for other streams are tried.
		landed := false
		var keep []*settling
		failing := map[string]bool{}
		for _, s := range batch {
			if !failing[parkStream] && !c.parkLong(ctx, s) {
				failing[parkStream] = true
			}
			if len(s.steps) > 0 && failing[s.steps[0].stream] {
				keep = append(keep, s)
				continue
			}
			if !c.run(ctx, s) {
				if len(s.steps) > 0 {
					failing[s.steps[0].stream] = true
				}
				keep = append(keep, s)
				continue
			}
			c.finish(s)
			<-c.room
			landed = true
		}
		c.mu.Lock()
		c.held = append(keep, c.held...)
		c.mu.Unlock()
		if landed {
			delay = heldRetryMin
		} else {
			delay = min(delay*2, heldRetryMax)
		}
	}
}

// finish ends s once its writes have landed: the ack or nak, then what may
// fail without harm (clearing the state, a stale result, metrics, logs).
func (c *completer) finish(s *settling) {
	d, o := s.d, s.o
	if c.dieAfterWrites != nil && c.dieAfterWrites(d) {
		c.giveUp(s) // as a process killed before its ack
		return
	}
	c.letGo(d)
	if !s.since.IsZero() {
		// What this worker knows: it made no call for the record while
		// the write was held; another delivery may have, if its claim was
		// taken over meanwhile (worker/lease.go).
		ev := c.log.Info()
		msg := "%s stored after its writes were held: this worker made no further call for the record meanwhile"
		if d.claimTaken() {
			ev = c.log.Warn()
			msg = "%s stored after its writes were held: this worker made no further call for the record, but its claim was taken over meanwhile (it was silent longer than the claim stands), and the delivery that took it may have called again"
		}
		ev.Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).
			Dur("held", c.now().Sub(s.since).Round(time.Millisecond)).Msgf(msg, o.kind)
	}
	// The writes after the ack, each bounded by writeTimeout. Most records
	// have none: the context (and its timer) is made for those that do.
	var ctx context.Context
	cancel := context.CancelFunc(func() {})
	defer func() { cancel() }()
	wctx := func() context.Context {
		if ctx == nil {
			ctx, cancel = context.WithTimeout(context.Background(), writeTimeout)
		}
		return ctx
	}
	switch o.kind {
	case outcomeRetry, outcomePark, outcomeHandBack:
		// Let go before the nak: the next delivery, maybe a moment away,
		// would otherwise find the claim standing and wait for it.
		c.unclaim(wctx(), d)
	}
	switch o.kind {
	case outcomeRetry, outcomePark:
		_ = d.msg.NakWithDelay(o.delay)
	case outcomeHandBack:
		_ = d.msg.Nak()
	default:
		c.st.ack(d.msg)
	}
	switch o.kind {
	case outcomeDone, outcomeDeadLetter:
		if d.state != nil || s.parked {
			_ = c.st.clearState(wctx(), d)
		}
		if d.stale != 0 && o.kind == outcomeDone {
			_ = c.st.deleteResult(wctx(), d.stale)
		}
		if o.result != nil {
			c.metrics.Record(d.job, d.action.Name, o.result.Outcome(), retry.Class(errClass(o.result)))
		}
	}
	if o.kind == outcomeDeadLetter {
		c.log.Info().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).
			Str("reason", string(o.entry.Reason)).Msg(logDiag(o.entry.Error))
		if o.raise != "" {
			if err := c.st.failJob(wctx(), d, o.raise); err != nil {
				c.log.Error().Err(err).Str("job", d.job).Msg("could not mark the job failed")
			}
		}
	}
	if s.handed && s.own != nil {
		s.own.finished()
	}
}

func errClass(r *broker.Result) string {
	if r == nil || r.Error == nil {
		return ""
	}
	return r.Error.Class
}

// stepsOf is the writes of s's outcome, in the order that keeps the
// promise: a result before the next action's message (a crash between the
// two finds the result and forwards again, paying nothing); a dead letter
// before its failed result; everything before the ack or nak.
func (c *completer) stepsOf(s *settling) []step {
	d, o := s.d, s.o
	var steps []step
	switch o.kind {
	case outcomeDone:
		steps = append(steps, step{"result", broker.StreamResults, func(ctx context.Context) error {
			return c.st.writeResult(ctx, o.result)
		}})
		if d.next != "" {
			steps = append(steps, c.forwardStep(d, o.result.Output))
		}
	case outcomeSettled:
		if o.result != nil && o.result.Status == broker.StatusOK && d.next != "" {
			steps = append(steps, c.forwardStep(d, o.result.Output))
		}
	case outcomeRetry, outcomePark, outcomeHandBack:
		steps = append(steps, step{"state", "KV_" + broker.BucketAttempts, func(ctx context.Context) error {
			return c.st.saveState(ctx, d, o.state)
		}})
	case outcomeDeadLetter:
		steps = append(steps, step{"dead letter", broker.StreamDLQ, func(ctx context.Context) error {
			return c.st.deadLetter(ctx, o.entry)
		}})
		if o.result != nil {
			steps = append(steps, step{"failed result", broker.StreamResults, func(ctx context.Context) error {
				return c.st.writeResult(ctx, o.result)
			}})
		}
	}
	return steps
}

func (c *completer) forwardStep(d *delivery, output any) step {
	return step{"next action", broker.StreamWork, func(ctx context.Context) error {
		f, err := c.st.forward(d, output)
		if err != nil {
			return err
		}
		return f.wait(ctx)
	}}
}

// tooLarge handles a write that can never land as it is.
func (c *completer) tooLarge(s *settling, st step, err error) {
	d := s.d
	switch st.what {
	case "dead letter":
		// The record as it was for this action arrived, so it fits; its
		// headers may not: the body is left out, the story kept.
		s.o.entry.Data = nil
		s.o.entry.Error += " (the record is not in this dead letter: with its headers it is over the server's max_payload)"
	case "failed result", "state":
		// The last output kept for return_last, or a parked answer.
		if s.o.result != nil {
			s.o.result.Output = nil
		}
		if s.o.state != nil {
			s.o.state.Answer = nil
			if n := len(s.o.state.Attempts); n > 20 {
				s.o.state.Attempts = s.o.state.Attempts[n-20:]
			}
		}
	default: // the result or the next action's message of a success
		what := "its answer"
		if st.what == "next action" {
			what = "the record with its answer, for action " + d.action.Name + "'s next action,"
		}
		final := &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "TooLargeError",
			Message: fmt.Sprintf("%s is larger than the server takes (%v): it cannot be stored; raise max_payload (deploy/README.md) and replay", what, err)}
		c.log.Error().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Err(err).
			Msg("a paid answer cannot be stored: the record is dead-lettered as too_large")
		calls := 0
		if s.o.result != nil {
			calls = s.o.result.Recovery.Attempts
		}
		s.o = decide(decision{d: d, now: c.now(), check: verdict{kind: verdictTooLarge, final: final, calls: calls}})
		s.steps = c.stepsOf(s)
	}
}
