package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// grant is what one pull may fill: slots taken for it (each a record to
// start at once) and room promised in the read-ahead (records to buffer).
type grant struct{ slots, ahead int }

func (g grant) empty() bool { return g.slots == 0 && g.ahead == 0 }

// fetchLoop pulls the job's records while the pool runs, one step at a
// time: bind the job's consumer; wait while its work cannot go on (every
// provider's circuit open, or records held after failed writes); take the
// free slots and read-ahead room (grant); send a pull request for them and
// go back for the next without waiting (pull.go: each record is handed to
// a slot or the read-ahead as it comes, what the requests do not bring is
// given back). A job that ran dry is long-polled with one slot until a
// record comes.
func (jr *jobRunner) fetchLoop(ctx context.Context) {
	var cons jetstream.Consumer
	var jp *jobPulls
	defer func() {
		jr.hasWork.Store(false) // worker/share.go: its share goes to the others
		if jp != nil {
			jp.close()
		}
	}()
	idle := false
	bindWait := bindWaitMin
	for ctx.Err() == nil {
		if cons == nil {
			if cons = jr.bind(ctx); cons == nil {
				// A job is announced before its consumer is made: look
				// again soon, then less often.
				jr.pause(ctx, bindWait)
				bindWait = min(bindWait*2, time.Second)
				continue
			}
			bindWait = bindWaitMin
		}
		if jr.mustWait(ctx) {
			continue
		}
		if jp != nil && !idle {
			empty, err := jp.state()
			if empty && err == nil && jr.pendingWork(ctx, cons) {
				empty = false // the server was slow, the job did not run dry
			}
			idle = empty
			jr.hasWork.Store(!empty) // worker/share.go
			if jr.pullFailed(ctx, err) {
				cons = nil
				continue
			}
		}
		g, ok := jr.grant(ctx, idle)
		if !ok {
			return
		}
		if g.empty() {
			continue
		}
		if jp == nil && !idle {
			var err error
			if jp, err = newJobPulls(jr, jr.p.pulls.NC); err != nil {
				jr.p.giveSlots(g.slots)
				jr.p.ahead.unreserve(g.ahead)
				jr.p.log.Debug().Str("job", jr.id).Err(err).Msg("subscribe for pulls")
				jr.pause(ctx, IdlePollMax)
				continue
			}
		}
		if !idle {
			jr.hasWork.Store(true) // worker/share.go: until a request runs dry
			// The next request goes out while this one's records still
			// come: once half of it came (the time that takes sizes the
			// read-ahead).
			began := time.Now()
			jp.request(g)
			jp.awaitLow(ctx.Done())
			jr.p.ahead.observe(time.Now(), jr.p.finishedCount.Load(), time.Since(began))
			continue
		}
		got, err := jr.longPollGrant(cons, g)
		idle = got == 0
		jr.hasWork.Store(got > 0) // worker/share.go
		if jr.pullFailed(ctx, err) {
			cons = nil
		} else if err != nil && idle && ctx.Err() == nil {
			// A broken connection: do not spin.
			jr.pause(ctx, IdlePollMax)
		}
	}
}

// pendingWork reports whether the job's consumer has records the server
// would deliver now (a paused consumer, or one at its max_ack_pending,
// delivers none). It is asked when a busy request expired unfilled: with
// records pending, the server was too slow to answer within busyPullExpiry
// (a starved CPU), and the job has not run dry: it goes on pulling and keeps
// its share (worker/share.go), where taking it for idle gave its slots to
// the other jobs' records back from a backoff. No answer: taken as dry.
func (jr *jobRunner) pendingWork(ctx context.Context, cons jetstream.Consumer) bool {
	ictx, cancel := context.WithTimeout(ctx, IdlePollMax)
	defer cancel()
	info, err := cons.Info(ictx)
	if err != nil {
		return false
	}
	full := info.Config.MaxAckPending > 0 && info.NumAckPending >= info.Config.MaxAckPending
	return info.NumPending > 0 && !info.Paused && !full
}

// pullFailed logs a pull's error and tells whether it lost the job's
// consumer (to be bound again).
func (jr *jobRunner) pullFailed(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	jr.p.log.Debug().Str("job", jr.id).Err(err).Msg("fetch")
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted)
}

// bindWaitMin is the first pause before a job's consumer is looked up
// again: a job is announced a moment before its dispatcher makes the
// consumer, and a worker that waited a whole second for it started every
// job a second late (a twentieth of a 20 s job).
const bindWaitMin = 20 * time.Millisecond

// pause sleeps d or until ctx is done.
func (jr *jobRunner) pause(ctx context.Context, d time.Duration) {
	_ = (retry.SystemClock{}).Sleep(ctx, d)
}

// bind looks the job's consumer up (nil while it is not there yet) and
// takes its settings: heartbeats follow the consumer's own AckWait (set by
// whoever dispatched the job), not this process's setting, so that a
// worker configured with a longer AckWait does not let a long
// call's delivery expire and be paid for twice.
func (jr *jobRunner) bind(ctx context.Context) jetstream.Consumer {
	p := jr.p
	gen := jr.pauseGen()
	c, err := p.pulls.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(jr.id))
	if err == nil {
		jr.sawPause(gen, broker.PauseOf(c.CachedInfo())) // worker/pause.go
	}
	if err != nil {
		if ctx.Err() == nil {
			p.log.Debug().Str("job", jr.id).Err(err).Msg("job consumer not ready")
		}
		return nil
	}
	// The job's nonce as it is now that the consumer exists: it changes
	// only while the job has no consumer (a dispatch taking another's
	// over, dispatcher/checking.go), so a message that carries another is
	// from a dispatch that lost the job.
	j, _, err := p.b.GetJob(ctx, jr.id)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Debug().Str("job", jr.id).Err(err).Msg("job entry not read")
		}
		return nil
	}
	jr.nonce.Store(&j.Nonce)
	if aw := c.CachedInfo().Config.AckWait; aw > 0 {
		jr.heartbeat.Store(int64(min(aw/BeatsPerAckWait, p.cfg.Heartbeat)))
		jr.ackWait.Store(int64(aw))
	}
	// A consumer just created may not list its replicas yet (its group is
	// still forming): the configured replicas and an unknown leader count
	// as replicated too. Only a consumer known to be alone trusts the mark.
	keeps, err := p.b.WorkKeepsAcked(ctx)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Debug().Str("job", jr.id).Err(err).Msg("work stream not read")
		}
		return nil
	}
	jr.keepsAcked.Store(keeps)
	ci := c.CachedInfo().Cluster
	jr.replicated.Store(p.b.Cfg.Replicas > 1 || c.CachedInfo().Config.Replicas > 1 ||
		(ci != nil && (len(ci.Replicas) > 0 || (ci.Name != "" && ci.Leader == ""))))
	return c
}

// mustWait pauses the job's pulls, and reports so, while its records could
// not go on: every provider of the job has an open circuit (pull nothing
// until a probe is due; other jobs' providers go on), or the completer
// holds records whose writes the store refuses (take no more work until
// they land: a full disk or a lost quorum must not burn calls).
func (jr *jobRunner) mustWait(ctx context.Context) bool {
	if until, open := jr.circuitOpen(); open {
		jr.hasWork.Store(false) // its share goes to the others meanwhile
		// Until the probe is due, not longer: a parked record that comes
		// back then is the probe, and a cooldown can be shorter than a poll.
		// (At least a few milliseconds: the limiter's clock may be another.)
		jr.pause(ctx, min(max(time.Until(until), 10*time.Millisecond), IdlePollMax))
		return true
	}
	switch {
	case jr.p.done.heldCount() > 0:
		jr.hasWork.Store(false)
		jr.pause(ctx, heldRetryMin)
		return true
	}
	return false
}

// grant takes one slot (waiting for it), or room in the read-ahead once a
// slot took a record from it, then whatever else is free; a free slot
// starts a record already read ahead. A busy pool waits a moment for a
// few more slots, so that one pull serves several records. ok is false
// when ctx is done.
func (jr *jobRunner) grant(ctx context.Context, idle bool) (g grant, ok bool) {
	p := jr.p
	if !idle {
		jr.wantedAt.Store(time.Now().UnixNano())
	}
	room, shared, ok := jr.awaitShare(ctx) // worker/share.go: a job over its share waits
	if !ok {
		return g, false
	}
	jr.wants.Store(true)
	for g.empty() {
		select {
		case p.sem <- struct{}{}:
			g.slots = 1
		case <-p.ahead.low:
			if !idle && !shared {
				g.ahead = p.ahead.reserve(p.aheadTarget(), FetchBatchMax)
			}
		case <-ctx.Done():
			jr.wants.Store(false)
			return g, false
		}
	}
	jr.wants.Store(false)
	// The room may have gone while the loop waited for the slot (the
	// job's records back from their backoffs took it): then it waits again.
	if room >= 0 {
		if room, _ = jr.shareRoom(); room == 0 {
			p.giveSlots(g.slots)
			p.ahead.unreserve(g.ahead)
			return grant{}, true
		}
	}
	more := FetchBatchMax - g.slots - g.ahead
	if room >= 0 {
		more = min(more, room-g.slots)
	}
	g.slots += p.freeSlots(max(more, 0))
	// A slot that came free while the buffer had a record (the slot was
	// released just as the record was put) starts that record.
	for g.slots > 0 {
		t, ok := p.ahead.take()
		if !ok {
			break
		}
		p.start(t)
		g.slots--
	}
	if g.empty() {
		return g, true
	}
	// Every pull is a request of its own.
	want := min(p.cfg.Concurrency/8, FetchGather)
	if room >= 0 {
		want = min(want, room)
	}
	if !idle && g.slots > 0 && g.slots < want {
		g.slots += p.gatherSlots(ctx, want-g.slots, FetchGatherWait)
	}
	// Beyond the free slots, only what the read-ahead has room for (none
	// while jobs share the slots: worker/share.go).
	if !idle && g.ahead == 0 && !shared {
		g.ahead = p.ahead.reserve(p.aheadTarget(), FetchBatchMax-g.slots)
	}
	return g, true
}

// longPollGrant long-polls an idle job with a single slot of g, so a
// record (or a delayed redelivery) is picked up the moment it is due while
// the other slots stay free for other jobs; what it did not fill goes back.
func (jr *jobRunner) longPollGrant(cons jetstream.Consumer, g grant) (got int, err error) {
	p := jr.p
	p.giveSlots(g.slots - 1)
	p.ahead.unreserve(g.ahead)
	g = grant{slots: 1}
	got, slotted, err := jr.longPoll(cons, g)
	p.giveSlots(g.slots - slotted)
	p.ahead.observe(time.Now(), p.finishedCount.Load(), 0)
	if errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) {
		err = nil // a pull that found nothing (more)
	}
	return got, err
}

// longPoll waits up to IdlePoll for a record of an idle job (nats.go's
// Fetch). JobDone ends the pull; Stop lets it expire (see Stop). With a
// deadline of 10/9 IdlePoll, the server ends the pull after IdlePoll, a
// ninth before the client stops listening.
func (jr *jobRunner) longPoll(cons jetstream.Consumer, g grant) (got, slotted int, err error) {
	pctx, cancel := context.WithTimeout(jr.done, jr.p.cfg.IdlePoll*10/9)
	defer cancel()
	batch, err := cons.Fetch(1, jetstream.FetchContext(pctx))
	if err != nil {
		return 0, 0, err
	}
	every := jr.heartbeatEvery()
	for msg := range batch.Messages() {
		got++
		jr.take(msg, g, &slotted, every)
	}
	return got, slotted, batch.Error()
}

// take holds a record of a long poll and gives it a slot of g's while
// slotted is short of them, else a place in the read-ahead.
func (jr *jobRunner) take(msg jetstream.Msg, g grant, slotted *int, every time.Duration) {
	slot := *slotted < g.slots
	if slot {
		*slotted++
	}
	jr.holdEvery(msg, slot, every, time.Now())
}

// pulledOne holds a pulled record: started on a slot taken for it, or put in
// the read-ahead.
func (jr *jobRunner) pulledOne(msg jetstream.Msg, slot bool, now time.Time) {
	jr.holdEvery(msg, slot, jr.heartbeatEvery(), now)
}

func (jr *jobRunner) holdEvery(msg jetstream.Msg, slot bool, every time.Duration, now time.Time) {
	p := jr.p
	p.pulled.Add(1)
	p.beats.hold(msg, every, now)
	t := task{jr: jr, msg: msg, pauses: p.pauses.Lost()}
	if slot {
		p.start(t)
		return
	}
	if !p.ahead.put(t, now) {
		// Stopping: never started, so back at once.
		go p.handBackUnstarted(t)
	}
}

// freeSlots takes up to n slots that are free now.
func (p *Pool) freeSlots(n int) int {
	got := 0
	for got < n {
		select {
		case p.sem <- struct{}{}:
			got++
		default:
			return got
		}
	}
	return got
}

// gatherSlots waits up to wait for up to n more slots to come free.
func (p *Pool) gatherSlots(ctx context.Context, n int, wait time.Duration) int {
	t := time.NewTimer(wait)
	defer t.Stop()
	got := 0
	for got < n {
		select {
		case p.sem <- struct{}{}:
			got++
		case <-t.C:
			return got
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// giveSlots hands n slots back.
func (p *Pool) giveSlots(n int) {
	for range n {
		<-p.sem
	}
}
