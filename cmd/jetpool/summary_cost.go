package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/jetpool/jetpool/broker"
)

// addCost adds a result's cost (all its action's calls) to the summary.
func (s *summary) addCost(r *broker.Result) {
	s.cached += int64(r.Usage.CachedInputTokens)
	s.reasoning += int64(r.Usage.ReasoningTokens)
	if r.Cost == nil {
		if r.Usage.InputTokens+r.Usage.OutputTokens > 0 {
			s.unpriced++
		}
		return
	}
	if s.costByAction == nil {
		s.costByAction = map[string]float64{}
	}
	s.cost += *r.Cost
	s.costByAction[r.Action] += *r.Cost
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

// printCost prints the job's cost, from its results (exact: each result's
// tokens at its action's price), per action, and against its budget.
func (s *summary) printCost(out io.Writer) {
	if s.costByAction == nil && s.unpriced == 0 && s.job.MaxCost == 0 {
		return
	}
	line := "  cost: " + dollars(s.cost)
	if len(s.costByAction) > 1 {
		var parts []string
		for _, a := range slices.Sorted(maps.Keys(s.costByAction)) {
			parts = append(parts, a+" "+dollars(s.costByAction[a]))
		}
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	if s.unpriced > 0 {
		line += fmt.Sprintf("; %d results at an unknown price are not counted (set price: in the workflow)", s.unpriced)
	}
	if s.job.MaxCost > 0 {
		line += fmt.Sprintf("; max_cost %s", dollars(s.job.MaxCost))
		if s.job.OverBudget() {
			line += " reached"
		}
	}
	fmt.Fprintln(out, line)
}

// dollars renders an amount: cents for sums above a dollar, four decimals
// below (a job of a few thousand cheap calls costs fractions of a cent).
func dollars(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}
