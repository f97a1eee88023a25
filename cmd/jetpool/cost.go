package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// maxCostFlag adds --max-cost to a command.
func maxCostFlag(fs *flag.FlagSet, v *float64) {
	fs.Func("max-cost", "the job's budget in dollars, a cap: each call's worst case (its input, and max_tokens of output) is set\n"+
		"aside before it is sent, and calls go while what is spent and set aside is below it, so the spend passes it by one\n"+
		"call's worst case at most; exit 1 once reached (default: the workflow's defaults: max_cost; every action needs a\n"+
		"price and a max_tokens)", func(s string) error {
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
// resumes the same job). Every action must have a price for it to count,
// and a max_tokens for it to reserve each call's worst case
// (workflow.CheckBudget).
func (f *runFlags) budget(wf *workflow.Workflow) error {
	if f.maxCost <= 0 {
		return nil
	}
	wf.MaxCost = f.maxCost
	if err := wf.CheckBudget(); err != nil {
		return fmt.Errorf("--max-cost: %w", err)
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
		j.Ledger.Reached = false // a new budget: calls go while their worst cases fit it
		return true
	})
}

// raiseBudget sets a job's max_cost before its dead letters are replayed:
// refused, and nothing changed, when it would not cover what the job has
// spent, or when wf (the workflow the replay runs under) could not run
// under a budget.
func raiseBudget(ctx context.Context, e *env, b *broker.Broker, id string, v float64, wf *workflow.Workflow) error {
	j, _, err := b.GetJob(ctx, id)
	if err != nil {
		return err
	}
	if spent := j.Cost + j.Ledger.InDoubt(); v <= spent {
		return usageErr("job %s has spent %s already: --max-cost %s would stop it again at once", id, dollars(spent), dollars(v))
	}
	if wf != nil {
		if err := wf.CheckBudget(); err != nil {
			return configErr(fmt.Errorf("--max-cost: %w (a fixed workflow: jetpool retry --job %s --workflow FIXED.yaml --max-cost %s)", err, id, dollars(v)))
		}
	}
	if j, err = setMaxCost(ctx, b, id, v); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "job %s: max_cost %s (%s spent so far)\n", id, dollars(j.MaxCost), dollars(j.Cost+j.Ledger.InDoubt()))
	return nil
}

// costLine is status's "cost so far: $0.0123 of max_cost $5 ($0.0020 held
// for calls under way)", "" when the job has spent nothing and has no
// budget.
func costLine(s jobStatus) string {
	if s.Cost == 0 && s.MaxCost == 0 && s.CostInDoubt == 0 {
		return ""
	}
	line := "cost so far: " + dollars(s.Cost)
	if s.MaxCost > 0 {
		line += " of max_cost " + dollars(s.MaxCost)
	}
	var parts []string
	if s.CostHeld > 0 {
		parts = append(parts, dollars(s.CostHeld)+" held for calls under way")
	}
	if s.CostInDoubt > 0 {
		parts = append(parts, "up to "+dollars(s.CostInDoubt)+" more in calls of workers that stopped answering")
	}
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, "; ") + ")"
	}
	return line
}
