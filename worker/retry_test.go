package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// simJob runs n records through one action on a sim provider configured by
// simBlock, with the given retry block, and returns the finished job.
func simJob(t *testing.T, b *broker.Broker, n int, simBlock, retryBlock string, cfg worker.Config) (*broker.Job, broker.Progress, *testenv.Counter) {
	t.Helper()
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: %s}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
%s
`, simBlock, retryBlock))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	counter := testenv.NewCounter()
	if cfg.NewProvider == nil {
		cfg.NewProvider = counter.New
	}
	testenv.Pool(t, b, cfg)
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	return job, p, counter
}

func dlq(t *testing.T, b *broker.Broker, job string) []*deadletter.Entry {
	t.Helper()
	es, err := deadletter.List(context.Background(), b, deadletter.Filter{Job: job})
	require.NoError(t, err)
	return es
}

// A transient error that clears on the 2nd delivery succeeds with deliveries: 2.
func TestTransientClearsOnSecondDelivery(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, counter := simJob(t, b, 3, `{fail_first: 3, fail_class: server}`,
		`    retry: {max_attempts: 3, backoff: 10ms, redeliver: {max_deliveries: 3, backoff: 50ms}}`, worker.Config{})
	require.EqualValues(t, 3, p.OK)
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, 2, r.Recovery.Deliveries, id)
		require.Equal(t, 4, r.Recovery.Attempts, id)
		require.Len(t, r.Recovery.Failures, 3)
		require.Equal(t, []string{"server"}, r.Recovery.Classes)
		require.Equal(t, 4, counter.Calls(id))
	}
}

// One that never clears is exhausted after exactly max_attempts × max_deliveries calls.
func TestNeverClearsIsExhausted(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, counter := simJob(t, b, 2, `{fail_first: 1000, fail_class: server}`,
		`    retry: {max_attempts: 2, backoff: 10ms, redeliver: {max_deliveries: 3, backoff: 20ms}}`, worker.Config{})
	require.EqualValues(t, 2, p.Failed)
	require.EqualValues(t, 2, p.ByReason["exhausted"])
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, 6, counter.Calls(id), "2 attempts × 3 deliveries")
		require.Equal(t, broker.StatusFailed, r.Status)
		require.Equal(t, "server", r.Error.Class)
		require.True(t, r.Error.Retryable)
		require.True(t, strings.HasPrefix(r.Error.Message, "failed after 6 attempts (3 deliveries): [1] ServerError: 503 service unavailable; [2] ServerError"), r.Error.Message)
		require.Contains(t, r.Error.Message, "[6] ServerError")
	}
	es := dlq(t, b, job.ID)
	require.Len(t, es, 2)
	for _, e := range es {
		require.Equal(t, retry.ReasonExhausted, e.Reason)
		require.Equal(t, retry.ClassServer, e.Class)
		require.Equal(t, 6, e.Attempts)
		require.Equal(t, 3, e.Deliveries)
		require.Equal(t, "sim", e.Provider)
		require.Contains(t, e.Error, "failed after 6 attempts (3 deliveries)")
		env, err := e.Envelope()
		require.NoError(t, err, "the body is the record as it was for the action")
		require.Equal(t, e.Record, env.ID)
	}
}

// A permanent error costs exactly one call and no redelivery.
func TestPermanentErrorOneCall(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, counter := simJob(t, b, 3, `{fail_first: 1000, fail_class: auth}`,
		`    retry: {max_attempts: 5, backoff: 10ms}`, worker.Config{})
	require.EqualValues(t, 3, p.ByReason["permanent"])
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, 1, counter.Calls(id))
		require.Equal(t, 1, r.Recovery.Deliveries)
		require.Equal(t, "failed permanently: AuthError: invalid api key", r.Error.Message)
		require.False(t, r.Error.Retryable)
	}
	for _, e := range dlq(t, b, job.ID) {
		require.Equal(t, retry.ReasonPermanent, e.Reason)
		require.Equal(t, retry.ClassAuth, e.Class)
		require.Equal(t, 1, e.Attempts)
		require.Equal(t, 1, e.Deliveries)
	}
}

// Context overflow is never retried: dead-lettered with its own reason.
func TestContextOverflowNotRetried(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, counter := simJob(t, b, 2, `{fail_first: 1000, fail_class: context_overflow}`,
		`    retry: {max_attempts: 5, backoff: 10ms}`, worker.Config{})
	require.EqualValues(t, 2, p.ByReason["context_overflow"])
	require.Equal(t, 2, counter.Total())
	for _, e := range dlq(t, b, job.ID) {
		require.Equal(t, retry.ReasonContextOverflow, e.Reason)
		require.Equal(t, retry.ClassContextOverflow, e.Class)
	}
}

// Without retry a transport error fails its record at the first attempt.
func TestRetryOffOneCall(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, counter := simJob(t, b, 3, `{fail_first: 1000, fail_class: rate_limit, retry_after: 10ms}`, ``, worker.Config{})
	require.EqualValues(t, 3, p.ByReason["exhausted"])
	require.Equal(t, 3, counter.Total())
	for _, r := range testenv.Results(t, b, job) {
		require.Equal(t, 1, r.Recovery.Attempts)
		require.Equal(t, 1, r.Recovery.Deliveries)
		require.Equal(t, "failed after 1 attempt (1 delivery): [1] RateLimitError: 429 rate limit exceeded, retry after 10ms", r.Error.Message)
	}
}

// Redelivery delays follow redeliver.backoff · 2^(delivery-1).
func TestRedeliveryDelays(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	var mu sync.Mutex
	var at []time.Time
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		mu.Lock()
		at = append(at, time.Now())
		mu.Unlock()
		return next()
	}
	simJob(t, b, 1, `{fail_first: 1000, fail_class: server}`,
		`    retry: {max_attempts: 1, redeliver: {max_deliveries: 3, backoff: 300ms}}`, worker.Config{NewProvider: counter.New})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, at, 3)
	for i, want := range []time.Duration{300 * time.Millisecond, 600 * time.Millisecond} {
		got := at[i+1].Sub(at[i])
		require.GreaterOrEqual(t, got, want-30*time.Millisecond, "delivery %d", i+2)
		// Far below AckWait: the delay is the backoff's, not a lapse's (a
		// busy host adds to it, so the bound is loose).
		require.Less(t, got, want+5*time.Second, "delivery %d", i+2)
	}
}

// A panic in an action becomes a programming error with file and line; the worker survives.
func TestPanicIsProgrammingError(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		if req.RecordID == "r2" {
			var m map[string]int
			//lint:ignore SA5000 the panic is the point: a bug in an action
			m["boom"]++ // a bug: nil map write
		}
		return next()
	}
	job, p, _ := simJob(t, b, 4, `{}`, `    retry: {max_attempts: 3, backoff: 10ms}`, worker.Config{NewProvider: counter.New})
	require.EqualValues(t, 3, p.OK)
	require.EqualValues(t, 1, p.ByReason["programming_error"])
	r := testenv.Results(t, b, job)["r2"]
	require.Equal(t, "programming", r.Error.Class)
	require.Contains(t, r.Error.Message, "failed permanently: PanicError:")
	require.Contains(t, r.Error.Message, "retry_test.go:")
	require.Equal(t, 1, counter.Calls("r2"))
}

// raise: the job fails, queued records are dead-lettered as job_failed.
func TestRaiseFailsTheJob(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		if req.RecordID == "r1" {
			return provider.Response{}, &retry.Error{Class: retry.ClassAuth, Status: 401, Message: "invalid api key"}
		}
		return next()
	}
	job, p, _ := simJob(t, b, 30, `{latency: 5ms}`, `    retry: {max_attempts: 2, backoff: 10ms, on_exhausted: raise}`,
		worker.Config{Concurrency: 1, NewProvider: counter.New})
	require.Equal(t, broker.JobFailed, job.Status)
	require.Contains(t, job.Reason, "record r1: failed permanently: AuthError: invalid api key")
	require.EqualValues(t, 30, p.Done, "every record has a final result")
	require.EqualValues(t, 1, p.ByReason["permanent"])
	require.Positive(t, p.ByReason["job_failed"], "queued records were kept as job_failed dead letters")
	require.EqualValues(t, 30, p.OK+p.ByReason["permanent"]+p.ByReason["job_failed"])
}

// return_last: the record fails, the job goes on and completes.
func TestReturnLastJobGoesOn(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		if req.RecordID == "r1" {
			return provider.Response{}, &retry.Error{Class: retry.ClassAuth, Status: 401, Message: "invalid api key"}
		}
		return next()
	}
	job, p, _ := simJob(t, b, 10, `{}`, `    retry: {max_attempts: 2, backoff: 10ms}`, worker.Config{Concurrency: 2, NewProvider: counter.New})
	require.NotEqual(t, broker.JobFailed, job.Status)
	require.EqualValues(t, 9, p.OK)
	require.EqualValues(t, 1, p.Failed)
	require.Equal(t, broker.StatusFailed, testenv.Results(t, b, job)["r1"].Status)
}
