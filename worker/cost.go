package worker

import (
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// CostMetrics is implemented by a Metrics that also counts spend (dollars
// by provider and model); the pool reports every priced answer.
type CostMetrics interface {
	Cost(provider, model string, dollars float64)
}

// costOf is what usage cost at action a's price (nil: unknown price).
func costOf(a *workflow.Action, u provider.Usage, batch bool) *float64 {
	if a.Price == nil {
		return nil
	}
	c := a.Price.Cost(u, batch)
	return &c
}

// spend bills one answer of action a: the record's cost and the metric
// (charge), and the job's budget (r: the call's reservation, settled to
// what it cost).
func (jr *jobRunner) spend(a *workflow.Action, resp provider.Response, run *sessionEnd, batch bool, r *reservation) {
	c := jr.charge(a, resp.Usage, run, batch)
	if r == nil {
		// Nothing here reserved it: a job without a budget, or a batch
		// another worker submitted.
		jr.budget().settle(0, c)
		return
	}
	r.settle(c)
}

// charge adds what usage cost at action a's price to the record's run and
// to the metric, and returns it (0 at an unknown price).
func (jr *jobRunner) charge(a *workflow.Action, u provider.Usage, run *sessionEnd, batch bool) float64 {
	c := costOf(a, u, batch)
	if c == nil {
		return 0
	}
	run.cost += *c
	run.priced = true
	if m, ok := jr.p.cfg.Metrics.(CostMetrics); ok {
		m.Cost(a.Provider, a.Model, *c)
	}
	return *c
}

// costs are a result's cost fields: this action's, and the record's total
// with its earlier actions' (nil both when the price is unknown).
func costs(d *delivery, run *sessionEnd) (cost, total *float64) {
	if !run.priced && d.action.Price == nil {
		return nil, nil
	}
	c, t := run.cost, d.env.Cost+run.cost
	return &c, &t
}

// resultUsage is a run's usage as a result keeps it.
func resultUsage(u provider.Usage) broker.Usage {
	return broker.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CachedInputTokens: u.CachedInputTokens, CacheWriteTokens: u.CacheWriteTokens, ReasoningTokens: u.ReasoningTokens}
}

// answered fills in what a result says of the record's answer and its
// cost: finish reason, latency, usage, cost, input line and the fields the
// workflow carries into results.
func answered(r *broker.Result, d *delivery, run *sessionEnd, carry []string) {
	r.FinishReason, r.FinishReasonRaw = run.finish, run.finishRaw
	r.LatencyMS = float64(run.latency.Microseconds()) / 1000
	r.Usage = resultUsage(run.usage)
	r.Cost, r.TotalCost = costs(d, run)
	r.Line = d.env.Line
	if len(carry) > 0 {
		if in, err := d.env.Fields(carry); err == nil && len(in) > 0 {
			r.Input = in
		}
	}
}

// recordCost is what the record has cost up to and including this
// delivery's action: the envelope's earlier actions, and this one's run.
func (d *delivery) recordCost() float64 {
	if d.run == nil {
		return d.env.Cost
	}
	return d.env.Cost + d.run.cost
}

// paidRun stands for the run of a record whose successful result was
// already stored (a redelivery after a crash): its cost goes on to the next
// action, and is not billed again.
func paidRun(ok *broker.Result) *sessionEnd {
	run := &sessionEnd{}
	if ok.Cost != nil {
		run.cost, run.priced = *ok.Cost, true
	}
	return run
}
