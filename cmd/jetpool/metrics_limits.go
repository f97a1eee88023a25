package main

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetpool/jetpool/ratelimit"
)

// limitGauges are the rate-limit metrics, registered on first use.
type limitGauges struct {
	once     sync.Once
	circuit  *prometheus.GaugeVec
	limit    *prometheus.GaugeVec
	cooldown *prometheus.GaugeVec
	counted  map[string]*prometheus.CounterVec // by Status counter: congested, faults, cooldowns

	mu   sync.Mutex
	last map[string]ratelimit.Status // by key: the counts already added
}

var limitMetrics limitGauges

// Limiter implements worker.LimitMetrics: the state of a provider's limiter
// after each call.
func (m *metrics) Limiter(st ratelimit.Status) {
	g := &limitMetrics
	g.once.Do(func() {
		labels := []string{"provider", "deployment", "key"}
		g.circuit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetpool_circuit_open",
			Help: "1 when the provider's circuit is open or half-open (shared across workers), else 0."}, labels)
		g.limit = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetpool_limiter_concurrency",
			Help: "The provider's window: adaptive concurrency (this process) or limits.concurrency."}, labels)
		g.cooldown = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "jetpool_limiter_cooldown_seconds",
			Help: "Seconds left of the provider's shared cooldown."}, labels)
		g.counted = map[string]*prometheus.CounterVec{
			"congested": prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_limiter_congested_total",
				Help: "Answers that said the provider is full (429, 529 overloaded, an empty rate-limit bucket), this process."}, labels),
			"faults": prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_limiter_faults_total",
				Help: "Calls that failed with a 5xx or a connection failure, this process."}, labels),
			"cooldowns": prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_limiter_cooldowns_total",
				Help: "Shared cooldowns this process set (congestion, not one-off 429s)."}, labels),
		}
		g.last = map[string]ratelimit.Status{}
		m.reg.MustRegister(g.circuit, g.limit, g.cooldown, g.counted["congested"], g.counted["faults"], g.counted["cooldowns"])
	})
	open := 0.0
	if st.Circuit != ratelimit.CircuitClosed {
		open = 1
	}
	// A deployment's limiter: its provider, and its own name as deployment.
	prov, dep := st.Provider, ""
	if st.Of != "" {
		prov, dep = st.Of, st.Provider
	}
	g.circuit.WithLabelValues(prov, dep, st.Key).Set(open)
	g.limit.WithLabelValues(prov, dep, st.Key).Set(st.Limit)
	g.cooldown.WithLabelValues(prov, dep, st.Key).Set(st.Cooldown.Seconds())
	// Statuses of concurrent calls may come in any order: each count only
	// adds what it grew past the highest seen.
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.last[st.Key]
	for _, c := range []struct {
		name      string
		now, seen *int64
	}{{"congested", &st.Congested, &prev.Congested}, {"faults", &st.Faults, &prev.Faults}, {"cooldowns", &st.Cooldowns, &prev.Cooldowns}} {
		if d := *c.now - *c.seen; d > 0 {
			g.counted[c.name].WithLabelValues(prov, dep, st.Key).Add(float64(d))
			*c.seen = *c.now
		}
	}
	g.last[st.Key] = prev
}
