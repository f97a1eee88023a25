package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
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
	"github.com/jetpool/jetpool/worker"
)

// limitWorkflow is one openai action against baseURL with the given
// provider limits ("" for none) and retry block.
func limitWorkflow(t *testing.T, baseURL, limits, retryBlock string) string {
	t.Helper()
	if limits != "" {
		limits = ", limits: " + limits
	}
	return fmt.Sprintf(`
providers:
  lim: {kind: openai, base_url: %q, timeout: 10s%s}
actions:
  - name: act
    provider: lim
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: %s
`, baseURL, limits, retryBlock)
}

func registry(t *testing.T, b *broker.Broker, cfg ratelimit.Config) *ratelimit.Registry {
	t.Helper()
	store, err := ratelimit.NewKVStore(context.Background(), b)
	require.NoError(t, err)
	r, err := ratelimit.NewRegistry(context.Background(), store, cfg)
	require.NoError(t, err)
	t.Cleanup(r.Close)
	return r
}

// arrivals is a handler that records when each call arrived and answers
// with next(i), i being the 1-based call number.
type arrivals struct {
	mu    sync.Mutex
	at    []time.Time
	codes []int
	next  func(i int) providertest.Reply
}

func (a *arrivals) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.at = append(a.at, time.Now())
	i := len(a.at)
	rp := a.next(i)
	a.codes = append(a.codes, rp.Status)
	a.mu.Unlock()
	rp.ServeHTTP(w, r)
}

func (a *arrivals) snapshot() ([]time.Time, []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.at...), append([]int(nil), a.codes...)
}

// A 429 whose headers say the bucket is empty, seen by one pool, cools
// down both pools (separate connections, as two processes) until the
// reset. The 429 is an attempt of its record, which waits it out and
// succeeds on its second attempt; every other record makes one call.
func TestSharedCooldownAcrossPools(t *testing.T) {
	t.Parallel()
	const retryAfter = 2 * time.Second
	h := &arrivals{next: func(i int) providertest.Reply {
		if i == 5 {
			return providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", "2",
				"X-Ratelimit-Limit-Requests", "500", "X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "2s"),
				Body: providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")}
		}
		return providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 5, 1)}
	}}
	srv := providertest.NewServer(t, h)
	b := testenv.Broker(t)
	b2 := testenv.Connect(t, b)
	wf := testenv.Workflow(t, limitWorkflow(t, srv.URL+"/v1", "", `{max_attempts: 2, backoff: 10ms, budget: 5s, redeliver: {max_deliveries: 1}}`))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 30), dispatcher.Options{})
	p1 := testenv.Pool(t, b, worker.Config{Concurrency: 2})
	p2 := testenv.Pool(t, b2, worker.Config{Concurrency: 2})
	job, prog := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 30, prog.OK)
	require.Positive(t, p1.Calls())
	require.Positive(t, p2.Calls())

	at, codes := h.snapshot()
	require.Equal(t, 429, codes[4])
	require.Len(t, at, 31, "30 records, one of them called twice")
	limitedAt := at[4]
	var inside []time.Duration
	for _, t2 := range at[5:] {
		if d := t2.Sub(limitedAt); d < retryAfter-50*time.Millisecond {
			inside = append(inside, d)
		}
	}
	// Calls permitted before the cooldown was known land inside it: the
	// other slots' in flight when the 429 came back, and the other pool's
	// until the shared state reached it (longer on a busy host). Without a
	// shared cooldown the other 25 records would all go in those 2 s.
	require.LessOrEqualf(t, len(inside), 10, "calls inside the shared cooldown, after the 429: %v", inside)
	limited := 0
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, 1, r.Recovery.Deliveries, id)
		if len(r.Recovery.Failures) == 0 {
			require.Equal(t, 1, r.Recovery.Attempts, id)
			continue
		}
		limited++
		require.Equal(t, 2, r.Recovery.Attempts, "the 429 is an attempt: %s", id)
		require.Contains(t, r.Recovery.Failures[0].Error, "RateLimitError")
	}
	require.Equal(t, 1, limited)
}

// A one-off 429 among successes (no headers saying the bucket is empty)
// holds only its own record, for at least its Retry-After; every other
// record goes on meanwhile.
func TestOneOff429WaitsAlone(t *testing.T) {
	t.Parallel()
	const retryAfter = 2 * time.Second
	h := &arrivals{next: func(i int) providertest.Reply {
		if i == 5 {
			return providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", "2"),
				Body: providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")}
		}
		return providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 5, 1),
			Header: providertest.Header("X-Ratelimit-Remaining-Requests", "400")}
	}}
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // the model's latency
		h.ServeHTTP(w, r)
	}))
	b := testenv.Broker(t)
	counter := testenv.NewCounter()
	var mu sync.Mutex
	calls := map[string][]time.Time{}
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		mu.Lock()
		calls[req.RecordID] = append(calls[req.RecordID], time.Now())
		mu.Unlock()
		return next()
	}
	wf := testenv.Workflow(t, limitWorkflow(t, srv.URL+"/v1", "", `{max_attempts: 2, backoff: 10ms, budget: 5s}`))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 60), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New})
	job, prog := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 60, prog.OK)

	at, codes := h.snapshot()
	require.Equal(t, 429, codes[4])
	inside := 0
	for _, t2 := range at[5:] {
		if d := t2.Sub(at[4]); d > 50*time.Millisecond && d < retryAfter-50*time.Millisecond {
			inside++
		}
	}
	require.Positive(t, inside, "other records were called during the one-off 429's Retry-After")
	limited := 0
	for id, r := range testenv.Results(t, b, job) {
		if len(r.Recovery.Failures) == 0 {
			require.Equal(t, 1, counter.Calls(id), id)
			continue
		}
		limited++
		require.Equal(t, 2, r.Recovery.Attempts, "the 429 is an attempt: %s", id)
		require.Equal(t, 2, counter.Calls(id), id)
		mu.Lock()
		require.GreaterOrEqual(t, calls[id][1].Sub(calls[id][0]), retryAfter, "its second call waited out its Retry-After")
		mu.Unlock()
	}
	require.Equal(t, 1, limited)
}

// The circuit opens when half of at least 3 calls failed, lets one probe
// through per cooldown (the cooldown doubling), and closes when the server
// recovers; every record then succeeds. One call slot: no call is in
// flight when the circuit opens, so the server's failures are the three
// that opened it, then the probes. A busy host only lengthens the gaps, so
// only their lower bounds are asserted (ratelimit's own test checks the
// schedule on a fake clock).
func TestBreakerOpensProbesCloses(t *testing.T) {
	t.Parallel()
	srv := ratelimittest.New(1000, 10*time.Millisecond)
	t.Cleanup(srv.Close)
	srv.SetFailing(true)
	b := testenv.Broker(t)
	const cooldown = 300 * time.Millisecond
	reg := registry(t, b, ratelimit.Config{Breaker: ratelimit.BreakerConfig{MinCalls: 3, FailureRatio: 0.5, Cooldown: cooldown}})
	wf := testenv.Workflow(t, limitWorkflow(t, srv.BaseURL(), "", `{max_attempts: 10, backoff: 10ms}`))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 4), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 1, Limits: reg})

	lim := func() ratelimit.Status {
		ls := reg.Limiters()
		if len(ls) == 0 {
			return ratelimit.Status{}
		}
		return ls[0].Status()
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return lim().Circuit == ratelimit.CircuitOpen }, "circuit never opened")
	// Two probes failed: the three calls that opened it, then two.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(srv.FailedAt()) >= 5 }, "no probes")
	f := srv.FailedAt()
	require.GreaterOrEqual(t, f[3].Sub(f[2]), cooldown, "the first probe waited out the cooldown: %v", f)
	require.GreaterOrEqual(t, f[4].Sub(f[3]), 2*cooldown, "the cooldown doubled after a failed probe: %v", f)
	require.NotEqual(t, ratelimit.CircuitClosed, lim().Circuit)
	failed := len(f)

	srv.SetFailing(false)
	_, prog := testenv.WaitFinished(t, b, res.Job.ID, 20*time.Second)
	require.EqualValues(t, 4, prog.OK)
	require.Equal(t, ratelimit.CircuitClosed, lim().Circuit)
	// A third probe may have failed between the look above and the recovery.
	require.LessOrEqual(t, srv.Stats().Failed, failed+1, "nothing more failed after the recovery")
}

// A limit far below the offered load, with a short AckWait: records wait
// in the limiter far longer than AckWait, and the heartbeats keep every
// delivery alive — none is redelivered, none is called twice.
func TestNoAckWaitExpiryWhileLimited(t *testing.T) {
	t.Parallel()
	srv := ratelimittest.New(100, 5*time.Millisecond)
	t.Cleanup(srv.Close)
	b := testenv.Broker(t, testenv.Options{AckWait: 2 * time.Second})
	wf := testenv.Workflow(t, limitWorkflow(t, srv.BaseURL(), "{rpm: 120}", `{max_attempts: 1}`))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 10), dispatcher.Options{})
	start := time.Now()
	testenv.Pool(t, b, worker.Config{Concurrency: 10})
	job, prog := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 10, prog.OK)
	require.Greater(t, time.Since(start), 4*time.Second, "the last record waited twice AckWait in the limiter")
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, 1, r.Recovery.Deliveries, id)
	}
	require.Equal(t, 10, srv.Stats().Calls(), "each record called once")
}

// Two pools on separate connections, with limits far below what they
// offer, stay together under the limits: no 429, never more calls in
// flight than limits.concurrency.
func TestTwoPoolsStayUnderLimit(t *testing.T) {
	t.Parallel()
	srv := ratelimittest.New(10, 50*time.Millisecond)
	t.Cleanup(srv.Close)
	b := testenv.Broker(t)
	b2 := testenv.Connect(t, b)
	wf := testenv.Workflow(t, limitWorkflow(t, srv.BaseURL(), "{rpm: 600, concurrency: 3}", `{max_attempts: 3}`))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 40), dispatcher.Options{})
	start := time.Now()
	p1 := testenv.Pool(t, b, worker.Config{Concurrency: 8})
	p2 := testenv.Pool(t, b2, worker.Config{Concurrency: 8})
	_, prog := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	elapsed := time.Since(start)
	require.EqualValues(t, 40, prog.OK)
	st := srv.Stats()
	require.Zero(t, st.Limited, "no 429")
	require.LessOrEqual(t, st.MaxInFlight, 3)
	require.Positive(t, p1.Calls())
	require.Positive(t, p2.Calls())
	// 40 calls at 9.7/s after a burst of 9: at least 3 s.
	require.Greater(t, elapsed, 3*time.Second)
	t.Logf("two pools: %d calls in %s, max %d in flight", st.Calls(), elapsed.Round(time.Millisecond), st.MaxInFlight)
}

// Two pools on separate connections, with no limits configured, against a
// provider allowing 20 requests/s (429 with Retry-After when its bucket is
// empty): they learn its rate between two congestion events and book their
// calls on one shared pace under it, so that after the first cohorts few
// calls meet a 429, every record ends with one result, and no record pays
// for more than its 429s and one success.
func TestTwoPoolsLearnTheRate(t *testing.T) {
	t.Parallel()
	srv := ratelimittest.New(20, 100*time.Millisecond)
	t.Cleanup(srv.Close)
	b := testenv.Broker(t)
	b2 := testenv.Connect(t, b)
	wf := testenv.Workflow(t, limitWorkflow(t, srv.BaseURL(), "", `{max_attempts: 5}`))
	const n = 300
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	p1 := testenv.Pool(t, b, worker.Config{Concurrency: 16})
	p2 := testenv.Pool(t, b2, worker.Config{Concurrency: 16})
	_, prog := testenv.WaitFinished(t, b, res.Job.ID, 2*time.Minute)
	require.EqualValues(t, n, prog.OK)
	require.Zero(t, prog.Failed)
	st := srv.Stats()
	require.Equal(t, n, st.Served, "one success a record")
	var paced []string
	for _, p := range []*worker.Pool{p1, p2} {
		for _, l := range p.Limits().Limiters() {
			if s := l.Status(); s.Pace > 0 {
				paced = append(paced, s.Window())
			}
		}
	}
	// A host too busy to reach the provider's rate meets too few 429s to
	// learn it from; then the first cohort's are all it met.
	if len(paced) == 0 {
		require.LessOrEqual(t, st.Limited, 32, "no pace learned, yet %d 429s", st.Limited)
	}
	require.LessOrEqual(t, st.Limited, n/8, "429s: %d of %d calls", st.Limited, st.Calls())
	t.Logf("two pools: %d calls, %d 429s; %s", st.Calls(), st.Limited, strings.Join(paced, " | "))
}
