package main

import (
	"github.com/prometheus/client_golang/prometheus"
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
