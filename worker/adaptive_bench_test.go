package worker_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/worker"
)

// faulty is a local OpenAI-format endpoint that streams every answer after
// latency and injects the ordinary faults of real providers, each drawn per call:
// 503s, streams dropped mid-flight and connections reset before any
// header (a third of faults each), and one-off 429s with Retry-After 1.
type faulty struct {
	latency         time.Duration
	faults, limited float64

	mu  sync.Mutex
	rng *rand.Rand

	calls, served, failed, tooMany atomic.Int64
}

func (f *faulty) draw() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64()
}

func (f *faulty) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	x := f.draw()
	switch {
	case x < f.limited:
		f.tooMany.Add(1)
		providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", "1"),
			Body: providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")}.ServeHTTP(w, r)
		return
	case x < f.limited+f.faults/3:
		f.failed.Add(1)
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded or not ready yet.", "server_error", "")}.ServeHTTP(w, r)
		return
	case x < f.limited+2*f.faults/3:
		f.failed.Add(1)
		providertest.ResetBeforeHeaders.ServeHTTP(w, r)
		return
	}
	drop := x < f.limited+f.faults
	t := time.NewTimer(f.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	events := providertest.OpenAIStream("gpt-4o-mini", []string{"an ", "answer"}, 12, 2)
	if drop {
		f.failed.Add(1)
		providertest.SSE{Events: events[:2], Drop: true}.ServeHTTP(w, r)
		return
	}
	f.served.Add(1)
	providertest.SSE{Events: events}.ServeHTTP(w, r)
}

// BenchmarkAdaptiveFaults is the first target of the adaptive work: 1,000 records × 2
// actions, 100 ms a call, concurrency 32, retry on, against a local
// OpenAI-format server; clean, with about 4 % faults (503s, dropped
// streams, resets), and with those plus about 2 % one-off 429s
// (Retry-After 1); each with the default adaptive window and with
// `limits: {adaptive: false}`. Each job should take at most 1.5 times the
// clean run. It takes about a minute:
//
//	go test ./worker -run '^$' -bench BenchmarkAdaptiveFaults -benchtime 1x -v
//
// JETPOOL_BENCH_RECORDS and JETPOOL_BENCH_RETRY change the records and the
// retry block (default `{max_attempts: 3, backoff: 100ms}`).
func BenchmarkAdaptiveFaults(b *testing.B) {
	records := 1000
	if n := os.Getenv("JETPOOL_BENCH_RECORDS"); n != "" {
		fmt.Sscan(n, &records)
	}
	retryBlock := "{max_attempts: 3, backoff: 100ms}"
	if r := os.Getenv("JETPOOL_BENCH_RETRY"); r != "" {
		retryBlock = r
	}
	type row struct {
		name                       string
		elapsed                    time.Duration
		calls, tooMany, failed, ok int64
		lost                       int64
		window                     string
	}
	var rows []row
	var clean time.Duration
	for _, c := range []struct {
		name            string
		faults, limited float64
		limits          string
	}{
		{"clean", 0, 0, ""},
		{"4% faults", 0.04, 0, ""},
		{"4% faults + 2% one-off 429s", 0.04, 0.02, ""},
		{"clean, adaptive: false", 0, 0, "{adaptive: false}"},
		{"4% faults, adaptive: false", 0.04, 0, "{adaptive: false}"},
		{"4% faults + 2% one-off 429s, adaptive: false", 0.04, 0.02, "{adaptive: false}"},
	} {
		b.Run(strings.NewReplacer(" ", "_", "%", "pct", ",", "", ":", "").Replace(c.name), func(b *testing.B) {
			for range b.N {
				srv := &faulty{latency: 100 * time.Millisecond, faults: c.faults, limited: c.limited, rng: rand.New(rand.NewPCG(7, 24))}
				ps := providertest.NewServer(b, srv)
				bk := testenv.Broker(b)
				limits := ""
				if c.limits != "" {
					limits = ", limits: " + c.limits
				}
				wf := testenv.Workflow(b, fmt.Sprintf(`
providers:
  faulty: {kind: openai, base_url: %q, timeout: 10s, stream: true%s}
defaults:
  provider: faulty
  model: gpt-4o-mini
  retry: %s
actions:
  - name: first
    prompt: "Summarise: {{ .text }}"
  - name: second
    prompt: "Classify: {{ .first }}"
`, ps.URL+"/v1", limits, retryBlock))
				res := testenv.Dispatch(b, bk, wf, testenv.Records(b, records), dispatcher.Options{})
				start := time.Now()
				// The breaker on, with its defaults: ordinary faults must not open it.
				pool := testenv.Pool(b, bk, worker.Config{Concurrency: 32,
					LimitsConfig: ratelimit.Config{Breaker: ratelimit.BreakerConfig{FailureRatio: ratelimit.BreakerFailureRatioDefault}}})
				job, prog := testenv.WaitFinished(b, bk, res.Job.ID, 10*time.Minute)
				elapsed := time.Since(start)
				r := row{name: c.name, elapsed: elapsed, calls: srv.calls.Load(), tooMany: srv.tooMany.Load(),
					failed: prog.Failed, ok: prog.OK, lost: int64(records) - prog.OK - prog.Failed}
				for _, l := range pool.Limits().Limiters() {
					st := l.Status()
					r.window = fmt.Sprintf("%s; circuit %s, %d shared cooldowns", st.Window(), st.Circuit, st.Cooldowns)
				}
				_ = job
				if c.name == "clean" {
					clean = elapsed
				}
				b.ReportMetric(elapsed.Seconds(), "s/job")
				b.ReportMetric(float64(r.calls), "calls/job")
				rows = append(rows, r)
			}
		})
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d records × 2 actions, 100 ms a call, concurrency 32, retry %s\n", records, retryBlock)
	sb.WriteString("| run | elapsed | × clean | HTTP calls | 429s | records ok | failed | lost | window at the end |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %.1f s | %.2f | %d | %d | %d | %d | %d | %s |\n", r.name, r.elapsed.Seconds(),
			r.elapsed.Seconds()/clean.Seconds(), r.calls, r.tooMany, r.ok, r.failed, r.lost, r.window)
	}
	b.Log(sb.String())
}
