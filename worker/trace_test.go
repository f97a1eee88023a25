package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/tracing"
	"github.com/jetpool/jetpool/worker"
)

// traceScript answers each record's calls by its prompt: r1 is refused with
// a 503 twice then answered; r2 is refused with a 401 while refuse is set.
type traceScript struct {
	mu     sync.Mutex
	calls  map[string]int
	refuse atomic.Bool
}

func (s *traceScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	prompt := ""
	if len(body.Messages) > 0 {
		prompt = body.Messages[len(body.Messages)-1].Content
	}
	s.mu.Lock()
	s.calls[prompt]++
	n := s.calls[prompt]
	s.mu.Unlock()
	switch {
	case prompt == "do record 1" && n <= 2:
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded or not ready yet.", "server_error", "")}.ServeHTTP(w, r)
	case prompt == "do record 2" && s.refuse.Load():
		providertest.Reply{Status: 401, Body: providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")}.ServeHTTP(w, r)
	default:
		providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini-2024-07-18", "answer to "+prompt, 7, 3)}.ServeHTTP(w, r)
	}
}

// traced installs an SDK tracer provider exporting to memory for the test.
// Tracing is process-wide: the tests using it do not run in parallel.
func traced(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	restore := tracing.Use(tp)
	t.Cleanup(func() {
		restore()
		require.NoError(t, tp.Shutdown(context.Background()))
	})
	return exp
}

func attrOf(s tracetest.SpanStub, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func str(s tracetest.SpanStub, k attribute.Key) string {
	v, _ := attrOf(s, k)
	return v.String()
}

// byRecord groups the spans of job by record.
func byRecord(spans tracetest.SpanStubs, job string) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		if str(s, tracing.KeyJob) == job {
			out[str(s, tracing.KeyRecord)] = append(out[str(s, tracing.KeyRecord)], s)
		}
	}
	return out
}

// A record's trace follows it through a redelivery (r1: two 503s in its
// first delivery, answered in its second) and a replay (r2: dead-lettered
// at its 401, answered once replayed): one trace per record, the dispatch
// its root, each delivery under the span that published its message, each
// call under its delivery with the GenAI attributes, the replay under the
// delivery that failed the record; and no span holds the key.
func TestTraceFollowsRedeliveryAndReplay(t *testing.T) {
	exp := traced(t)
	const keyEnv, key = "TRACE_TEST_KEY", "sk-trace-SECRET-0123456789abcdef"
	t.Setenv(keyEnv, key)
	h := &traceScript{calls: map[string]int{}}
	h.refuse.Store(true)
	srv := providertest.NewServer(t, h)
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  openai: {kind: openai, base_url: %q, api_key_env: %s, timeout: 5s}
actions:
  - name: act
    provider: openai
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: {max_attempts: 2, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 20ms}}
`, srv.URL+"/v1", keyEnv))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 2), dispatcher.Options{})
	job := res.Job.ID
	testenv.Pool(t, b, worker.Config{Concurrency: 2, Trust: trustOf(t, keyEnv, srv)})
	_, p := testenv.WaitFinished(t, b, job, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	require.EqualValues(t, 1, p.Failed)

	h.refuse.Store(false)
	rep, err := deadletter.Replay(context.Background(), b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job}})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Replayed)
	testenv.Eventually(t, 30*time.Second, func() bool {
		j, _, err := b.GetJob(context.Background(), job)
		if err != nil {
			return false
		}
		pr, err := b.JobProgress(context.Background(), j, false)
		return err == nil && pr.OK == 2
	}, "the replayed record succeeds")

	spans := exp.GetSpans()
	for _, s := range spans {
		raw, err := json.Marshal(s)
		require.NoError(t, err)
		require.NotContains(t, string(raw), "SECRET", "span %s holds the key", s.Name)
		require.NotContains(t, string(raw), "do record", "span %s holds the prompt without "+tracing.ContentEnv, s.Name)
	}
	recs := byRecord(spans, job)

	// r1: dispatch ← delivery 1 (2 failed calls, retry) and delivery 2 (1 call, stored).
	r1 := recs["r1"]
	tree := spanTree(t, r1)
	require.Len(t, tree.named(tracing.SpanDispatch), 1)
	root := tree.named(tracing.SpanDispatch)[0]
	require.False(t, root.Parent.IsValid(), "the dispatch is the trace's root")
	dels := tree.named(tracing.SpanDeliver + " act")
	require.Len(t, dels, 2)
	for i, d := range dels {
		require.Equal(t, root.SpanContext.SpanID(), d.Parent.SpanID(), "a redelivery is a sibling under the dispatch")
		require.Equal(t, trace.SpanKindConsumer, d.SpanKind)
		require.Equal(t, fmt.Sprint(i+1), str(d, tracing.KeyDelivery))
	}
	require.Equal(t, "retry", str(dels[0], tracing.KeyOutcome))
	require.Equal(t, "server", str(dels[0], tracing.KeyErrorClass))
	require.Equal(t, "stored", str(dels[1], tracing.KeyOutcome))
	calls0, calls1 := tree.children(dels[0]), tree.children(dels[1])
	require.Len(t, calls0, 2)
	require.Len(t, calls1, 1)
	for i, c := range append(calls0, calls1...) {
		require.Equal(t, "chat gpt-4o-mini", c.Name)
		require.Equal(t, trace.SpanKindClient, c.SpanKind)
		require.Equal(t, "chat", str(c, tracing.KeyOperation))
		require.Equal(t, "openai", str(c, tracing.KeyProvider))
		require.Equal(t, "gpt-4o-mini", str(c, tracing.KeyRequestModel))
		require.Equal(t, fmt.Sprint(i+1), str(c, tracing.KeyAttempt), "attempts are numbered across deliveries")
	}
	require.Equal(t, "server", str(calls0[0], tracing.KeyErrorClass))
	require.NotEmpty(t, str(calls0[0], tracing.KeyErrorType))
	ok := calls1[0]
	require.Equal(t, "gpt-4o-mini-2024-07-18", str(ok, tracing.KeyResponseModel))
	require.Equal(t, `["stop"]`, str(ok, tracing.KeyFinish))
	require.Equal(t, "7", str(ok, tracing.KeyInputTokens))
	require.Equal(t, "3", str(ok, tracing.KeyOutputTokens))
	_, hasErr := attrOf(ok, tracing.KeyErrorType)
	require.False(t, hasErr)

	// r2: dispatch ← delivery (401, dead_letter) ← replay ← delivery (stored).
	tree = spanTree(t, recs["r2"])
	root = tree.named(tracing.SpanDispatch)[0]
	dels = tree.named(tracing.SpanDeliver + " act")
	require.Len(t, dels, 2)
	failed, again := dels[0], dels[1]
	require.Equal(t, root.SpanContext.SpanID(), failed.Parent.SpanID())
	require.Equal(t, "dead_letter", str(failed, tracing.KeyOutcome))
	require.Equal(t, "auth", str(failed, tracing.KeyErrorClass))
	require.Equal(t, "permanent", str(failed, tracing.KeyReason))
	replays := tree.named(tracing.SpanReplay)
	require.Len(t, replays, 1)
	require.Equal(t, failed.SpanContext.SpanID(), replays[0].Parent.SpanID(), "the replay goes on under the delivery that failed the record")
	require.Equal(t, replays[0].SpanContext.SpanID(), again.Parent.SpanID())
	require.Equal(t, "1", str(again, tracing.KeyReplays))
	require.Equal(t, "stored", str(again, tracing.KeyOutcome))
	require.Len(t, tree.children(again), 1)
}

// tree is one record's spans, all of one trace.
type tree struct{ spans []tracetest.SpanStub }

func spanTree(t *testing.T, spans []tracetest.SpanStub) tree {
	t.Helper()
	require.NotEmpty(t, spans)
	for _, s := range spans {
		require.Equal(t, spans[0].SpanContext.TraceID(), s.SpanContext.TraceID(), "one trace per record: %s", s.Name)
	}
	return tree{spans}
}

// named is the spans called name, oldest first.
func (tr tree) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	sortByStart(out)
	return out
}

// children is the spans under parent, oldest first.
func (tr tree) children(parent tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range tr.spans {
		if s.Parent.SpanID() == parent.SpanContext.SpanID() {
			out = append(out, s)
		}
	}
	sortByStart(out)
	return out
}

func sortByStart(s []tracetest.SpanStub) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j].StartTime.Before(s[j-1].StartTime); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// countingReply answers the n-th call with replies[n-1] (the last one
// after that).
type countingReply struct {
	n       atomic.Int64
	replies []string
}

func (c *countingReply) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := min(int(c.n.Add(1)), len(c.replies)) - 1
	providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", c.replies[i], 5, 2)}.ServeHTTP(w, r)
}

// A repair is a call of its own, under the same delivery, marked with its
// round.
func TestTraceRepairRound(t *testing.T) {
	exp := traced(t)
	srv := providertest.NewServer(t, &countingReply{replies: []string{"not json", `{"a": 1}`}})
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %q, timeout: 5s}
actions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    expect: {format: json, repair: {max_attempts: 1}}
`, srv.URL+"/v1"))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 1), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 1})
	_, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	tree := spanTree(t, byRecord(exp.GetSpans(), res.Job.ID)["r1"])
	dels := tree.named(tracing.SpanDeliver + " act")
	require.Len(t, dels, 1)
	calls := tree.children(dels[0])
	require.Len(t, calls, 2)
	_, first := attrOf(calls[0], tracing.KeyRepair)
	require.False(t, first, "the first answer is no repair")
	require.Equal(t, "1", str(calls[1], tracing.KeyRepair))
	require.Equal(t, "2", str(calls[1], tracing.KeyAttempt))
	require.Equal(t, "stored", str(dels[0], tracing.KeyOutcome))
	require.Equal(t, "2", str(dels[0], tracing.KeyCalls))
}

// failFirst answers its first n calls with a 503, the rest with an answer.
type failFirst struct {
	n     int64
	calls atomic.Int64
}

func (f *failFirst) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.calls.Add(1) <= f.n {
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded or not ready yet.", "server_error", "")}.ServeHTTP(w, r)
		return
	}
	providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 3, 1)}.ServeHTTP(w, r)
}

// A record parked while its provider's circuit is open: the delivery that
// waits says until when, and the next delivery is its sibling. (The
// circuit stays open seconds, so that the session's next attempt finds
// it open however loaded the machine.)
func TestTraceParkedWait(t *testing.T) {
	exp := traced(t)
	srv := providertest.NewServer(t, &failFirst{n: 2})
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %q, timeout: 5s, limits: {adaptive: false, breaker: {min_calls: 2, failure_ratio: 0.5, cooldown: 4s, cooldown_max: 4s}}}
actions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: {max_attempts: 3, backoff: 10ms, redeliver: {max_deliveries: 3, backoff: 10ms}}
`, srv.URL+"/v1"))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 1), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 1, LimitsConfig: ratelimit.Config{WaitMax: 20 * time.Millisecond,
		Breaker: ratelimit.BreakerConfig{ProbeTimeout: 5 * time.Second}}})
	_, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	tree := spanTree(t, byRecord(exp.GetSpans(), res.Job.ID)["r1"])
	root := tree.named(tracing.SpanDispatch)[0]
	dels := tree.named(tracing.SpanDeliver + " act")
	require.GreaterOrEqual(t, len(dels), 2)
	parked := 0
	for _, d := range dels {
		require.Equal(t, root.SpanContext.SpanID(), d.Parent.SpanID())
		if str(d, tracing.KeyOutcome) == "park" {
			parked++
			require.NotEmpty(t, str(d, tracing.KeyWaitUntil))
			require.Equal(t, "wait", d.Events[len(d.Events)-1].Name)
		}
	}
	require.Positive(t, parked, "a delivery parked while the circuit was open")
	require.Equal(t, "stored", str(dels[len(dels)-1], tracing.KeyOutcome))
}
