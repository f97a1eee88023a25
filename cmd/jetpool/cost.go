package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// maxCostFlag adds --max-cost to a command.
func maxCostFlag(fs *flag.FlagSet, v *float64) {
	fs.Func("max-cost", "the job's budget in dollars: new calls stop once it is spent (default: the workflow's defaults: max_cost)", func(s string) error {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil || x <= 0 {
			return fmt.Errorf("want a positive amount of dollars such as 12.50, got %q", s)
		}
		*v = x
		return nil
	})
}

// budget applies --max-cost to the workflow (after the job id is derived:
// a budget is not part of a job's identity, so a rerun with a larger one
// resumes the same job). Every action must have a price for it to count.
func (f *runFlags) budget(wf *workflow.Workflow) error {
	if f.maxCost <= 0 {
		return nil
	}
	wf.MaxCost = f.maxCost
	for _, a := range wf.Actions {
		if a.Price == nil {
			return fmt.Errorf("--max-cost: action %s (provider %s, model %s) has no known price, so the budget could not count its calls: give it a price: block",
				a.Name, a.Provider, a.Model)
		}
	}
	return nil
}

// applyMaxCost sets --max-cost on a job dispatched before with another budget.
func (f *runFlags) applyMaxCost(ctx context.Context, b *broker.Broker, job *broker.Job) error {
	if f.maxCost <= 0 || job.MaxCost == f.maxCost {
		return nil
	}
	j, err := setMaxCost(ctx, b, job.ID, f.maxCost)
	if err == nil {
		*job = *j
	}
	return err
}

func setMaxCost(ctx context.Context, b *broker.Broker, id string, v float64) (*broker.Job, error) {
	return b.UpdateJob(ctx, id, func(j *broker.Job) bool {
		if j.MaxCost == v {
			return false
		}
		j.MaxCost = v
		return true
	})
}

// raiseBudget sets a job's max_cost before its dead letters are replayed.
func raiseBudget(ctx context.Context, e *env, b *broker.Broker, id string, v float64) error {
	j, err := setMaxCost(ctx, b, id, v)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "job %s: max_cost %s (%s spent so far)\n", id, dollars(j.MaxCost), dollars(j.Cost))
	if j.OverBudget() {
		return usageErr("job %s has spent %s already: --max-cost %s would stop it again at once", id, dollars(j.Cost), dollars(v))
	}
	return nil
}

// costLine is status's "cost so far: $0.0123 of max_cost $5", "" when the
// job has spent nothing and has no budget.
func costLine(s jobStatus) string {
	if s.Cost == 0 && s.MaxCost == 0 {
		return ""
	}
	line := "cost so far: " + dollars(s.Cost)
	if s.MaxCost > 0 {
		line += " of max_cost " + dollars(s.MaxCost)
	}
	return line
}
