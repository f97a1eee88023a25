package worker_test

import (
	"fmt"
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

// Two healthy deployments share the calls; each result names its own.
func TestDeploymentsSpreadCalls(t *testing.T) {
	t.Parallel()
	const records = 40
	var ac, bc atomic.Int64
	a := counted(t, &ac, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4.1-mini", "ok", 1, 1)})
	bsrv := counted(t, &bc, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4.1-mini", "ok", 1, 1)})
	b := testenv.Broker(t)
	_, p, results := expectJob(t, b, deploymentsWorkflow(a, bsrv), records, worker.Config{Concurrency: 4})
	require.EqualValues(t, records, p.OK)
	require.GreaterOrEqual(t, ac.Load(), int64(records/4), "deployment 1 takes its share")
	require.GreaterOrEqual(t, bc.Load(), int64(records/4), "deployment 2 takes its share")
	by := map[string]int{}
	for _, r := range results {
		require.Equal(t, "oa", r.Provider)
		by[r.Deployment]++
	}
	require.EqualValues(t, map[string]int{"oa-1": int(ac.Load()), "oa-2": int(bc.Load())}, by)
}

// One deployment answers 503 to everything: its circuit opens and it gets
// nothing more while the other has room; every record ends ok (0 failed,
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
	require.Less(t, ac.Load(), int64(records/2), "the open circuit spared the failing deployment")
	// Each deployment has a limiter of its own, under its name: what
	// `jetpool limits` and the metrics show.
	st := map[string]ratelimit.Status{}
	for _, l := range pool.Limits().Limiters() {
		s := l.Status()
		st[s.Provider] = s
	}
	require.Equal(t, ratelimit.CircuitOpen, st["oa-1"].Circuit)
	require.Equal(t, ratelimit.CircuitClosed, st["oa-2"].Circuit)
	require.NotContains(t, st, "oa", "no call goes to the provider itself")
}
