//go:build chaos

package worker_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/worker"
)

// paced is a deployment that takes rate calls a second (a token bucket of
// one second's burst) and answers 429 past it, as a provider's rpm limit
// does; down, once set, makes it answer 503 to everything.
type paced struct {
	mu                  sync.Mutex
	rate                float64
	tokens              float64
	last                time.Time
	down                atomic.Bool
	ok, tooMany, failed atomic.Int64
	okAt                []time.Time // when each 200 was sent
}

func (p *paced) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.down.Load() {
		p.failed.Add(1)
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("Service Unavailable", "server_error", "")}.ServeHTTP(w, r)
		return
	}
	p.mu.Lock()
	now := time.Now()
	if p.last.IsZero() {
		p.tokens = p.rate
	} else {
		p.tokens = min(p.rate, p.tokens+now.Sub(p.last).Seconds()*p.rate)
	}
	p.last = now
	allowed := p.tokens >= 1
	if allowed {
		p.tokens--
		p.okAt = append(p.okAt, now)
	}
	p.mu.Unlock()
	if !allowed {
		p.tooMany.Add(1)
		providertest.Reply{Status: 429, Header: http.Header{"Retry-After": {"1"}},
			Body: providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")}.ServeHTTP(w, r)
		return
	}
	p.ok.Add(1)
	providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4.1-mini", "ok", 5, 2)}.ServeHTTP(w, r)
}

// Two deployments at 20 req/s each (rpm 1200 apiece); the first starts
// answering 503 to everything halfway through the job. Every record ends
// ok (0 failed, one result a record) within validate's bound; the rate
// before the outage, the 429s, and the healthy deployment's goodput in the
// 10 s after the outage are logged (figures: docs/performance.md).
func TestChaosDeploymentOutageMidJob(t *testing.T) {
	t.Parallel()
	const records, rate = 600, 20
	a, bp := &paced{rate: rate}, &paced{rate: rate}
	var calls atomic.Int64
	var outageAt atomic.Pointer[time.Time]
	sa := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) >= records/2 && !a.down.Load() {
			now := time.Now()
			if outageAt.CompareAndSwap(nil, &now) {
				a.down.Store(true)
			}
		}
		a.ServeHTTP(w, r)
	}))
	sb := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		bp.ServeHTTP(w, r)
	}))
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  oa:
    kind: openai
    timeout: 5s
    limits: {rpm: %d}
    deployments:
      - {base_url: %s/v1}
      - {base_url: %s/v1}
actions:
  - name: extract
    provider: oa
    model: gpt-4.1-mini
    prompt: "Title of {{ .text }}"
    retry: {max_attempts: 3, backoff: 100ms, redeliver: {max_deliveries: 3, backoff: 200ms}}
`, rate*60, sa.URL, sb.URL))
	bound := wf.Actions[0].Bound(wf.Providers["oa"]).Calls
	start := time.Now()
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, records), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 16, LimitsConfig: ratelimit.Config{
		Breaker: ratelimit.BreakerConfig{MinCalls: 10, Cooldown: 5 * time.Second}}})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 3*time.Minute)
	elapsed := time.Since(start)
	results := testenv.Results(t, b, job)
	for id, r := range results {
		if r.Status != broker.StatusOK {
			t.Logf("%s: %s %s: %s", id, r.Status, r.Reason, r.Error.Message)
		}
	}
	require.EqualValues(t, records, p.OK, "0 failed: %+v", p)
	require.Len(t, results, records, "one result a record")
	for id, r := range results {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.LessOrEqual(t, r.Recovery.Attempts, bound, "validate's bound holds")
	}
	out := outageAt.Load()
	require.NotNil(t, out)
	before := out.Sub(start)
	bp.mu.Lock()
	okBefore, after10 := 0, 0
	for _, at := range bp.okAt {
		if at.Before(*out) {
			okBefore++
		} else if at.Before(out.Add(10 * time.Second)) {
			after10++
		}
	}
	bp.mu.Unlock()
	sent := a.ok.Load() + a.tooMany.Load() + bp.ok.Load() + bp.tooMany.Load()
	t.Logf("%d records in %s; before the outage (%s): %.1f ok/s over both, 429s %d of %d calls (%.1f %%); 503s %d; after it, deployment 2: %d ok in 10 s (%.1f/s of its %d/s)",
		records, elapsed.Round(time.Millisecond), before.Round(time.Millisecond),
		float64(a.ok.Load()+int64(okBefore))/before.Seconds(), a.tooMany.Load()+bp.tooMany.Load(), sent,
		100*float64(a.tooMany.Load()+bp.tooMany.Load())/float64(sent), a.failed.Load(), after10, float64(after10)/10, rate)
}
