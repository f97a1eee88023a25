package worker_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// callsByRecord is a provider that always answers 503, counting the calls
// of each record (its prompt names it).
type callsByRecord struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callsByRecord) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	if len(body.Messages) > 0 {
		c.n[body.Messages[len(body.Messages)-1].Content]++
	}
	c.mu.Unlock()
	providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded or not ready yet.", "server_error", "")}.ServeHTTP(w, r)
}

func (c *callsByRecord) total() int {
	n := 0
	for _, v := range c.counts() {
		n += v
	}
	return n
}

func (c *callsByRecord) counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.n))
	for k, v := range c.n {
		out[k] = v
	}
	return out
}

// Waiting for an open circuit is not an attempt: records of an always-503
// provider whose circuit opens mid-budget each make their whole budget of
// calls (max_attempts × max_deliveries), parked while the circuit is open,
// and end exhausted after exactly that many, never earlier.
func TestCircuitWaitSpendsNoBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		records, attempts, deliveries, minCalls int
		ratio                                   float64
	}{
		{records: 5, attempts: 3, deliveries: 2, minCalls: 4, ratio: 0.5},
		{records: 3, attempts: 2, deliveries: 3, minCalls: 3, ratio: 0.5},
		{records: 3, attempts: 4, deliveries: 1, minCalls: 3, ratio: 0.9},
		{records: 2, attempts: 1, deliveries: 4, minCalls: 2, ratio: 1},
		{records: 6, attempts: 2, deliveries: 2, minCalls: 6, ratio: 0.3},
	} {
		t.Run(fmt.Sprintf("%d records, %d×%d, min_calls %d, ratio %g", tc.records, tc.attempts, tc.deliveries, tc.minCalls, tc.ratio), func(t *testing.T) {
			t.Parallel()
			h := &callsByRecord{}
			b, job, results := circuitJob(t, h, tc.records, fmt.Sprintf("{min_calls: %d, failure_ratio: %g, cooldown: 100ms, cooldown_max: 200ms}", tc.minCalls, tc.ratio),
				fmt.Sprintf("{max_attempts: %d, backoff: 10ms, redeliver: {max_deliveries: %d, backoff: 10ms}}", tc.attempts, tc.deliveries))
			budget := tc.attempts * tc.deliveries
			calls := h.counts()
			parked := 0
			for id, r := range results {
				require.Equal(t, budget, calls["record "+id[1:]], "%s: its whole budget of calls, no fewer (%s)", id, r.Error.Message)
				require.Equal(t, string(retry.ReasonExhausted), r.Reason, id)
				require.Equal(t, budget, r.Recovery.Attempts, id)
				require.Equal(t, tc.deliveries, r.Recovery.Deliveries, id)
				require.Contains(t, r.Error.Message, fmt.Sprintf("failed after %d attempts (%s)", budget, plural(tc.deliveries, "delivery", "deliveries")), id)
				parked += r.Recovery.Waits
			}
			require.Positive(t, parked, "the circuit opened and parked records")
			for _, e := range deadLetters(t, b, job.ID) {
				require.Equal(t, budget, e.Attempts)
			}
		})
	}
}

// A circuit that stays open past max_wait ends its records: the
// diagnostic and the dead letter say that the circuit did, and how much of
// the record's budget was left.
func TestCircuitPastMaxWaitSaysSo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ records, attempts, deliveries, minCalls int }{
		{records: 5, attempts: 3, deliveries: 2, minCalls: 4},
		{records: 3, attempts: 2, deliveries: 3, minCalls: 2},
	} {
		t.Run(fmt.Sprintf("%d records, %d×%d", tc.records, tc.attempts, tc.deliveries), func(t *testing.T) {
			t.Parallel()
			h := &callsByRecord{}
			budget := tc.attempts * tc.deliveries
			// The circuit stays open for an hour, max_wait is 1 s: a record
			// that meets it is not parked for longer than max_wait allows.
			b, job, results := circuitJob(t, h, tc.records, fmt.Sprintf("{min_calls: %d, cooldown: 1h}", tc.minCalls),
				fmt.Sprintf("{max_attempts: %d, backoff: 10ms, max_wait: 1s, redeliver: {max_deliveries: %d, backoff: 10ms}}", tc.attempts, tc.deliveries))
			calls := h.counts()
			for id, r := range results {
				made := calls["record "+id[1:]]
				require.Less(t, made, budget, id)
				require.Equal(t, made, r.Recovery.Attempts, id)
				require.Equal(t, string(retry.ReasonMaxWait), r.Reason, id)
				require.Equal(t, string(retry.ClassServer), r.Error.Class, id)
				require.Contains(t, r.Error.Message, "for provider down: its circuit breaker was open, and takes no calls for another", id)
				require.Contains(t, r.Error.Message, "past max_wait 1s", id)
				if made > 0 {
					require.Contains(t, r.Error.Message, fmt.Sprintf("%d of the %d calls its retry budget allows made before", made, budget), id)
				}
			}
			dead := deadLetters(t, b, job.ID)
			require.Len(t, dead, tc.records)
			for _, e := range dead {
				require.Equal(t, retry.ReasonMaxWait, e.Reason)
				require.Contains(t, e.Error, "its circuit breaker was open")
			}
		})
	}
}

// Records waiting for a circuit open past their max_wait come back to be
// ended for it, instead of waiting at the server until the probe (an hour
// here): a record nak'd for its redelivery just before the circuit opened,
// and a job dispatched while it is open.
func TestCircuitOpenPastMaxWaitStillPulled(t *testing.T) {
	t.Parallel()
	h := &callsByRecord{}
	srv := providertest.NewServer(t, h)
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  down: {kind: openai, base_url: %q, timeout: 5s, limits: {adaptive: false, breaker: {min_calls: 2, cooldown: 1h}}}
actions:
  - name: act
    provider: down
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    retry: {max_attempts: 1, max_wait: 1s, redeliver: {max_deliveries: 2, backoff: 500ms}}
`, srv.URL+"/v1"))
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 16, LimitsConfig: ratelimit.Config{WaitMax: 50 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{ProbeTimeout: 5 * time.Second}}})
	// Each record's first delivery makes its one call and is nak'd for its
	// second; the second failed call opens the circuit for an hour.
	opens := testenv.Dispatch(t, b, wf, testenv.Records(t, 2), dispatcher.Options{JobID: "opens"})
	_, p := testenv.WaitFinished(t, b, opens.Job.ID, 30*time.Second)
	require.EqualValues(t, 2, p.Failed)
	require.True(t, slices.ContainsFunc(pool.Limits().Limiters(), (*ratelimit.Limiter).CircuitOpen), "the circuit is open")
	made := h.total()
	waits := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{JobID: "waits"})
	job, p := testenv.WaitFinished(t, b, waits.Job.ID, 30*time.Second)
	require.EqualValues(t, 3, p.Failed)
	results := testenv.Results(t, b, job)
	require.Len(t, results, 3)
	for id, r := range results {
		require.Equal(t, string(retry.ReasonMaxWait), r.Reason, id)
		require.Zero(t, r.Recovery.Attempts, id)
		require.Contains(t, r.Error.Message, "past max_wait 1s", id)
		require.Contains(t, r.Error.Message, "no call was made", id)
	}
	require.Equal(t, made, h.total(), "the second job made no call")
}

// circuitJob runs records through one action on h behind a circuit
// breaker, and returns the job's final results.
func circuitJob(t *testing.T, h http.Handler, records int, breaker, retryBlock string) (*broker.Broker, *broker.Job, map[string]*broker.Result) {
	t.Helper()
	srv := providertest.NewServer(t, h)
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  down: {kind: openai, base_url: %q, timeout: 5s, limits: {adaptive: false, breaker: %s}}
actions:
  - name: act
    provider: down
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    retry: %s
`, srv.URL+"/v1", breaker, retryBlock))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, records), dispatcher.Options{})
	// A hold limit below the breaker's cooldown: waiting records are
	// parked, as they are in production (10 s against 15 s).
	testenv.Pool(t, b, worker.Config{Concurrency: 16, LimitsConfig: ratelimit.Config{WaitMax: 50 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{ProbeTimeout: 5 * time.Second}}})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	require.EqualValues(t, records, p.Failed)
	return b, job, testenv.Results(t, b, job)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// Over random scripts behind a circuit breaker that opens and closes
// mid-budget (a hold limit shorter than its cooldown: waiting records are
// parked), with and without repairs, no record makes more calls than
// validate's bound, and every record ends with one final result counting
// every call.
func TestCircuitCallsWithinBound(t *testing.T) {
	t.Parallel()
	for i, tc := range []struct{ retry, expect string }{
		{retry: `{max_attempts: 3, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 20ms}}`},
		{retry: `{max_attempts: 2, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 20ms}}`, expect: `{format: json, repair: {max_attempts: 1}}`},
	} {
		t.Run(fmt.Sprintf("policy %d", i), func(t *testing.T) {
			t.Parallel()
			const n = 20
			s := &scripted{seed: uint64(i) + 40, calls: map[string]int{}, hang: time.Second, record: regexp.MustCompile(`record (\d+)`)}
			srv := providertest.NewServer(t, s)
			b := testenv.Broker(t, testenv.Options{AckWait: 3 * time.Second})
			expect := ""
			if tc.expect != "" {
				expect = "expect: " + tc.expect
			}
			wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %q, timeout: 300ms, limits: {adaptive: false, breaker: {min_calls: 4, failure_ratio: 0.3, cooldown: 100ms, cooldown_max: 200ms}}}
actions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: %s
    %s
`, srv.URL+"/v1", tc.retry, expect))
			res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
			testenv.Pool(t, b, worker.Config{Concurrency: 8, LimitsConfig: ratelimit.Config{WaitMax: 50 * time.Millisecond,
				Breaker: ratelimit.BreakerConfig{ProbeTimeout: 5 * time.Second}}})
			job, p := testenv.WaitFinished(t, b, res.Job.ID, 90*time.Second)
			bound := wf.Actions[0].Bound(wf.Providers["p"]).Calls
			results := testenv.Results(t, b, job)
			require.Len(t, results, n, "one final result a record")
			s.mu.Lock()
			defer s.mu.Unlock()
			waits := 0
			for id, r := range results {
				calls := s.calls[id]
				require.LessOrEqual(t, calls, bound, "%s: %d calls, validate's bound is %d", id, calls, bound)
				countsEveryCall(t, id, calls, r.Recovery)
				waits += r.Recovery.Waits
			}
			t.Logf("%d ok, %d failed, %d parks (bound %d)", p.OK, p.Failed, waits, bound)
		})
	}
}
