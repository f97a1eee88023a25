package worker

import (
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
)

// A record's result counts every call of its action that was billed, in
// every delivery of its generation: a delivery that ends without the
// record's outcome (a retry, a wait, a hand-back) passes on what its
// answered calls spent in the record's state (keepSpend), and the next
// delivery's session starts from it (seedRun). A replayed record carries
// what its failed generation spent (deadletter/replay.go), and a pipeline's
// next action what the earlier ones spent (Envelope.Accounts, Cost): its
// final result's total_cost is all of it.

// seedRun starts run with what the record's earlier deliveries of this
// generation spent.
func seedRun(run *sessionEnd, d *delivery) {
	st := d.state
	if st == nil {
		return
	}
	run.usage = providerUsage(st.Usage)
	run.cost = st.Cost
	run.priced = run.priced || st.Cost != 0
}

// keepSpend passes on in st, the record's state for its next delivery,
// what end's session spent, earlier deliveries included (seedRun).
func keepSpend(st *broker.RecordState, end *sessionEnd) {
	if end == nil {
		return
	}
	st.Usage = resultUsage(end.usage)
	st.Cost = end.cost
}

// priorRun stands for the session of a delivery that ended its record
// before any call (the job failed, its budget was reached): what the
// earlier deliveries spent, and nothing more.
func (d *delivery) priorRun() *sessionEnd {
	run := &sessionEnd{model: d.action.Model}
	seedRun(run, d)
	return run
}

// providerUsage is a result's usage as a call's.
func providerUsage(u broker.Usage) provider.Usage {
	return provider.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
}
