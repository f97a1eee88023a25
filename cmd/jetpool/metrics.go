package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// metrics implements worker.Metrics with Prometheus collectors.
type metrics struct {
	reg        *prometheus.Registry
	records    *prometheus.CounterVec
	calls      *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	inflight   prometheus.Gauge
	ready      atomic.Bool
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.records = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_records_total",
		Help: "Records finished, by job, action, outcome (ok or dead-letter reason) and error class."}, []string{"job", "action", "outcome", "class"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_calls_total",
		Help: "Model calls (attempts), by provider and error class (empty: success)."}, []string{"provider", "class"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "jetpool_call_duration_seconds",
		Help: "Model call latency.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)}, []string{"provider"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_tokens_total",
		Help: "Tokens, by provider and direction."}, []string{"provider", "direction"})
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_deliveries_total",
		Help: "JetStream deliveries handled, by job."}, []string{"job"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetpool_in_flight", Help: "Records being worked now."})
	m.reg.MustRegister(m.records, m.calls, m.latency, m.tokens, m.deliveries, m.inflight,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.ready.Store(true)
	return m
}

func (m *metrics) Record(job, action, outcome string, class retry.Class) {
	m.records.WithLabelValues(job, action, outcome, string(class)).Inc()
}

func (m *metrics) Call(p string, class retry.Class, d time.Duration, u provider.Usage) {
	m.calls.WithLabelValues(p, string(class)).Inc()
	m.latency.WithLabelValues(p).Observe(d.Seconds())
	if u.InputTokens > 0 {
		m.tokens.WithLabelValues(p, "input").Add(float64(u.InputTokens))
	}
	if u.OutputTokens > 0 {
		m.tokens.WithLabelValues(p, "output").Add(float64(u.OutputTokens))
	}
}

func (m *metrics) Delivery(job string) { m.deliveries.WithLabelValues(job).Inc() }
func (m *metrics) InFlight(d int)      { m.inflight.Add(float64(d)) }
func (m *metrics) setReady(v bool)     { m.ready.Store(v) }

// serveMetrics serves /metrics, /healthz and /readyz on JETPOOL_METRICS_ADDR.
func serveMetrics(e *env, m *metrics, b *broker.Broker) (func(), error) {
	if e.cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !m.ready.Load() || !b.NC.IsConnected() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	ln, err := net.Listen("tcp", e.cfg.MetricsAddr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.log.Error().Err(err).Msg("metrics server")
		}
	}()
	e.log.Info().Str("addr", ln.Addr().String()).Msg("metrics on /metrics, /healthz, /readyz")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}
