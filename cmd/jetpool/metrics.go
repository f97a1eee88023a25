package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// metrics implements worker.Metrics with Prometheus collectors.
//
// No counter has a job label: counters live as long as the process, and one
// series per job would grow with every job it ever served. What is per job
// — the backlog and the dead letters — is a gauge read from the server at
// each scrape (jobCollector), for the jobs that have a work consumer: running
// jobs, and finished ones until their consumer goes (JETPOOL_CONSUMER_GRACE).
// Per-job series therefore end with their jobs. The label is jetpool_job, not
// job, which is Prometheus's own target label.
type metrics struct {
	reg        *prometheus.Registry
	records    *prometheus.CounterVec
	calls      *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	tokens     *prometheus.CounterVec
	deliveries prometheus.Counter
	inflight   prometheus.Gauge
	cost       *prometheus.CounterVec // metrics_cost.go
	ready      atomic.Bool
	// unservable lists the running jobs the worker will not serve, with
	// why (worker.Pool.Unservable); nil: none.
	unservable func() map[string]string
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.records = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_records_total",
		Help: "Records finished, by action, outcome (ok or dead-letter reason) and error class."}, []string{"action", "outcome", "class"})
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_calls_total",
		Help: "Model calls (attempts), by provider, deployment (empty: none), model and error class (empty: success)."},
		[]string{"provider", "deployment", "model", "class"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "jetpool_call_duration_seconds",
		Help: "Model call latency, by provider, deployment and model.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 14)},
		[]string{"provider", "deployment", "model"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jetpool_tokens_total",
		Help: "Tokens, by provider, deployment, model and direction."}, []string{"provider", "deployment", "model", "direction"})
	m.deliveries = prometheus.NewCounter(prometheus.CounterOpts{Name: "jetpool_deliveries_total",
		Help: "JetStream deliveries of work messages handled (redeliveries included)."})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetpool_in_flight", Help: "Records being worked now."})
	m.cost = newCostCounter()
	bi := readBuildInfo() // version.go
	info := prometheus.NewGauge(prometheus.GaugeOpts{Name: "jetpool_build_info",
		Help:        "Always 1: the jetpool build this process runs.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "goversion": bi.Go, "commit": bi.Commit}})
	info.Set(1)
	m.reg.MustRegister(m.records, m.calls, m.latency, m.tokens, m.deliveries, m.inflight, m.cost, info,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.ready.Store(true)
	return m
}

func (m *metrics) Record(_, action, outcome string, class retry.Class) {
	m.records.WithLabelValues(action, outcome, string(class)).Inc()
}

func (m *metrics) Call(p, model string, class retry.Class, d time.Duration, u provider.Usage) {
	m.CallAt(p, "", model, class, d, u)
}

// CallAt implements worker.DeploymentMetrics: a call to deployment dep of
// provider p.
func (m *metrics) CallAt(p, dep, model string, class retry.Class, d time.Duration, u provider.Usage) {
	m.calls.WithLabelValues(p, dep, model, string(class)).Inc()
	m.latency.WithLabelValues(p, dep, model).Observe(d.Seconds())
	for _, t := range []struct {
		direction string
		n         int
	}{{"input", u.InputTokens}, {"output", u.OutputTokens}, {"cached_input", u.CachedInputTokens}, {"reasoning", u.ReasoningTokens}} {
		// cached_input and reasoning are parts of input and output, not
		// added to them.
		if t.n > 0 {
			m.tokens.WithLabelValues(p, dep, model, t.direction).Add(float64(t.n))
		}
	}
}

func (m *metrics) Delivery(string) { m.deliveries.Inc() }
func (m *metrics) InFlight(d int)  { m.inflight.Add(float64(d)) }
func (m *metrics) setReady(v bool) { m.ready.Store(v) }

// watchJobs adds the per-job gauges, read from b at each scrape.
func (m *metrics) watchJobs(b *broker.Broker, log zerolog.Logger) {
	m.reg.MustRegister(newJobCollector(b, log))
}

// jobCollector reads the per-job gauges from the server when scraped: one
// consumer listing of the work stream (pending and ack pending of every
// job's consumer; 256 a page) and one stream info of the DLQ (its count per
// subject). Every worker reports the same values, so a query takes max by
// jetpool_job across workers before it sums over jobs (deploy/k8s).
type jobCollector struct {
	b       *broker.Broker
	log     zerolog.Logger
	backlog *prometheus.Desc
	dead    *prometheus.Desc
	dlq     *prometheus.Desc
}

// jobScrapeTimeout bounds the server reads of one scrape; a scrape that
// cannot reach the server leaves the per-job gauges out.
const jobScrapeTimeout = 3 * time.Second

func newJobCollector(b *broker.Broker, log zerolog.Logger) *jobCollector {
	return &jobCollector{b: b, log: log,
		backlog: prometheus.NewDesc("jetpool_backlog",
			"Records of the job not done yet: queued plus delivered and not acked (in flight, or waiting for a delayed redelivery); its work consumer's pending plus ack pending.",
			[]string{"jetpool_job"}, nil),
		dead: prometheus.NewDesc("jetpool_dead_letters",
			"Dead letters of the job in JETPOOL_DLQ, for jobs that have a work consumer.", []string{"jetpool_job"}, nil),
		dlq: prometheus.NewDesc("jetpool_dlq_messages", "Dead letters in JETPOOL_DLQ, of every job.", nil, nil),
	}
}

func (c *jobCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.dead
	ch <- c.dlq
}

func (c *jobCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), jobScrapeTimeout)
	defer cancel()
	bls, err := c.b.Backlogs(ctx)
	if err != nil {
		c.log.Debug().Err(err).Msg("metrics: job backlogs")
		return
	}
	for _, bl := range bls {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(bl.Queued)+float64(bl.AckPending), bl.Job)
	}
	byJob, total, err := c.b.DeadLetterCounts(ctx)
	if err != nil {
		c.log.Debug().Err(err).Msg("metrics: dead letters")
		return
	}
	for _, bl := range bls {
		ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(byJob[bl.Job]), bl.Job)
	}
	ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(total))
}

// serveMetrics serves /metrics, /healthz and /readyz on JETPOOL_METRICS_ADDR.
func serveMetrics(e *env, m *metrics, b *broker.Broker) (func(), error) {
	if e.cfg.MetricsAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", e.cfg.MetricsAddr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: metricsMux(e, m, b), ReadHeaderTimeout: 5 * time.Second}
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

// metricsMux is the handler of /metrics, /healthz and /readyz.
func metricsMux(e *env, m *metrics, b *broker.Broker) http.Handler {
	mux := http.NewServeMux()
	m.watchJobs(b, e.log)
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
		// Ready even when some jobs cannot be served here: other jobs (and
		// tomorrow's) can, and an orchestrator that took the worker out for
		// one job's missing key would stall a rollout for every job. The
		// body says which jobs this worker leaves to others, and why.
		_, _ = w.Write([]byte("ready\n"))
		if m.unservable == nil {
			return
		}
		refused := m.unservable()
		for _, job := range slices.Sorted(maps.Keys(refused)) {
			fmt.Fprintf(w, "cannot serve job %s: %s\n", job, refused[job])
		}
	})
	return mux
}
