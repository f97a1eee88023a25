package batch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

func setup(t *testing.T, kind string) (batch.Client, *batchtest.Server) {
	t.Helper()
	srv := batchtest.New(t, kind)
	c, err := batch.NewClient(srv.Config())
	require.NoError(t, err)
	return c, srv
}

func lines(t *testing.T, c batch.Client, ids ...string) [][]byte {
	t.Helper()
	var out [][]byte
	for _, id := range ids {
		l, err := c.Line(id, provider.Request{Model: "m-1", Messages: []provider.Message{{Role: "user", Content: "hi " + id}},
			Params: map[string]any{"temperature": 0.5, "stop": "END"}})
		require.NoError(t, err)
		out = append(out, l)
	}
	return out
}

// waitEnded polls until the batch ends.
func waitEnded(t *testing.T, c batch.Client, id string) batch.Status {
	t.Helper()
	var st batch.Status
	testenv.Eventually(t, 5*time.Second, func() bool {
		var err error
		st, err = c.Status(context.Background(), id)
		require.NoError(t, err)
		return st.Ended
	}, "batch %s did not end", id)
	return st
}

func results(t *testing.T, c batch.Client, st batch.Status) map[string]batch.Entry {
	t.Helper()
	out := map[string]batch.Entry{}
	require.NoError(t, c.Results(context.Background(), st, func(e batch.Entry) error {
		out[e.CustomID] = e
		return nil
	}))
	return out
}

// One suite for both clients: request shapes, submit, poll, results by
// custom_id, per-entry errors classified like online errors.
func TestClientSuite(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			c, srv := setup(t, kind)
			require.Equal(t, kind, c.Kind())
			srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer {
				switch id {
				case "a":
					return batchtest.OK("hello a")
				case "b":
					if kind == provider.KindOpenAI {
						return batchtest.Fail(429, batchtest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded"))
					}
					return batchtest.Fail(429, batchtest.AnthropicError("rate_limit_error", "rate limited"))
				case "c":
					if kind == provider.KindOpenAI {
						return batchtest.Fail(401, batchtest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
					}
					return batchtest.Fail(401, batchtest.AnthropicError("authentication_error", "invalid x-api-key"))
				case "d":
					return batchtest.Answer{Expire: true}
				}
				return batchtest.Answer{Omit: true}
			}
			ctx := context.Background()
			id, err := c.Submit(ctx, "key-1", lines(t, c, "a", "b", "c", "d", "e"))
			require.NoError(t, err)
			require.Equal(t, 1, srv.Created())
			reqs := srv.Requests()
			require.Len(t, reqs, 5)
			require.Equal(t, "m-1", reqs[0].Body["model"])
			require.Equal(t, 0.5, reqs[0].Body["temperature"])
			if kind == provider.KindAnthropic {
				require.Equal(t, []any{"END"}, reqs[0].Body["stop_sequences"], "params mapped as online")
				require.NotNil(t, reqs[0].Body["max_tokens"])
			}
			require.NotContains(t, reqs[0].Body, "stream")

			st := waitEnded(t, c, id)
			require.Equal(t, id, st.ID)
			got := results(t, c, st)
			require.Nil(t, got["a"].Err)
			require.Equal(t, "hello a", got["a"].Response.Text)
			require.Equal(t, provider.Usage{InputTokens: 7, OutputTokens: 3}, got["a"].Response.Usage)
			require.Equal(t, retry.ClassRateLimit, got["b"].Err.Class)
			require.Equal(t, retry.ClassAuth, got["c"].Err.Class)
			require.True(t, got["d"].NotReturned)
			require.NotContains(t, got, "e", "an omitted request has no entry")
		})
	}
}

// OpenAI: a batch created before a crash is found by its metadata key.
func TestOpenAIFind(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, provider.KindOpenAI)
	ctx := context.Background()
	id, err := c.Submit(ctx, "k-find", lines(t, c, "a"))
	require.NoError(t, err)
	_, err = c.Submit(ctx, "k-other", lines(t, c, "b"))
	require.NoError(t, err)
	got, err := c.Find(ctx, "k-find")
	require.NoError(t, err)
	require.Equal(t, id, got)
	got, err = c.Find(ctx, "k-none")
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestAnthropicCannotFind(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, provider.KindAnthropic)
	_, err := c.Find(context.Background(), "k")
	require.ErrorIs(t, err, batch.ErrNoFind)
}

// A results_url on another host is not followed: the key goes only to the
// provider's own base URL.
func TestAnthropicResultsURLElsewhere(t *testing.T) {
	t.Parallel()
	c, _ := setup(t, provider.KindAnthropic)
	id, err := c.Submit(context.Background(), "k", lines(t, c, "a"))
	require.NoError(t, err)
	st := waitEnded(t, c, id)
	st.ResultsURL = "http://127.0.0.2:1/elsewhere"
	require.Equal(t, "ok a", results(t, c, st)["a"].Response.Text)
}

// Errors of the batch endpoints themselves are classified too.
func TestSubmitErrors(t *testing.T) {
	t.Parallel()
	c, srv := setup(t, provider.KindOpenAI)
	srv.FailCreate = &batchtest.Answer{Status: 401, Error: batchtest.OpenAIError("Incorrect API key provided: sk-abc", "invalid_request_error", "invalid_api_key")}
	_, err := c.Submit(context.Background(), "k", lines(t, c, "a"))
	require.Equal(t, retry.ClassAuth, retry.AsError(err).Class)

	srv.Close()
	_, err = c.Status(context.Background(), "batch_x")
	require.Equal(t, retry.ClassNetwork, retry.AsError(err).Class)

	_, err = batch.NewClient(provider.Config{Name: "g", Kind: provider.KindGemini})
	require.ErrorContains(t, err, "no batch API")
}

// fakeHandler records outcomes.
type fakeHandler struct {
	mu   sync.Mutex
	ok   map[string]string
	fail map[string]retry.Reason
}

func (h *fakeHandler) Succeed(_ context.Context, _ *workflow.Action, it *batch.Item, r provider.Response) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok[it.ID] = r.Text
	return nil
}

func (h *fakeHandler) Fail(_ context.Context, _ *workflow.Action, it *batch.Item, _ *retry.Error, reason retry.Reason, _ string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fail[it.ID] = reason
	return nil
}

func (h *fakeHandler) Online(context.Context, *workflow.Action, *batch.Item) error { return nil }

func (h *fakeHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ok) + len(h.fail)
}

// A batch owned by a process that died (its lease passed) is taken over by
// another owner, which submits it from KV alone and maps its results back.
func TestBatcherTakesOverExpiredLease(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	srv := batchtest.New(t, provider.KindOpenAI)
	srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer {
		if id == "r3" {
			return batchtest.Answer{Omit: true}
		}
		return batchtest.OK("ok " + id)
	}
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  fake: {kind: openai, base_url: %q}
defaults: {provider: fake, model: m-1}
actions:
  - name: answer
    prompt: "{{ .text }}"
    mode: batch
    batch: {max_wait: 10ms, poll: 5ms}
`, srv.URL+"/v1"))
	c, err := batch.NewClient(wf.Providers["fake"])
	require.NoError(t, err)
	ctx := context.Background()
	kv, err := b.KV(ctx, broker.BucketBatches)
	require.NoError(t, err)
	h := &batch.Header{Key: "k1", Job: "j1", Action: "answer", Provider: "fake", Kind: "openai", State: batch.StateSubmitting,
		Round: 1, Owner: "dead-process", LeaseUntil: time.Now().Add(-time.Second), Created: time.Now()}
	for _, id := range []string{"r1", "r2", "r3"} {
		l := lines(t, c, id)[0]
		env, _ := json.Marshal(broker.Envelope{ID: id, Record: map[string]any{"text": id}})
		data, _ := json.Marshal(batch.Item{Batch: "k1", ID: id, Data: env, Line: l, Deliveries: 1, Round: 1})
		_, err := kv.Put(ctx, batch.ItemKey("j1", "answer", id), data)
		require.NoError(t, err)
		h.Tokens = append(h.Tokens, id)
	}
	data, _ := json.Marshal(h)
	_, err = kv.Put(ctx, batch.HeaderKey("j1", "answer", "k1"), data)
	require.NoError(t, err)
	// A live owner's batch is left alone.
	live := &batch.Header{Key: "k2", Job: "j1", Action: "answer", State: batch.StateSubmitted, ProviderID: "batch_live",
		Round: 1, Owner: "alive", LeaseUntil: time.Now().Add(time.Hour), Created: time.Now(), Tokens: []string{"x"}}
	data, _ = json.Marshal(live)
	_, err = kv.Put(ctx, batch.HeaderKey("j1", "answer", "k2"), data)
	require.NoError(t, err)

	fh := &fakeHandler{ok: map[string]string{}, fail: map[string]retry.Reason{}}
	bt := batch.New(batch.Config{Broker: b, Job: "j1", Workflow: wf, Owner: "me", Handler: fh, Log: testenv.Logger(t)})
	require.NoError(t, bt.Start(ctx))
	defer bt.Stop()
	testenv.Eventually(t, 10*time.Second, func() bool { return fh.count() == 3 }, "outcomes not all handled")
	require.Equal(t, map[string]string{"r1": "ok r1", "r2": "ok r2"}, fh.ok)
	require.Equal(t, map[string]retry.Reason{"r3": retry.ReasonBatchNotReturned}, fh.fail)
	require.Equal(t, 1, srv.Created())
	testenv.Eventually(t, 5*time.Second, func() bool {
		hs, err := batch.List(ctx, b, "j1")
		require.NoError(t, err)
		return len(hs) == 1 && hs[0].Key == "k2" && hs[0].Owner == "alive"
	}, "k1 not removed, or k2 taken from its live owner")
	_, err = kv.Get(ctx, batch.ItemKey("j1", "answer", "r1"))
	require.Error(t, err, "items removed once handled")
}
