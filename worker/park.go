package worker

import (
	"context"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// parkStream marks, in a held pass, that parking failed (parkLong).
const parkStream = "park"

// parkLong parks the paid answer of a record held longer than parkAfter in
// the record's state (KV_JETPOOL_ATTEMPTS, another stream, most often with
// another leader), while its writes go on being tried. Should its message
// be redelivered meanwhile — AckWait ran out while the work stream elected
// a leader that never got its heartbeats — the redelivery finds the answer
// there and stores it instead of calling again. false when the park was
// tried and failed (the pass tries no other).
func (c *completer) parkLong(ctx context.Context, s *settling) bool {
	if c.parkAfter <= 0 || s.parked || s.o.kind != outcomeDone || s.since.IsZero() || c.now().Sub(s.since) < c.parkAfter {
		return true
	}
	st := s.d.nextState(nil)
	st.Answer = s.o.result
	pctx, cancel := context.WithTimeout(ctx, parkTimeout)
	defer cancel()
	if err := c.st.saveState(pctx, s.d, st); err != nil {
		return false
	}
	s.parked = true
	c.log.Info().Str("job", s.d.job).Str("action", s.d.action.Name).Str("record", s.d.env.ID).
		Dur("held", c.now().Sub(s.since).Round(time.Millisecond)).
		Msg("answer parked in the record's state while its result write is held: a redelivery stores it instead of calling again")
	return true
}

// parkHeld is the pool stopping with records whose writes never landed:
// each paid answer is parked in its record's state for the next delivery,
// which stores it instead of calling again; every record is handed back.
// What cannot be parked either (the store is gone) is said, by record.
func (c *completer) parkHeld() {
	c.mu.Lock()
	batch := c.held
	c.held = nil
	c.closed = true
	c.mu.Unlock()
	for _, s := range batch {
		c.park(s)
		<-c.room
	}
}

func (c *completer) park(s *settling) {
	d := s.d
	defer c.giveUp(s)
	ctx, cancel := context.WithTimeout(context.Background(), parkOnStopFor)
	defer cancel()
	st := d.nextState(nil)
	switch s.o.kind {
	case outcomeDone:
		st.Answer = s.o.result
	case outcomeRetry, outcomePark, outcomeHandBack:
		st = s.o.state
	default:
		// A dead letter not stored: the record runs again.
	}
	err := c.st.saveState(ctx, d, st)
	if r, ok := c.st.(interface{ stopReserve() bool }); ok && broker.StoreFull(err) && r.stopReserve() {
		// The store at its limit: an embedded one lends what it keeps
		// free, for the answers a stop must not lose.
		err = c.st.saveState(ctx, d, st)
	}
	if err != nil {
		if s.o.kind == outcomeDone {
			c.log.Error().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Err(err).
				Msg("stopping with this record's answer unstored, and it could not be parked either: it will be called again")
		}
		return
	}
	_ = d.msg.Nak()
	if s.o.kind != outcomeDone { // a parked answer keeps its claim
		c.letGo(d) // no renewal after the claim is let go: it would take it again
		c.unclaim(ctx, d)
	}
}

// unclaim lets go of d's claim of its call, if it took one, so that its
// next delivery need not wait for it.
func (c *completer) unclaim(ctx context.Context, d *delivery) {
	if d.claimRev() != 0 && !d.claimTaken() {
		_ = c.st.unclaim(ctx, d)
	}
}

// letGo stops keeping d's message and claim alive (a renewal under way is
// waited for) and ends its hold on its message (jobRunner.hold).
func (c *completer) letGo(d *delivery) {
	c.beats.release(d.msg)
	d.unhold()
}

// giveUp lets go of a record whose outcome did not land: its message is
// no longer kept alive, and is redelivered after AckWait.
func (c *completer) giveUp(s *settling) {
	c.letGo(s.d)
	if s.handed && s.own != nil {
		s.own.finished()
	}
}
