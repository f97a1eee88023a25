package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetpool/jetpool/provider"
)

// newCostCounter is jetpool_cost_dollars_total: what answered calls cost at
// their actions' prices, by provider and model (no job label: the series
// would grow with every job; a job's cost is in its entry, `jetpool status`).
func newCostCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_cost_dollars_total",
		Help: "Dollars spent on model calls at the workflows' prices, by provider and model."}, []string{"provider", "model"})
}

// Cost implements worker.CostMetrics.
func (m *metrics) Cost(p, model string, dollars float64) {
	m.cost.WithLabelValues(p, model).Add(dollars)
}

// addTokenParts counts the cached and reasoning parts of a call's tokens
// (directions cached_input and reasoning; they are parts of input and
// output, not added to them).
func addTokenParts(tokens *prometheus.CounterVec, p string, u provider.Usage) {
	if u.CachedInputTokens > 0 {
		tokens.WithLabelValues(p, "cached_input").Add(float64(u.CachedInputTokens))
	}
	if u.ReasoningTokens > 0 {
		tokens.WithLabelValues(p, "reasoning").Add(float64(u.ReasoningTokens))
	}
}
