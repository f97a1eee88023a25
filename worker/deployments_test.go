package worker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/ratelimit/ratelimittest"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// deploymentsWorkflow is an action on a provider of two loopback
// deployments.
func deploymentsWorkflow(a, b *providertest.Server) string {
	return fmt.Sprintf(`
providers:
  oa:
    kind: openai
    timeout: 5s
    deployments:
      - {base_url: %s/v1}
      - {base_url: %s/v1, limits: {concurrency: 8}}
actions:
  - name: extract
    provider: oa
    model: gpt-4.1-mini
    prompt: "Title of {{ .text }}"
    retry: {max_attempts: 3, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 10ms}}
`, a.URL, b.URL)
}

// callMetrics counts calls by "provider/deployment" (CallAt) and by
// provider (Call).
type callMetrics struct {
	mu    sync.Mutex
	calls map[string]int
}

func (m *callMetrics) Record(string, string, string, retry.Class) {}
func (m *callMetrics) Delivery(string)                            {}
func (m *callMetrics) InFlight(int)                               {}
func (m *callMetrics) Call(p, _ string, _ retry.Class, _ time.Duration, _ provider.Usage) {
	m.CallAt(p, "", "", "", 0, provider.Usage{})
}

func (m *callMetrics) CallAt(p, dep, _ string, _ retry.Class, _ time.Duration, _ provider.Usage) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[p+"/"+dep]++
}

// Two healthy deployments share the calls; each result names its own, and
// the metrics label each call with the provider and the deployment.
func TestDeploymentsSpreadCalls(t *testing.T) {
	t.Parallel()
	const records = 40
	var ac, bc atomic.Int64
	a := counted(t, &ac, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4.1-mini", "ok", 1, 1)})
	bsrv := counted(t, &bc, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4.1-mini", "ok", 1, 1)})
	b := testenv.Broker(t)
	m := &callMetrics{}
	_, p, results := expectJob(t, b, deploymentsWorkflow(a, bsrv), records, worker.Config{Concurrency: 4, Metrics: m})
	require.EqualValues(t, records, p.OK)
	require.GreaterOrEqual(t, ac.Load(), int64(records/4), "deployment 1 takes its share")
	require.GreaterOrEqual(t, bc.Load(), int64(records/4), "deployment 2 takes its share")
	by := map[string]int{}
	for _, r := range results {
		require.Equal(t, "oa", r.Provider)
		by[r.Deployment]++
	}
	require.EqualValues(t, map[string]int{"oa-1": int(ac.Load()), "oa-2": int(bc.Load())}, by)
	m.mu.Lock()
	defer m.mu.Unlock()
	require.Equal(t, map[string]int{"oa/oa-1": int(ac.Load()), "oa/oa-2": int(bc.Load())}, m.calls)
}

// One deployment answers 503 to everything: once most of its answers are
// failures (ratelimit.Room.Failing) it gets nothing more while the other
// has room, as once its circuit is open; every record ends ok (0 failed,
// one result a record) within validate's bound, from the healthy one.
func TestDeploymentOutageMovesToTheOther(t *testing.T) {
	t.Parallel()
	const records = 40
	var ac, bc atomic.Int64
	down := counted(t, &ac, providertest.Reply{Status: 503, Body: providertest.OpenAIError("Service Unavailable", "server_error", "")})
	up := counted(t, &bc, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4.1-mini", "ok", 1, 1)})
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, deploymentsWorkflow(down, up))
	bound := wf.Actions[0].Bound(wf.Providers["oa"]).Calls
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, records), dispatcher.Options{})
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 4, LimitsConfig: ratelimit.Config{WaitMax: 50 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{MinCalls: 4, Cooldown: time.Minute}}})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	results := testenv.Results(t, b, job)
	require.EqualValues(t, records, p.OK, "0 failed")
	require.Len(t, results, records, "one result a record")
	calls := 0
	for id, r := range results {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, "oa-2", r.Deployment, "the healthy deployment answered")
		require.LessOrEqual(t, r.Recovery.Attempts, bound)
		require.LessOrEqual(t, r.Recovery.Attempts, 2, "a retry goes to the other deployment, not back to the one that failed it")
		calls += r.Recovery.Attempts
	}
	require.EqualValues(t, records, bc.Load())
	require.EqualValues(t, calls, ac.Load()+bc.Load(), "every call in a record's attempts")
	t.Logf("calls: %d to the failing deployment, %d to the healthy one", ac.Load(), bc.Load())
	require.Less(t, ac.Load(), int64(records/4), "the failing deployment was spared")
	// Each deployment has a limiter of its own, under its name: what
	// `jetpool limits` and the metrics show.
	st := map[string]ratelimit.Status{}
	for _, l := range pool.Limits().Limiters() {
		s := l.Status()
		st[s.Provider] = s
	}
	require.EqualValues(t, ac.Load(), st["oa-1"].Faults, "its 503s are its own limiter's")
	require.Zero(t, st["oa-2"].Faults)
	require.Equal(t, "oa", st["oa-1"].Of, "a deployment's limiter names its provider")
	require.Equal(t, ratelimit.CircuitClosed, st["oa-2"].Circuit)
	require.NotContains(t, st, "oa", "no call goes to the provider itself")
}

// embedder is an OpenAI /embeddings endpoint whose vectors say which
// server made them ([mark, 1] for each input).
func embedder(t *testing.T, mark float32) *providertest.Server {
	return providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input []string `json:"input"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		vecs := make([][]float32, len(req.Input))
		for i := range vecs {
			vecs[i] = []float32{mark, 1}
		}
		providertest.Reply{Status: 200, Body: providertest.OpenAIEmbeddings("text-embedding-3-small", vecs, 2*len(vecs))}.ServeHTTP(w, r)
	}))
}

// An embed action's requests spread across the provider's deployments as
// chat calls do, each with its own key, sent only to the host it is bound
// to (JETPOOL_KEY_HOSTS); each result names the deployment that made its
// vector.
func TestDeploymentsSpreadEmbeddings(t *testing.T) {
	t.Setenv("EMBED_DEP_KEY_A", "sk-dep-a")
	t.Setenv("EMBED_DEP_KEY_B", "sk-dep-b")
	const records = 40
	a, c := embedder(t, 1), embedder(t, 2)
	trust, err := provider.LoadTrust(func(k string) (string, bool) {
		if k == provider.EnvKeyHosts {
			return "EMBED_DEP_KEY_A=" + strings.TrimPrefix(a.URL, "http://") + ";EMBED_DEP_KEY_B=" + strings.TrimPrefix(c.URL, "http://"), true
		}
		return "", false
	})
	require.NoError(t, err)
	b := testenv.Broker(t)
	_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  oa:
    kind: openai
    timeout: 5s
    deployments:
      - {name: east, base_url: %s/v1, api_key_env: EMBED_DEP_KEY_A}
      - {name: west, base_url: %s/v1, api_key_env: EMBED_DEP_KEY_B}
actions:
  - name: vec
    kind: embed
    provider: oa
    model: text-embedding-3-small
    input: "{{ .text }}"
    embed: {batch_size: 4, max_wait: 20ms}
`, a.URL, c.URL), records, worker.Config{Concurrency: 8, Trust: trust})
	require.EqualValues(t, records, p.OK)
	require.NotEmpty(t, a.Requests(), "east takes requests")
	require.NotEmpty(t, c.Requests(), "west takes requests")
	for srv, key := range map[*providertest.Server]string{a: "sk-dep-a", c: "sk-dep-b"} {
		for _, r := range srv.Requests() {
			require.Equal(t, "Bearer "+key, r.Header.Get("Authorization"), "each deployment's own key")
		}
	}
	by := map[string]int{}
	for id, r := range results {
		require.Equal(t, "oa", r.Provider, id)
		mark := map[string]float64{"east": 1, "west": 2}[r.Deployment]
		require.Equal(t, []any{mark, 1.0}, r.Output, "%s: the vector of the deployment it names (%q)", id, r.Deployment)
		by[r.Deployment]++
	}
	require.Positive(t, by["east"])
	require.Positive(t, by["west"])
}

// Two deployments without configured limits, one allowing 6 requests a
// second and the other 20 (each a token bucket answering 429 past it):
// their limiters learn those rates from the 429s, and calls go where there
// is room now, so the slow one answers about its rate's share of the
// records (under a third), not every other call (as rpm weights, alike
// without rpm, would send it) waiting for its pace. TestSpreadByRoom has
// the rule, TestRoom the limiter's side of it.
func TestDeploymentsLearnedPaceTakesASmallerShare(t *testing.T) {
	t.Parallel()
	const records = 150
	slow, fast := ratelimittest.New(6, 20*time.Millisecond), ratelimittest.New(20, 20*time.Millisecond)
	t.Cleanup(slow.Close)
	t.Cleanup(fast.Close)
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  oa:
    kind: openai
    timeout: 5s
    deployments:
      - {name: slow, base_url: %s}
      - {name: fast, base_url: %s}
actions:
  - name: extract
    provider: oa
    model: gpt-4o-mini
    prompt: "Title of {{ .text }}"
    retry: {max_attempts: 10, backoff: 10ms}
`, slow.BaseURL(), fast.BaseURL()))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, records), dispatcher.Options{})
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 8})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 2*time.Minute)
	require.EqualValues(t, records, p.OK)
	by := map[string]int{}
	for _, r := range testenv.Results(t, b, job) {
		by[r.Deployment]++
	}
	ss, fs := slow.Stats(), fast.Stats()
	paces, waited := map[string]float64{}, map[string]int64{}
	for _, l := range pool.Limits().Limiters() {
		st := l.Status()
		paces[st.Provider], waited[st.Provider] = st.Pace, st.Waited
	}
	t.Logf("answered: %v; slow served %d (%d 429s), fast %d (%d 429s); learned paces %v; waited %v",
		by, ss.Served, ss.Limited, fs.Served, fs.Limited, paces, waited)
	require.Equal(t, records, by["slow"]+by["fast"])
	require.Less(t, by["slow"], by["fast"], "the slow deployment answers a smaller share: %v", by)
	require.Less(t, by["slow"], records/3, "about its rate's share: %v", by)
}
