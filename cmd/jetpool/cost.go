package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	jp "github.com/jetpool/jetpool"
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

// raiseBudget sets a job's max_cost before its dead letters are replayed
// (jp.Client.RaiseBudget: refused, nothing changed, when it would not
// cover what the job has spent or wf could not run under a budget) and
// says so.
func raiseBudget(ctx context.Context, e *env, c *jp.Client, id string, v float64, wf *workflow.Workflow) error {
	j, err := c.RaiseBudget(ctx, id, v, wf)
	if err != nil {
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
