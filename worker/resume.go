package worker

import (
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// A delivery cut short before its session was over — parked because its
// provider stopped taking calls (an open circuit, a shared cooldown), or
// handed back by a stopping worker — is not one of the record's retries:
// waiting is not an attempt. It spends no delivery of the exec layer, and
// the next delivery continues its budget rather than starting a new one,
// so that the record makes max_attempts × max_deliveries calls in all, no
// fewer and no more: the next delivery's first round has the attempts the
// cut round had left, and the delivery as a whole the calls the cut one
// had left (RecordState.OpenCalls, OpenRound).

// deliveryCalls is the most calls one delivery of action a makes: a
// round of attempts for the first ask and for each repair, max_tokens
// doubling and overflow round (retry.Action.Bound's per delivery).
func deliveryCalls(a *workflow.Action) int {
	rounds := 1 + a.Overflow.Rounds() + len(a.Fallbacks)
	if a.Expect != nil {
		rounds += a.Expect.RepairAttempts
	}
	if a.OnTruncated == workflow.OnTruncatedGrow {
		rounds += workflow.GrowMax
	}
	return a.Retry.Attempts() * rounds
}

// callsLeft is how many calls the conversation's next round may make in
// this delivery: the action's attempts, cut to what max_calls leaves and,
// in a delivery that continues one cut short, to what that one left.
func (c *conversation) callsLeft() int {
	left := c.a.Retry.Attempts()
	if c.a.MaxCalls > 0 {
		left = min(left, c.a.MaxCalls-c.prior-c.run.calls)
	}
	if st := c.d.state; st != nil && st.OpenCalls > 0 {
		cut := min(c.a.Retry.Attempts()-st.OpenRound, deliveryCalls(c.a)-st.OpenCalls-c.run.calls)
		if c.rounds == 0 {
			// A round is cut only before a call it may make: at least that
			// one is left (a state that says otherwise is not trusted).
			cut = max(cut, 1)
		} else {
			cut = deliveryCalls(c.a) - st.OpenCalls - c.run.calls
		}
		left = min(left, cut)
	}
	return left
}

// deliverySpent reports whether a delivery that continues one cut short has
// made every call the two may make between them: no round follows, and the
// session ends on what it has, as its last round's budget would have.
func (c *conversation) deliverySpent() bool {
	st := c.d.state
	return st != nil && st.OpenCalls > 0 && st.OpenCalls+c.run.calls >= deliveryCalls(c.a)
}

// cutShort notes in st the calls of a delivery that ends cut short (parked,
// handed back): the next delivery continues it.
func cutShort(st *broker.RecordState, end *sessionEnd) {
	if end.calls == 0 {
		return // nothing spent: st keeps what an earlier cut left
	}
	if end.cutFirst {
		st.OpenRound += end.cutRound // the round it continued was cut again
	} else {
		st.OpenRound = end.cutRound
	}
	st.OpenCalls += end.calls
}

// spent notes in st that a delivery is spent (redelivered): the next
// starts a budget of its own.
func spent(st *broker.RecordState) {
	st.Deliveries++
	st.OpenCalls, st.OpenRound = 0, 0
}
