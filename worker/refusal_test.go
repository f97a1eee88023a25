package worker_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

const refusalText = "I'm sorry, I can't help with that."

// refusalPrice bills a dollar an input token and two an output token, so
// a cost is its tokens in plain numbers.
const refusalPrice = `{input_per_mtok: 1000000, output_per_mtok: 2000000, batch_input_per_mtok: 500000, batch_output_per_mtok: 1000000}`

// A refusal is a failure of class content_filter in every wire format,
// streamed or not, on an action with retries and an expect: block with
// repairs: one call a record (no retry layer calls again, the repair loop
// never sees it), the refusal's text the failed result's output, and its
// usage billed at the action's price.
func TestRefusalIsContentFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, kind, model string
		stream            bool
		serve             http.Handler
		raw, diag, output string
		usage             broker.Usage
	}{
		{name: "openai message.refusal", kind: provider.KindOpenAI, model: "gpt-4o-mini",
			serve: providertest.Reply{Status: 200, Body: providertest.OpenAIRefusal("gpt-4o-mini", refusalText, 12, 5)},
			raw:   "refusal", diag: "the model refused to answer", output: refusalText, usage: broker.Usage{InputTokens: 12, OutputTokens: 5}},
		{name: "openai delta.refusal", kind: provider.KindOpenAI, model: "gpt-4o-mini", stream: true,
			serve: providertest.SSE{Events: providertest.OpenAIRefusalStream("gpt-4o-mini", []string{"I'm sorry,", " I can't help with that."}, 30, 9)},
			raw:   "refusal", diag: "the model refused to answer", output: refusalText, usage: broker.Usage{InputTokens: 30, OutputTokens: 9}},
		{name: "anthropic stop_reason refusal", kind: provider.KindAnthropic, model: "claude-sonnet-4-5",
			serve: providertest.Reply{Status: 200, Body: providertest.AnthropicMessageStop("claude-sonnet-4-5", refusalText, "refusal", 20, 7)},
			raw:   "refusal", diag: "the model refused to answer", output: refusalText, usage: broker.Usage{InputTokens: 20, OutputTokens: 7}},
		{name: "gemini promptFeedback.blockReason", kind: provider.KindGemini, model: "gemini-2.5-flash",
			serve: providertest.Reply{Status: 200, Body: providertest.GeminiPromptBlocked("gemini-2.5-flash", "PROHIBITED_CONTENT", 8)},
			raw:   "blockReason PROHIBITED_CONTENT", diag: "prompt blocked", usage: broker.Usage{InputTokens: 8}},
		{name: "gemini blocked prompt, streamed", kind: provider.KindGemini, model: "gemini-2.5-flash", stream: true,
			serve: providertest.SSE{Events: providertest.GeminiPromptBlockedStream("gemini-2.5-flash", "SAFETY", 11)},
			raw:   "blockReason SAFETY", diag: "prompt blocked", usage: broker.Usage{InputTokens: 11}},
		{name: "gemini candidate stopped for SPII", kind: provider.KindGemini, model: "gemini-2.5-flash",
			serve: providertest.Reply{Status: 200, Body: providertest.GeminiResponseFinish("gemini-2.5-flash", "The number is", "SPII", 9, 3)},
			raw:   "SPII", diag: "answer stopped by the provider's content filter", output: "The number is", usage: broker.Usage{InputTokens: 9, OutputTokens: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const records = 3
			var calls atomic.Int64
			srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				tc.serve.ServeHTTP(w, r)
			}))
			b := testenv.Broker(t)
			job, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  fake: {kind: %s, base_url: %s, timeout: 5s}
actions:
  - name: extract
    provider: fake
    model: %s
    stream: %t
    prompt: "Title of {{ .text }}"
    price: %s
    retry: {max_attempts: 3, redeliver: {max_deliveries: 2}}
    expect:
      schema: {type: object, required: [title]}
      repair: {max_attempts: 2}
`, tc.kind, providertest.Config(tc.kind, srv).BaseURL, tc.model, tc.stream, refusalPrice), records, worker.Config{})
			require.EqualValues(t, records, calls.Load(), "one call a record: neither retry layer nor the repair loop calls again")
			require.EqualValues(t, 0, p.OK)
			wantCost := float64(tc.usage.InputTokens) + 2*float64(tc.usage.OutputTokens)
			for i := 1; i <= records; i++ {
				r := results[fmt.Sprintf("r%d", i)]
				require.Equal(t, broker.StatusFailed, r.Status, "%+v", r)
				require.Equal(t, string(retry.ReasonContentFilter), r.Reason)
				require.Equal(t, string(retry.ClassContentFilter), r.Error.Class)
				require.False(t, r.Error.Retryable)
				require.Contains(t, r.Error.Message, "failed permanently: ContentFilterError: "+tc.diag)
				require.Equal(t, "content_filter", r.FinishReason)
				require.Equal(t, tc.raw, r.FinishReasonRaw)
				require.Equal(t, 1, r.Recovery.Attempts)
				require.Zero(t, r.Recovery.Repairs, "a refusal is never repaired")
				require.Equal(t, tc.usage, r.Usage, "the refusal's usage is kept")
				require.NotNil(t, r.Cost, "a refusal is billed: its cost is known")
				require.InDelta(t, wantCost, *r.Cost, 1e-9)
				require.InDelta(t, wantCost, *r.TotalCost, 1e-9)
				if tc.output != "" {
					require.Equal(t, tc.output, r.Output, "the refusal's text is kept")
				}
			}
			dead := deadLetters(t, b, job.ID)
			require.Len(t, dead, records)
			for _, e := range dead {
				require.Equal(t, retry.ReasonContentFilter, e.Reason)
				require.Equal(t, retry.ClassContentFilter, e.Class)
				require.Equal(t, 1, e.Attempts)
				if tc.output != "" {
					require.Contains(t, e.Error, "last output: "+tc.output)
				}
			}
		})
	}
}

// on_filtered: ok keeps a refusal as the record's answer (status ok, its
// text the output), as for any filtered answer.
func TestRefusalOnFilteredOK(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, providertest.Reply{Status: 200, Body: providertest.OpenAIRefusal("gpt-4o-mini", refusalText, 12, 5)})
	b := testenv.Broker(t)
	_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  fake: {kind: openai, base_url: %s/v1, timeout: 5s}
actions:
  - name: answer
    provider: fake
    model: gpt-4o-mini
    prompt: "{{ .text }}"
    price: %s
    on_filtered: ok
`, srv.URL, refusalPrice), 2, worker.Config{})
	require.EqualValues(t, 2, p.OK)
	for _, r := range results {
		require.Equal(t, broker.StatusOK, r.Status)
		require.Equal(t, refusalText, r.Output)
		require.Equal(t, "content_filter", r.FinishReason)
		require.InDelta(t, 12+2*5.0, *r.Cost, 1e-9)
	}
	require.Len(t, srv.Requests(), 2)
}

// A refusal in a batch's results (OpenAI Batch, Anthropic Message Batches)
// fails its record alone, as online: content_filter, its text kept, its
// usage billed at the batch rates, no online repair sent.
func TestBatchRefusal(t *testing.T) {
	t.Parallel()
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := batchtest.New(t, kind)
			srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer {
				if id == "r2" {
					return batchtest.Refuse(refusalText)
				}
				return batchtest.OK(`{"id": "` + id + `"}`)
			}
			model := "gpt-4o-mini"
			if kind == provider.KindAnthropic {
				model = "claude-3-5-haiku-latest"
			}
			run, results := runBatchYAML(t, srv, 4, fmt.Sprintf(`
providers:
  fake: {kind: %s, base_url: %q}
actions:
  - name: answer
    provider: fake
    model: %s
    prompt: "Answer: {{ .text }}"
    price: %s
    mode: batch
    batch: {max_records: 4, max_wait: 1s, poll: 5ms}
    retry: {max_attempts: 3}
    expect:
      format: json
      repair: {max_attempts: 2}
`, kind, srv.URL+"/v1", model, refusalPrice))
			for _, id := range []string{"r1", "r3", "r4"} {
				require.Equal(t, broker.StatusOK, results[id].Status, "%s: %+v", id, results[id].Error)
			}
			r := results["r2"]
			require.Equal(t, broker.StatusFailed, r.Status, "%+v", r)
			require.Equal(t, string(retry.ReasonContentFilter), r.Reason)
			require.Equal(t, string(retry.ClassContentFilter), r.Error.Class)
			require.Contains(t, r.Error.Message, "the model refused to answer")
			require.Equal(t, refusalText, r.Output)
			require.Equal(t, "content_filter", r.FinishReason)
			require.Equal(t, broker.Usage{InputTokens: 7, OutputTokens: 3}, r.Usage)
			require.NotNil(t, r.Cost)
			require.InDelta(t, 7*0.5+3*1.0, *r.Cost, 1e-9, "billed at the batch rates")
			require.Equal(t, 0, srv.Online(), "a refusal is not repaired online")
			require.Equal(t, 1, srv.Submitted()["r2"])
			dead := deadLetters(t, run.b, run.job.ID)
			require.Len(t, dead, 1)
			require.Equal(t, retry.ReasonContentFilter, dead[0].Reason)
		})
	}
}

func deadLetters(t *testing.T, b *broker.Broker, job string) []*deadletter.Entry {
	t.Helper()
	var dead []*deadletter.Entry
	require.NoError(t, deadletter.Each(context.Background(), b, deadletter.Filter{Job: job}, func(e *deadletter.Entry) error {
		dead = append(dead, e)
		return nil
	}))
	return dead
}
