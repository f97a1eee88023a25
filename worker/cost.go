package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// CostFlushEvery is how long a worker keeps a job's spend before adding it
// to the job entry (JETPOOL_JOBS): `jetpool status` reads the job's cost
// from there in O(1), and every worker's gate sees the others' spend, at
// most this much behind. One compare-and-set per job and worker a period.
const CostFlushEvery = time.Second

// CostMetrics is implemented by a Metrics that also counts spend (dollars
// by provider and model); the pool reports every priced answer.
type CostMetrics interface {
	Cost(provider, model string, dollars float64)
}

// CostGate keeps a job's budget (max_cost): the session consults it before
// each call (Allow) and reports what each answer cost (Spend). Its view of
// the job's spend is the job entry's Cost, which every worker adds to,
// plus what this process spent and has not added yet; so a budget can be
// overshot by the calls in flight when it is reached (their answers are
// kept: a paid answer is never thrown away) and by other workers' last
// CostFlushEvery of spend.
//
// Reaching the budget stops the job like a raise: the first worker to see
// it marks the job failed (broker.Job.OverBudget), records not yet called
// are dead-lettered with reason budget, nothing queued is lost, and
// `jetpool retry --job J --max-cost N` raises the budget and runs them.
type CostGate struct {
	jr *jobRunner

	mu       sync.Mutex
	pending  float64     // spent here, not yet in the job entry
	storing  float64     // taken from pending by a Flush under way, not yet in the job seen here
	stored   float64     // the most spend a job entry stored by this gate's flushes held (a job's spend only grows; a watch may deliver an older entry late)
	timer    *time.Timer // armed while pending > 0
	closed   bool        // Close: no more timers
	flushing sync.Mutex  // one flush at a time
}

// gate is jr's cost gate.
func (jr *jobRunner) gate() *CostGate {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if jr.costs == nil {
		jr.costs = &CostGate{jr: jr}
	}
	return jr.costs
}

// Allow returns nil when the job may make another call, else the
// BudgetError that ends the record without one.
func (g *CostGate) Allow() *retry.Error {
	j := g.jr.current()
	if j.MaxCost <= 0 {
		return nil
	}
	g.mu.Lock()
	spent := max(j.Cost, g.stored) + g.pending + g.storing
	g.mu.Unlock()
	if spent < j.MaxCost {
		return nil
	}
	if j.Status != broker.JobFailed {
		g.Flush(context.Background()) // tells the other workers, and fails the job
	}
	return budgetError(j.MaxCost, max(spent, g.jr.current().Cost))
}

func budgetError(budget, spent float64) *retry.Error {
	return &retry.Error{Class: retry.ClassUnknown, TypeName: "BudgetError",
		Message: fmt.Sprintf("max_cost $%g reached ($%.4f spent): no call made; raise it with jetpool retry --max-cost", budget, spent)}
}

// Spend adds dollars to the job's spend; it reaches the job entry within
// CostFlushEvery.
func (g *CostGate) Spend(dollars float64) {
	if dollars <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.addLocked(dollars)
}

// addLocked adds dollars to what is pending, and arms the flush; g.mu is held.
func (g *CostGate) addLocked(dollars float64) {
	g.pending += dollars
	if g.timer == nil && !g.closed {
		g.timer = time.AfterFunc(CostFlushEvery, func() { g.Flush(context.Background()) })
	}
}

// Close flushes what is pending, and arms no timer after: the pool stops.
func (g *CostGate) Close(ctx context.Context) {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.Flush(ctx)
}

// Flush adds the pending spend to the job entry now, and fails the job once
// its budget is spent. A flush that cannot be stored keeps the spend for
// the next one.
func (g *CostGate) Flush(ctx context.Context) {
	g.flushing.Lock()
	defer g.flushing.Unlock()
	g.mu.Lock()
	// What is being stored still counts here until the job entry that
	// holds it is seen: else a call allowed meanwhile would see neither.
	delta := g.pending
	g.pending, g.storing = 0, delta
	if g.timer != nil {
		g.timer.Stop()
		g.timer = nil
	}
	g.mu.Unlock()
	jr := g.jr
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	j, err := jr.p.b.UpdateJob(ctx, jr.id, func(j *broker.Job) bool {
		if delta == 0 && !(j.OverBudget() && j.Status == broker.JobRunning) {
			return false
		}
		j.Cost += delta
		if j.OverBudget() && j.Status == broker.JobRunning {
			j.Status = broker.JobFailed
			j.Reason = fmt.Sprintf("max_cost $%g reached ($%.4f spent); records not called were dead-lettered with reason budget: "+
				"jetpool retry --job %s --max-cost N runs them", j.MaxCost, j.Cost, j.ID)
		}
		return true
	})
	if err != nil {
		jr.p.log.Warn().Str("job", jr.id).Err(err).Msg("job cost not stored; kept for the next flush")
		g.mu.Lock()
		g.storing = 0
		if delta > 0 {
			g.addLocked(delta)
		}
		g.mu.Unlock()
		return
	}
	jr.setJob(j)
	g.mu.Lock()
	g.storing, g.stored = 0, max(g.stored, j.Cost)
	g.mu.Unlock()
}

// costOf is what usage cost at action a's price (nil: unknown price).
func costOf(a *workflow.Action, u provider.Usage, batch bool) *float64 {
	if a.Price == nil {
		return nil
	}
	c := a.Price.Cost(u, batch)
	return &c
}

// spend bills one answer of action a: the record's cost, the job's gate
// and the metric.
func (jr *jobRunner) spend(a *workflow.Action, resp provider.Response, run *sessionEnd, batch bool) {
	c := costOf(a, resp.Usage, batch)
	if c == nil {
		return
	}
	run.cost += *c
	run.priced = true
	jr.gate().Spend(*c)
	if m, ok := jr.p.cfg.Metrics.(CostMetrics); ok {
		m.Cost(a.Provider, a.Model, *c)
	}
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
