package main

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/jetpool/jetpool/broker"
)

// addCost adds a record's final result to the summary's cost: its total
// (every action, generation and delivery: broker.Totals), by action.
func (s *summary) addCost(r *broker.Result) {
	s.cached += int64(r.Usage.CachedInputTokens)
	s.reasoning += int64(r.Usage.ReasoningTokens)
	priced, unpriced := false, false
	for _, a := range r.Actions {
		if a.Cost == nil {
			unpriced = unpriced || a.Usage.InputTokens+a.Usage.OutputTokens > 0
			continue
		}
		s.addActionCost(a.Action, *a.Cost)
		priced = true
	}
	if !priced && r.TotalCost != nil {
		// A result stored before accounts carried their cost.
		s.addActionCost(r.Action, *r.TotalCost)
		unpriced = false
	} else if len(r.Actions) == 0 && r.Cost == nil {
		unpriced = r.Usage.InputTokens+r.Usage.OutputTokens > 0
	}
	if unpriced {
		s.unpriced++
	}
}

func (s *summary) addActionCost(action string, c float64) {
	if s.costByAction == nil {
		s.costByAction = map[string]float64{}
	}
	s.cost += c
	s.costByAction[action] += c
}

// tokenParts is ", 120 of them cached, 40 reasoning" when there are such.
func (s *summary) tokenParts() string {
	var parts []string
	if s.cached > 0 {
		parts = append(parts, fmt.Sprintf("%d input cached", s.cached))
	}
	if s.reasoning > 0 {
		parts = append(parts, fmt.Sprintf("%d output reasoning", s.reasoning))
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
	j := s.job
	ledger, doubt := j.Cost, j.Ledger.InDoubt()
	if s.costByAction == nil && s.unpriced == 0 && j.MaxCost == 0 && ledger == 0 {
		return
	}
	line := "  cost: " + dollars(ledger)
	if len(s.costByAction) > 1 {
		var parts []string
		for _, a := range slices.Sorted(maps.Keys(s.costByAction)) {
			parts = append(parts, a+" "+dollars(s.costByAction[a]))
		}
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	switch diff := ledger - s.cost; {
	case math.Abs(diff) <= costTolerance:
	case diff > 0:
		line += fmt.Sprintf("; %s of it in calls no result holds (records called again after a worker froze, was cut off or died)", dollars(diff))
	default:
		line += fmt.Sprintf("; the results hold %s: %s of calls a worker that stopped did not add to the job's cost", dollars(s.cost), dollars(-diff))
	}
	if doubt > 0 {
		line += fmt.Sprintf("; up to %s more in calls of workers that stopped answering (in doubt)", dollars(doubt))
	}
	if s.unpriced > 0 {
		line += fmt.Sprintf("; %d results unpriced, not counted: set `price:` or load a price file", s.unpriced)
	}
	if j.MaxCost > 0 {
		line += fmt.Sprintf("; max_cost %s", dollars(j.MaxCost))
	}
	fmt.Fprintln(out, line)
	if left := s.byReason["budget"]; j.MaxCost > 0 && j.OverBudget() && (left > 0 || j.Status == broker.JobFailed) {
		fmt.Fprintf(out, "  max_cost %s reached: %s spent, %s stopped before a call (dead letters, reason budget); to run them: jetpool retry --job %s --max-cost N\n",
			dollars(j.MaxCost), dollars(ledger+doubt), plural(left, "record"), j.ID)
	}
}

// dollars renders an amount: cents for sums above a dollar, four decimals
// below (a job of a few thousand cheap calls costs fractions of a cent).
func dollars(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}
