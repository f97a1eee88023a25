package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
)

// tokenParts is ", 120 of them cached, 40 reasoning" when there are such.
func (s *summary) tokenParts() string {
	var parts []string
	if s.Cached > 0 {
		parts = append(parts, fmt.Sprintf("%d input cached", s.Cached))
	}
	if s.Reasoning > 0 {
		parts = append(parts, fmt.Sprintf("%d output reasoning", s.Reasoning))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}

// costTolerance is how far the job's ledger and its results may differ
// and still be one figure: floating-point sums in another order.
const costTolerance = 0.00005

// printCost prints the job's cost: its ledger's, which every worker adds
// every answered call to, wherever and whenever it was made; what the
// results hold of it, by action, when they hold less (calls of records
// called again after a worker froze or died); what is in doubt; and the
// job against its budget.
func (s *summary) printCost(out io.Writer) {
	j := s.Job
	ledger, doubt := j.Cost, j.Ledger.InDoubt()
	if s.CostByAction == nil && s.Unpriced == 0 && j.MaxCost == 0 && ledger == 0 {
		return
	}
	line := "  cost: " + dollars(ledger)
	if len(s.CostByAction) > 1 {
		var parts []string
		for _, a := range slices.Sorted(maps.Keys(s.CostByAction)) {
			parts = append(parts, a+" "+dollars(s.CostByAction[a]))
		}
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	switch diff := ledger - s.Cost; {
	case math.Abs(diff) <= costTolerance:
	case diff > 0:
		line += fmt.Sprintf("; %s of it in calls no result holds (records called again after a worker froze, was cut off or died)", dollars(diff))
	default:
		line += fmt.Sprintf("; the results hold %s: %s of calls a worker that stopped did not add to the job's cost", dollars(s.Cost), dollars(-diff))
	}
	if doubt > 0 {
		line += fmt.Sprintf("; up to %s more in calls of workers that stopped answering (in doubt)", dollars(doubt))
	}
	if s.Unpriced > 0 {
		line += fmt.Sprintf("; %d results unpriced, not counted: set `price:` or load a price file", s.Unpriced)
	}
	if j.MaxCost > 0 {
		line += fmt.Sprintf("; max_cost %s", dollars(j.MaxCost))
	}
	fmt.Fprintln(out, line)
	if left := s.ByReason["budget"]; j.MaxCost > 0 && j.OverBudget() && (left > 0 || j.Status == broker.JobFailed) {
		fmt.Fprintf(out, "  max_cost %s reached: %s spent, %s stopped before a call (dead letters, reason budget); to run them: jetpool retry --job %s --max-cost N\n",
			dollars(j.MaxCost), dollars(ledger+doubt), plural(left, "record"), j.ID)
	}
}

// dollars renders an amount (jp.Dollars).
func dollars(v float64) string { return jp.Dollars(v) }
