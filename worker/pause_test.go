package worker_test

import (
	"context"
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
	"github.com/jetpool/jetpool/steer"
	"github.com/jetpool/jetpool/worker"
)

// failsFirst answers 503 to each record's first n calls, then an answer;
// it counts every call by record (the prompt names it).
type failsFirst struct {
	n      int
	record *regexp.Regexp
	mu     sync.Mutex
	calls  map[string]int
}

func (f *failsFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := recordOf(r, f.record) // worker/property_test.go
	f.mu.Lock()
	f.calls[id]++
	n := f.calls[id]
	f.mu.Unlock()
	if n <= f.n {
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded or not ready yet.", "server_error", "")}.ServeHTTP(w, r)
		return
	}
	providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "done "+id, 3, 1)}.ServeHTTP(w, r)
}

func (f *failsFirst) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		n += c
	}
	return n
}

func (f *failsFirst) of(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[id]
}

// A job paused mid-run, its records between 503s and their backoffs (some
// off their slots), makes no call for the whole pause — by `jetpool job
// pause` or by an operator's `nats consumer pause` — and after the resume
// every record finishes with one result, its calls within validate's bound
// and its attempts the provider's count of its calls: none paid twice, none
// lost or added by the hand-back.
func TestPauseHoldsEveryCall(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		pause, resume func(ctx context.Context, b *broker.Broker, job string) error
	}{
		{"jetpool job pause", func(ctx context.Context, b *broker.Broker, job string) error {
			_, err := steer.Pause(ctx, b, job, time.Time{})
			return err
		}, func(ctx context.Context, b *broker.Broker, job string) error {
			_, err := steer.Resume(ctx, b, job)
			return err
		}},
		{"nats consumer pause", func(ctx context.Context, b *broker.Broker, job string) error {
			// What the nats CLI sends; the workers' word is then awaited
			// as jetpool job pause awaits it.
			if _, err := b.JS.PauseConsumer(ctx, broker.StreamWork, broker.ConsumerName(job), time.Now().Add(time.Hour)); err != nil {
				return err
			}
			_, calling, err := worker.AwaitStopped(ctx, b, job)
			if err == nil && len(calling) > 0 {
				err = fmt.Errorf("still calling: %v", calling)
			}
			return err
		}, func(ctx context.Context, b *broker.Broker, job string) error {
			_, err := b.JS.ResumeConsumer(ctx, broker.StreamWork, broker.ConsumerName(job))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testPauseHolds(t, tc.pause, tc.resume)
		})
	}
}

func testPauseHolds(t *testing.T, pause, resume func(ctx context.Context, b *broker.Broker, job string) error) {
	const n, fails = 16, 3
	ctx := context.Background()
	srv := &failsFirst{n: fails, record: regexp.MustCompile(`record (\d+)`), calls: map[string]int{}}
	url := providertest.NewServer(t, srv).URL + "/v1"
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %q, timeout: 5s, limits: {adaptive: false, breaker: {min_calls: 100000}}}
actions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: {max_attempts: 4, backoff: 150ms, redeliver: {max_deliveries: 2, backoff: 50ms}}
`, url))
	job := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{}).Job.ID
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 4})
	testenv.Eventually(t, 30*time.Second, func() bool { return srv.total() >= n/2 }, "records between their retries")

	require.NoError(t, pause(ctx, b, job))
	made := pool.Calls() // every call the worker started before the pause
	require.True(t, slices.Contains(pool.Snapshot().Paused, job), "the worker sees the pause")
	// Each record it held reaches its next call, finds the job paused and
	// hands its delivery back: then it holds none of them.
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := pool.Snapshot()
		return s.Holding[job] == 0 && s.InFlight[job] == 0 && s.ReadAhead[job] == 0
	}, "the records delivered before the pause handed back")
	atQuiet := srv.total()
	require.Equal(t, int(made), atQuiet, "the provider got every call started before the pause, and no other")
	require.Less(t, atQuiet, n*(fails+1), "the pause came mid-run")
	// A window longer than any backoff of the policy: a record resting
	// off its slot, or a session between retries, would call in it.
	window := time.NewTimer(2 * time.Second)
	<-window.C
	require.Equal(t, atQuiet, srv.total(), "no call while paused")
	require.Equal(t, made, pool.Calls())

	require.NoError(t, resume(ctx, b, job))
	j, p := testenv.WaitFinished(t, b, job, 60*time.Second)
	require.EqualValues(t, n, p.OK, "%+v", p)
	results := testenv.Results(t, b, j)
	require.Len(t, results, n, "one result a record")
	bound := wf.Actions[0].Bound(wf.Providers["p"]).Calls
	handBacks := 0
	for id, r := range results {
		calls := srv.of(id)
		require.Equal(t, fails+1, calls, "%s: its script, no call paid twice or lost", id)
		require.LessOrEqual(t, calls, bound, id)
		require.Equal(t, calls, r.Recovery.Attempts, "%s: the result counts the provider's calls: %+v", id, r.Recovery)
		require.Equal(t, 1, r.Recovery.Deliveries, "%s: a hand-back spends no delivery", id)
		handBacks += r.Recovery.HandBacks
	}
	require.Positive(t, handBacks, "the pause handed deliveries back")
}
