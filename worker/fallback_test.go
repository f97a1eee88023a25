package worker_test

import (
	"fmt"
	"net/http"
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
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// counted serves h and counts its requests.
func counted(t *testing.T, n *atomic.Int64, h http.Handler) *providertest.Server {
	return providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	}))
}

// fallbackWorkflow is an action on an OpenAI-compatible primary with an
// Anthropic fallback, each at its own price (a dollar, or ten, a token in,
// twice that out).
func fallbackWorkflow(primary, backup *providertest.Server, on string, breaker string) string {
	return fmt.Sprintf(`
providers:
  primary: {kind: openai, base_url: %s, timeout: 5s%s}
  backup: {kind: anthropic, base_url: %s, timeout: 5s}
actions:
  - name: extract
    provider: primary
    model: gpt-4.1-mini
    prompt: "Title of {{ .text }}"
    price: {input_per_mtok: 1000000, output_per_mtok: 2000000}
    retry: {max_attempts: 2, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 10ms}}
    fallbacks:
      - {provider: backup, model: claude-haiku-4-5, on: %s, price: {input_per_mtok: 10000000, output_per_mtok: 20000000}}
`, providertest.Config(provider.KindOpenAI, primary).BaseURL, breaker, providertest.Config(provider.KindAnthropic, backup).BaseURL, on)
}

// The primary is down (every call a 503, then its circuit open): every
// record ends ok from the fallback, which the result names, with one
// result a record, the primary's failed calls in its attempts, and no
// record over validate's bound. Once the circuit is open, records move
// without calling the primary.
func TestFallbackKeepsJobAliveThroughOutage(t *testing.T) {
	t.Parallel()
	const records = 40
	var pc, bc atomic.Int64
	primary := counted(t, &pc, providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded", "server_error", "")})
	backup := counted(t, &bc, providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("claude-haiku-4-5", `ok`, 3, 2)})
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fallbackWorkflow(primary, backup, "outage", ", limits: {breaker: {min_calls: 4}}"))
	bound := wf.Actions[0].Bound(wf.Providers["primary"]).Calls
	require.Equal(t, 2*2*2, bound, "2 attempts × 2 rounds (the first, 1 fallback) × 2 deliveries")
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, records), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 4, LimitsConfig: ratelimit.Config{WaitMax: 50 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{MinCalls: 4, Cooldown: time.Minute}}})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	results := testenv.Results(t, b, job)
	require.EqualValues(t, records, p.OK, "0 lost, 0 failed")
	require.Len(t, results, records, "one result a record")
	skipped, attempts := 0, 0
	for id, r := range results {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, "backup", r.Provider, "the result names the provider that answered")
		require.Equal(t, "claude-haiku-4-5", r.Model)
		require.Len(t, r.Recovery.Routes, 1, id)
		rt := r.Recovery.Routes[0]
		require.Equal(t, broker.Route{After: rt.After, From: "primary/gpt-4.1-mini", To: "backup/claude-haiku-4-5", On: workflow.FallbackOutage}, rt)
		require.LessOrEqual(t, r.Recovery.Attempts, bound, "validate's bound holds")
		attempts += r.Recovery.Attempts
		if rt.After == 0 {
			skipped++
			require.Equal(t, 1, r.Recovery.Attempts, "an open circuit: the fallback's call alone")
		}
		require.NotNil(t, r.Cost)
		require.InDelta(t, 10*3+20*2, *r.Cost, 1e-9, "billed at the fallback's price; the 503s cost nothing")
	}
	require.EqualValues(t, records, bc.Load(), "one fallback call a record")
	require.EqualValues(t, attempts, pc.Load()+bc.Load(), "every call is in a record's attempts")
	require.Positive(t, skipped, "records moved past the open circuit without calling the primary")
	require.Less(t, pc.Load(), int64(records), "the open circuit spared the primary")
}

// The primary model refuses (content_filter, which the fallback lists):
// the record ends ok from the fallback, with both calls in its accounting
// and its cost, each at its model's price.
func TestFallbackOnRefusal(t *testing.T) {
	t.Parallel()
	const records = 3
	var pc, bc atomic.Int64
	primary := counted(t, &pc, providertest.Reply{Status: 200, Body: providertest.OpenAIRefusal("gpt-4.1-mini", refusalText, 12, 5)})
	backup := counted(t, &bc, providertest.Reply{Status: 200, Body: providertest.AnthropicMessage("claude-haiku-4-5", `Dune`, 3, 2)})
	b := testenv.Broker(t)
	_, p, results := expectJob(t, b, fallbackWorkflow(primary, backup, "[outage, content_filter]", ""), records, worker.Config{})
	require.EqualValues(t, records, p.OK)
	require.EqualValues(t, records, pc.Load(), "one refused call a record: a refusal is not retried")
	require.EqualValues(t, records, bc.Load())
	for id, r := range results {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, "Dune", r.Output)
		require.Equal(t, "backup", r.Provider)
		require.Equal(t, 2, r.Recovery.Attempts, "both calls in its accounting")
		require.Len(t, r.Recovery.Failures, 1)
		require.Contains(t, r.Recovery.Failures[0].Error, "then fell back to backup/claude-haiku-4-5")
		require.Equal(t, []broker.Route{{After: 1, From: "primary/gpt-4.1-mini", To: "backup/claude-haiku-4-5", On: "content_filter"}}, r.Recovery.Routes)
		require.Equal(t, broker.Usage{InputTokens: 15, OutputTokens: 7}, r.Usage)
		require.NotNil(t, r.Cost)
		require.InDelta(t, (12+2*5)+(10*3+20*2), *r.Cost, 1e-9, "each call at its model's price")
	}
}

// A fallback's key binds as the action's does: a worker whose operator
// bound the fallback's key to no host refuses the whole job up front, and
// calls neither the primary nor the fallback.
func TestFallbackKeyUnboundRefusesJob(t *testing.T) {
	t.Parallel()
	var pc, bc atomic.Int64
	primary := counted(t, &pc, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "ok", 1, 1)})
	backup := counted(t, &bc, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m2", "ok", 1, 1)})
	b := testenv.Broker(t)
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 2, NewProvider: testenv.NewCounter().New})
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  primary: {kind: openai, base_url: %s/v1}
  backup: {kind: openai, base_url: %s/v1, api_key_env: HOME}
actions:
  - name: ask
    provider: primary
    model: m
    prompt: "{{ .text }}"
    fallbacks: [{provider: backup, model: m2}]
`, primary.URL, backup.URL))
	testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{JobID: "fb"})
	testenv.Eventually(t, 10*time.Second, func() bool { return pool.Unservable()["fb"] != "" }, "refused")
	require.Contains(t, pool.Unservable()["fb"], "provider backup: key variable HOME is bound to no host on this worker")
	require.Zero(t, pc.Load()+bc.Load(), "nothing was sent")
}
