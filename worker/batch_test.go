package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

var batchKinds = []string{provider.KindOpenAI, provider.KindAnthropic}

// batchYAML is a workflow whose first action runs in batch mode on the fake
// server; actionExtra is appended to that action (retry:, fallback:), and a
// second, online action on sim proves the record goes on down the pipeline.
func batchYAMLWait(srv *batchtest.Server, maxRecords int, maxWait, actionExtra string) string {
	model := "gpt-4o-mini"
	if srv.Kind == provider.KindAnthropic {
		model = "claude-3-5-haiku-latest"
	}
	return fmt.Sprintf(`
providers:
  fake: {kind: %s, base_url: %q}
  sim: {kind: sim, sim: {reply: "[{{.Prompt}}]"}}
defaults:
  provider: fake
  model: %s
actions:
  - name: answer
    prompt: "Answer: {{ .text }}"
    mode: batch
    batch: {max_records: %d, max_wait: %s, poll: 5ms}
%s
  - name: echo
    provider: sim
    prompt: "{{ .answer }}"
`, srv.Kind, srv.URL+"/v1", model, maxRecords, maxWait, indent(actionExtra))
}

// answerAllBut answers "ok <id>" for every record but one, which gets a.
func answerAllBut(one string, a batchtest.Answer) func(string, int, map[string]any) batchtest.Answer {
	return func(id string, _ int, _ map[string]any) batchtest.Answer {
		if id == one {
			return a
		}
		return batchtest.OK("ok " + id)
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		lines[i] = "    " + l
	}
	return strings.Join(lines, "\n")
}

type batchRun struct {
	b   *broker.Broker
	srv *batchtest.Server
	job *broker.Job
}

// runBatch dispatches n records through a pool and waits for the job. Every
// record is queued before the pool starts, and max_wait is long, so batches
// are cut by max_records alone (pass n to make one batch).
func runBatch(t *testing.T, srv *batchtest.Server, n, maxRecords int, extra string) (*batchRun, map[string]*broker.Result) {
	t.Helper()
	return runBatchYAML(t, srv, n, batchYAMLWait(srv, maxRecords, "1s", extra))
}

func runBatchYAML(t *testing.T, srv *batchtest.Server, n int, yaml string) (*batchRun, map[string]*broker.Result) {
	t.Helper()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, yaml)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 8})
	job, _ := testenv.WaitFinished(t, b, res.Job.ID, 20*time.Second)
	requireNoBatches(t, b)
	return &batchRun{b: b, srv: srv, job: job}, testenv.Results(t, b, job)
}

// requireNoBatches: once a job is finished, nothing is left in JETPOOL_BATCHES.
func requireNoBatches(t *testing.T, b *broker.Broker) {
	t.Helper()
	kv, err := b.KV(context.Background(), broker.BucketBatches)
	require.NoError(t, err)
	testenv.Eventually(t, 5*time.Second, func() bool {
		kl, err := kv.ListKeys(context.Background())
		require.NoError(t, err)
		n := 0
		for range kl.Keys() {
			n++
		}
		_ = kl.Stop()
		return n == 0
	}, "JETPOOL_BATCHES still has keys")
}

func dlqByRecord(t *testing.T, b *broker.Broker) map[string]*deadletter.Entry {
	t.Helper()
	es, err := deadletter.List(context.Background(), b, deadletter.Filter{})
	require.NoError(t, err)
	out := map[string]*deadletter.Entry{}
	for _, e := range es {
		out[e.Record] = e
	}
	return out
}

// Every record returned: results as online mode writes them, the pipeline
// goes on, each record submitted exactly once, batches cut at max_records.
func TestBatchAllReturned(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			const n = 25
			// Every record is queued before the pool starts; a long max_wait
			// makes the cut by max_records alone: 10 + 10 + 5.
			_, results := runBatchYAML(t, srv, n, batchYAMLWait(srv, 10, "1s", ""))
			require.Len(t, results, n)
			for i := 1; i <= n; i++ {
				id := fmt.Sprintf("r%d", i)
				r := results[id]
				require.Equal(t, broker.StatusOK, r.Status, "%s: %+v", id, r.Error)
				require.Equal(t, "echo", r.Action)
				require.Equal(t, "ok "+id, r.Outputs["answer"])
				require.Equal(t, "[ok "+id+"]", r.Output)
			}
			for id, c := range srv.Submitted() {
				require.Equal(t, 1, c, id)
			}
			require.Len(t, srv.Submitted(), n)
			require.Equal(t, 3, srv.Created(), "25 records, max_records 10")
			reqs := srv.Requests()
			msgs := reqs[0].Body["messages"].([]any)
			require.Contains(t, msgs[len(msgs)-1].(map[string]any)["content"], "Answer: record")
			if kind == provider.KindAnthropic {
				require.NotNil(t, reqs[0].Body["max_tokens"], "Anthropic params need max_tokens")
			}
		})
	}
}

// The batch's own result for the action: usage and recovery as online.
func TestBatchResultShape(t *testing.T) {
	t.Parallel()
	srv := batchtest.New(t, provider.KindOpenAI)
	run, _ := runBatch(t, srv, 3, 3, "")
	var got *broker.Result
	require.NoError(t, run.b.EachResult(context.Background(), run.job.ID, func(r *broker.Result) error {
		if r.Action == "answer" && r.ID == "r2" {
			got = r
		}
		return nil
	}))
	require.NotNil(t, got)
	require.Equal(t, broker.StatusOK, got.Status)
	require.Equal(t, "ok r2", got.Output)
	require.Equal(t, broker.Usage{InputTokens: 7, OutputTokens: 3}, got.Usage)
	require.Equal(t, 1, got.Recovery.Attempts)
	require.Equal(t, "fake", got.Provider)
}

// 9 of 10 returned: the 10th is failed with batch_not_returned and
// dead-lettered; `jetpool retry --mode online` then runs it online.
func TestBatchNotReturned(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Answer = answerAllBut("r10", batchtest.Answer{Omit: true})
			run, results := runBatch(t, srv, 10, 10, "")
			for i := 1; i <= 9; i++ {
				require.Equal(t, broker.StatusOK, results[fmt.Sprintf("r%d", i)].Status)
			}
			r := results["r10"]
			require.Equal(t, broker.StatusFailed, r.Status)
			require.Equal(t, "batch_not_returned", r.Reason)
			require.Equal(t, "answer", r.Action)
			require.True(t, r.Error.Retryable)
			require.Contains(t, r.Error.Message, "BatchNotReturnedError")
			dl := dlqByRecord(t, run.b)
			require.Len(t, dl, 1)
			require.EqualValues(t, "batch_not_returned", dl["r10"].Reason)

			// Replay online: the record runs through the online path.
			_, err := deadletter.Replay(context.Background(), run.b, deadletter.ReplayOptions{Mode: "online"})
			require.NoError(t, err)
			testenv.Eventually(t, 10*time.Second, func() bool {
				ok, err := run.b.HasOK(context.Background(), run.job.ID, "echo", "r10")
				return err == nil && ok != nil
			}, "r10 not done online after replay")
			ok, _ := run.b.HasOK(context.Background(), run.job.ID, "answer", "r10")
			require.Equal(t, "online: Answer: record 10", ok.Output)
			require.Equal(t, 1, srv.Online())
			require.Equal(t, 1, srv.Created(), "the online replay made no batch")
		})
	}
}

// An expired (or cancelled) batch: every record is batch_not_returned.
func TestBatchExpired(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		for _, final := range []string{"expired", "cancelled"} {
			t.Run(kind+"/"+final, func(t *testing.T) {
				t.Parallel()
				srv := batchtest.New(t, kind)
				srv.Final = final
				run, results := runBatch(t, srv, 6, 6, "")
				require.Len(t, results, 6)
				for id, r := range results {
					require.Equal(t, broker.StatusFailed, r.Status, id)
					require.Equal(t, "batch_not_returned", r.Reason, id)
				}
				require.Len(t, dlqByRecord(t, run.b), 6)
			})
		}
	}
}

// Errored entries of each class are classified like online errors.
func TestBatchErroredEntries(t *testing.T) {
	t.Parallel()
	type want struct{ class, reason string }
	cases := map[string]struct {
		openai, anthropic batchtest.Answer
		want              want
	}{
		"r1": {batchtest.Fail(400, batchtest.OpenAIError("Invalid value for 'messages'", "invalid_request_error", "")),
			batchtest.Fail(400, batchtest.AnthropicError("invalid_request_error", "messages: field required")),
			want{"invalid_request", "permanent"}},
		"r2": {batchtest.Fail(401, batchtest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")),
			batchtest.Fail(401, batchtest.AnthropicError("authentication_error", "invalid x-api-key")),
			want{"auth", "permanent"}},
		"r3": {batchtest.Fail(429, batchtest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")),
			batchtest.Fail(429, batchtest.AnthropicError("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")),
			want{"rate_limit", "exhausted"}},
		"r4": {batchtest.Fail(500, batchtest.OpenAIError("The server had an error while processing your request.", "server_error", "")),
			batchtest.Fail(529, batchtest.AnthropicError("overloaded_error", "Overloaded")),
			want{"server", "exhausted"}},
		"r5": {batchtest.Fail(400, batchtest.OpenAIError("This model's maximum context length is 128000 tokens.", "invalid_request_error", "context_length_exceeded")),
			batchtest.Fail(400, batchtest.AnthropicError("invalid_request_error", "prompt is too long: 250000 tokens > 200000 maximum")),
			want{"context_overflow", "context_overflow"}},
	}
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer {
				c, ok := cases[id]
				switch {
				case !ok:
					return batchtest.OK("ok " + id)
				case kind == provider.KindOpenAI:
					return c.openai
				default:
					return c.anthropic
				}
			}
			run, results := runBatch(t, srv, 6, 6, "")
			require.Equal(t, broker.StatusOK, results["r6"].Status)
			dl := dlqByRecord(t, run.b)
			for id, c := range cases {
				r := results[id]
				require.Equal(t, broker.StatusFailed, r.Status, id)
				require.Equal(t, c.want.class, r.Error.Class, "%s: %s", id, r.Error.Message)
				require.Equal(t, c.want.reason, r.Reason, "%s: %s", id, r.Error.Message)
				require.EqualValues(t, c.want.reason, dl[id].Reason, id)
			}
			require.True(t, strings.HasPrefix(results["r2"].Error.Message, "failed permanently: "), results["r2"].Error.Message)
			require.Equal(t, 1, srv.Created())
		})
	}
}

// With retry on, transient failures and stragglers go to new batch rounds,
// up to max_attempts rounds; then on_exhausted applies.
func TestBatchRetryRounds(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Answer = func(id string, n int, _ map[string]any) batchtest.Answer {
				switch {
				case id == "r1" && n < 3: // recovers in round 3
					return batchtest.Fail(500, batchtest.OpenAIError("server error", "server_error", ""))
				case id == "r2": // always rate limited
					return batchtest.Fail(429, batchtest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded"))
				case id == "r3": // never returned
					return batchtest.Answer{Omit: true}
				case id == "r4": // permanent: never resubmitted
					return batchtest.Fail(401, batchtest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
				}
				return batchtest.OK("ok " + id)
			}
			_, results := runBatch(t, srv, 5, 5, "retry: {max_attempts: 3}")
			require.Equal(t, broker.StatusOK, results["r1"].Status)
			require.Equal(t, broker.StatusOK, results["r5"].Status)
			require.Equal(t, "exhausted", results["r2"].Reason)
			require.Contains(t, results["r2"].Error.Message, "failed after 3 attempts")
			require.Equal(t, "batch_not_returned", results["r3"].Reason)
			require.Equal(t, "permanent", results["r4"].Reason)
			sub := srv.Submitted()
			require.Equal(t, map[string]int{"r1": 3, "r2": 3, "r3": 3, "r4": 1, "r5": 1}, sub)
			require.Equal(t, 3, srv.Created())
		})
	}
}

// fallback: online sends a batch's stragglers (not returned, or failed
// transiently) through the online path instead of another round.
func TestBatchFallbackOnline(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer {
				switch id {
				case "r3":
					return batchtest.Answer{Omit: true}
				case "r4":
					return batchtest.Fail(500, batchtest.OpenAIError("server error", "server_error", ""))
				case "r5":
					return batchtest.Fail(400, batchtest.OpenAIError("bad request", "invalid_request_error", ""))
				}
				return batchtest.OK("ok " + id)
			}
			_, results := runBatch(t, srv, 5, 5, "retry: {max_attempts: 3}\nfallback: online")
			require.Equal(t, "[online: Answer: record 3]", results["r3"].Output)
			require.Equal(t, "[online: Answer: record 4]", results["r4"].Output)
			require.Equal(t, "[ok r1]", results["r1"].Output)
			require.Equal(t, "permanent", results["r5"].Reason, "a permanent error does not fall back")
			require.Equal(t, 2, srv.Online())
			require.Equal(t, 1, srv.Created(), "no second round")
		})
	}
}

// A batcher stopped after its batch was submitted (records acked, nothing
// written yet) and a new one started: the batch is resumed from KV, polled
// to its end, nothing submitted twice, nothing lost. `jetpool status`'s
// view (batch.List) shows the outstanding batch meanwhile.
func TestBatchResumeAfterRestart(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Hold = true
			b := testenv.Broker(t)
			wf := testenv.Workflow(t, batchYAMLWait(srv, 12, "1s", ""))
			const n = 12
			res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
			ctx := context.Background()

			p1 := worker.New(b, worker.Config{Concurrency: 8, Log: testenv.Logger(t)})
			require.NoError(t, p1.Start(ctx))
			var hs []*batch.Header
			testenv.Eventually(t, 10*time.Second, func() bool {
				var err error
				hs, err = batch.List(ctx, b, res.Job.ID)
				require.NoError(t, err)
				return len(hs) == 1 && hs[0].State == batch.StateSubmitted && hs[0].ProviderState != ""
			}, "batch not submitted")
			require.NotEmpty(t, hs[0].ProviderID)
			require.Len(t, hs[0].Tokens, n)
			require.Equal(t, "answer", hs[0].Action)
			testenv.Eventually(t, 10*time.Second, func() bool {
				p, err := b.JobProgress(ctx, res.Job, false)
				require.NoError(t, err)
				return p.Drained()
			}, "work messages not acked after the batch was recorded")
			stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			require.NoError(t, p1.Stop(stopCtx))
			p, err := b.JobProgress(ctx, res.Job, false)
			require.NoError(t, err)
			require.Zero(t, p.Done, "nothing written before the restart")

			srv.Release()
			testenv.Pool(t, b, worker.Config{Concurrency: 8})
			job, prog := testenv.WaitFinished(t, b, res.Job.ID, 20*time.Second)
			require.EqualValues(t, n, prog.OK)
			require.Len(t, testenv.Results(t, b, job), n)
			require.Equal(t, 1, srv.Created(), "submitted once")
			for id, c := range srv.Submitted() {
				require.Equal(t, 1, c, id)
			}
			requireNoBatches(t, b)
		})
	}
}

// The provider created the batch but its answer was lost (as if the
// process died between the provider's create and the KV write): the
// batcher finds the batch by its metadata key instead of paying twice.
func TestBatchLostCreateResponse(t *testing.T) {
	t.Parallel()
	srv := batchtest.New(t, provider.KindOpenAI)
	srv.DropCreates = 1
	_, results := runBatchYAML(t, srv, 8, batchYAMLWait(srv, 8, "1s", ""))
	for id, r := range results {
		require.Equal(t, broker.StatusOK, r.Status, id)
	}
	require.Equal(t, 1, srv.Created(), "found by metadata, not created again")
	for id, c := range srv.Submitted() {
		require.Equal(t, 1, c, id)
	}
}

// A provider kind without a batch API fails the record as a programming
// error, replayable with --mode online.
func TestBatchUnsupportedKind(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim}
defaults:
  provider: sim
actions:
  - name: answer
    prompt: "{{ .text }}"
    mode: batch
    batch: {max_wait: 10ms, poll: 5ms}
`)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 2), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 4})
	job, _ := testenv.WaitFinished(t, b, res.Job.ID, 10*time.Second)
	for _, r := range testenv.Results(t, b, job) {
		require.Equal(t, "programming_error", r.Reason)
		require.Contains(t, r.Error.Message, "no batch API")
	}
}

// expect: applies to batch answers: a valid answer is the parsed value; an
// invalid one is repaired online (repair.max_attempts > 0) or, with no
// repairs, dead-lettered as schema_violation like an exhausted repair.
func TestBatchExpect(t *testing.T) {
	t.Parallel()
	const expectBlock = "expect:\n  schema: {type: object, required: [x], properties: {x: {type: integer}}}\n  repair: {max_attempts: %d}"
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			for _, repairs := range []int{1, 0} {
				srv := batchtest.New(t, kind)
				srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer {
					if id == "r2" {
						return batchtest.OK("sure! here it is: x equals two")
					}
					return batchtest.OK(`{"x": 1}`)
				}
				srv.OnlineReply = func(string) string { return `{"x": 2}` }
				run, _ := runBatch(t, srv, 3, 3, fmt.Sprintf(expectBlock, repairs))
				ctx := context.Background()
				r1, err := run.b.HasOK(ctx, run.job.ID, "answer", "r1")
				require.NoError(t, err)
				require.NotNil(t, r1)
				require.Equal(t, map[string]any{"x": float64(1)}, r1.Output, "the batch answer, parsed")
				if repairs > 0 {
					r2, err := run.b.HasOK(ctx, run.job.ID, "answer", "r2")
					require.NoError(t, err)
					require.NotNil(t, r2, "r2 repaired online")
					require.Equal(t, map[string]any{"x": float64(2)}, r2.Output)
					require.Equal(t, 1, srv.Online(), "one online call, for r2 only")
					continue
				}
				require.Zero(t, srv.Online())
				e := dlqByRecord(t, run.b)["r2"]
				require.NotNil(t, e, "r2 dead-lettered")
				require.Equal(t, retry.ReasonSchemaViolation, e.Reason)
				require.Contains(t, e.Error, "last output: sure! here it is")
				require.NotEqual(t, broker.JobFailed, run.job.Status, "return_last: the job goes on")
			}
		})
	}
}

// max_calls counts batch rounds: a record failing transiently in every round
// stops at max_calls rounds, before retry's max_attempts, with reason
// max_calls and its rounds listed.
func TestBatchMaxCallsCapsRounds(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Answer = answerAllBut("r1", batchtest.Fail(500, batchtest.OpenAIError("server error", "server_error", "")))
			r, results := runBatch(t, srv, 3, 3, "retry: {max_attempts: 4}\nmax_calls: 2")
			require.Equal(t, "max_calls", results["r1"].Reason)
			require.Contains(t, results["r1"].Error.Message, "stopped at max_calls 2")
			require.Contains(t, results["r1"].Error.Message, "(batch round)")
			require.Equal(t, "[ok r2]", results["r2"].Output)
			require.Equal(t, map[string]int{"r1": 2, "r2": 1, "r3": 1}, srv.Submitted())
			dl := dlqByRecord(t, r.b)
			require.Equal(t, retry.ReasonMaxCalls, dl["r1"].Reason)
			requireNoBatches(t, r.b)
		})
	}
}

// A straggler sent online (fallback: online) brings its batch rounds: they
// count against max_calls there, so a record whose rounds spent the cap is
// not called online at all, and one with calls left gets only those.
func TestBatchOnlineFallbackCountsRounds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		maxCalls int
		online   int
		reason   string
	}{
		{maxCalls: 1, online: 0, reason: "max_calls"},
		{maxCalls: 2, online: 1, reason: ""},
	} {
		t.Run(fmt.Sprint("max_calls=", tc.maxCalls), func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, provider.KindOpenAI)
			srv.Answer = answerAllBut("r1", batchtest.Fail(500, batchtest.OpenAIError("server error", "server_error", "")))
			_, results := runBatch(t, srv, 2, 2, fmt.Sprintf("fallback: online\nmax_calls: %d", tc.maxCalls))
			require.Equal(t, tc.online, srv.Online())
			require.Equal(t, tc.reason, results["r1"].Reason)
			if tc.reason == "" {
				require.Equal(t, "[online: Answer: record 1]", results["r1"].Output)
			} else {
				require.Contains(t, results["r1"].Error.Message, "stopped at max_calls 1")
				require.Contains(t, results["r1"].Error.Message, "(batch round)")
			}
			require.Equal(t, "[ok r2]", results["r2"].Output)
		})
	}
}
