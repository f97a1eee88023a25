package worker

import (
	"slices"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// Fallbacks: an action's fallbacks: list moves a record whose action's own
// provider/model cannot answer it to the next pair that takes the trigger,
// within the delivery, as a round of its own (as a repair or an overflow
// move is): its calls count against max_calls, are billed at the pair's
// price, and the result names the pair that answered. The list is walked
// forward once a delivery, so each fallback adds at most one round of
// attempts to the worst case (retry.Action.Fallbacks); a redelivery starts
// again at the action's own pair, which may have recovered.

// fallBack moves the conversation to the next fallback that takes one of
// triggers and reports whether it did; the next round calls it over the
// prompt alone (a refused or cut answer, a repair under way, are not
// carried to another model). after is the attempt that led here (0 when
// the provider took no call).
func (c *conversation) fallBack(triggers []string, after int) bool {
	fbs := c.base.Fallbacks
	run := c.run
	for run.nextFallback < len(fbs) {
		f := fbs[run.nextFallback]
		run.nextFallback++
		if !slices.ContainsFunc(triggers, f.Takes) {
			continue
		}
		if c.capped() || c.deliverySpent() {
			return false
		}
		pr, err := c.jr.providerAt(c.d.revision, f.Provider)
		if err != nil {
			continue // validated at dispatch; a revision's provider that is gone is not fallen back to
		}
		from := c.a.Provider + "/" + c.a.Model
		a := *c.base
		a.Provider, a.Model, a.Price, a.ContextWindow = f.Provider, f.Model, f.Price, f.ContextWindow
		c.d.action, c.a, c.pr = &a, &a, pr
		run.model, run.wait, run.err, run.explain = f.Model, nil, nil, nil
		c.h.msgs = c.h.msgs[:1]
		on := triggers[slices.IndexFunc(triggers, f.Takes)]
		run.routes = append(run.routes, broker.Route{After: after, From: from, To: f.String(), On: on})
		if after > 0 && len(run.attempts) > 0 {
			last := &run.attempts[len(run.attempts)-1]
			last.Error += "; then fell back to " + f.String()
		}
		return true
	}
	return false
}

// lastAttempt is the number of the round's last attempt, 0 when it made
// none.
func (c *conversation) lastAttempt(before int) int {
	if c.run.calls == before || len(c.run.attempts) == 0 {
		return 0
	}
	return c.run.attempts[len(c.run.attempts)-1].N
}

// skipOpen moves past targets whose circuit is open before a round: an open
// circuit takes no calls until its probe, and the record need not wait
// for it while a fallback takes outages.
func (c *conversation) skipOpen() {
	if len(c.base.Fallbacks) == 0 {
		return
	}
	for {
		if _, open := c.jr.circuitOpenUntil(c.d.revision, c.a.Provider); !open || !c.fallBack(outage, 0) {
			return
		}
	}
}

var outage = []string{workflow.FallbackOutage}

// errTriggers are the triggers of a round that failed with e.
func errTriggers(e *retry.Error) []string { return workflow.FallbackTrigger(e.Class) }
