package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetpool/jetpool/ratelimit"
)

// limitGauges are the rate-limit gauges, registered on first use.
type limitGauges struct {
	once     sync.Once
	circuit  *prometheus.GaugeVec
	limit    *prometheus.GaugeVec
	cooldown *prometheus.GaugeVec
}

var limitMetrics limitGauges

// Limiter implements worker.LimitMetrics: the state of a provider's limiter
// after each call.
func (m *metrics) Limiter(st ratelimit.Status) {
	g := &limitMetrics
	g.once.Do(func() {
		labels := []string{"provider", "key"}
		g.circuit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetpool_circuit_open",
			Help: "1 when the provider's circuit is open or half-open (shared across workers), else 0."}, labels)
		g.limit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetpool_limiter_concurrency",
			Help: "Concurrency limit of the provider: adaptive (this process) or limits.concurrency."}, labels)
		g.cooldown = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetpool_limiter_cooldown_seconds",
			Help: "Seconds left of the provider's shared cooldown after a 429."}, labels)
		m.reg.MustRegister(g.circuit, g.limit, g.cooldown)
	})
	open := 0.0
	if st.Circuit != ratelimit.CircuitClosed {
		open = 1
	}
	g.circuit.WithLabelValues(st.Provider, st.Key).Set(open)
	g.limit.WithLabelValues(st.Provider, st.Key).Set(st.Limit)
	g.cooldown.WithLabelValues(st.Provider, st.Key).Set(st.Cooldown.Seconds())
}
