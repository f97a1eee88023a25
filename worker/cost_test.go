package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// reply40 is a scripted answer of 40 characters: 11 tokens to the sim,
// which stops at max_tokens as a model does (four characters a token).
const reply40 = "0123456789abcdefghijklmnopqrstuvwxyzABCD"

// An answer cut at max_tokens or stopped by a filter is not a silent
// ok: by default it fails with its own class and reason, the
// partial answer kept in the result and in the dead letter's diagnostic;
// on_truncated: ok keeps it; grow asks again with max_tokens doubled.
func TestTruncatedAndFilteredAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, extra string
		faults      string
		status      string
		reason      retry.Reason
		output      string
		finish      string
		attempts    int
	}{
		{name: "truncated fails", status: broker.StatusFailed, reason: retry.ReasonTruncated, output: reply40[:12], finish: "length", attempts: 1},
		{name: "truncated ok", extra: "on_truncated: ok", status: broker.StatusOK, output: reply40[:12], finish: "length", attempts: 1},
		{name: "truncated grows", extra: "on_truncated: grow", status: broker.StatusOK, output: reply40, finish: "stop", attempts: 3},
		{name: "filtered fails", faults: "faults: {content_filter: 1}", status: broker.StatusFailed, reason: retry.ReasonContentFilter, finish: "content_filter", attempts: 1},
		{name: "filtered ok", faults: "faults: {content_filter: 1}", extra: "on_filtered: ok", status: broker.StatusOK, finish: "content_filter", attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := testenv.Broker(t)
			job, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: {reply: %q, %s}}
actions:
  - name: a
    provider: sim
    prompt: "{{ .text }}"
    params: {max_tokens: 3}
    retry: {max_attempts: 3}
    %s
`, reply40, tc.faults, tc.extra), 1, worker.Config{})
			r := results["r1"]
			require.Equal(t, tc.status, r.Status, "%+v", r)
			require.Equal(t, tc.finish, r.FinishReason)
			require.Equal(t, tc.attempts, r.Recovery.Attempts, "no retry layer calls again for the same answer")
			if tc.output != "" {
				require.Equal(t, tc.output, r.Output)
			}
			if tc.status == broker.StatusOK {
				require.EqualValues(t, 1, p.OK)
				return
			}
			require.Equal(t, string(tc.reason), r.Reason)
			require.Equal(t, string(tc.reason), r.Error.Class, "the class is named after the reason")
			require.False(t, r.Error.Retryable)
			require.Contains(t, r.Error.Message, "failed permanently: ")
			var dead []*deadletter.Entry
			require.NoError(t, deadletter.Each(context.Background(), b, deadletter.Filter{Job: job.ID}, func(e *deadletter.Entry) error {
				dead = append(dead, e)
				return nil
			}))
			require.Len(t, dead, 1)
			require.Equal(t, tc.reason, dead[0].Reason)
			if tc.output != "" {
				require.Contains(t, dead[0].Error, "last output: "+tc.output, "the partial answer is kept in the dead letter")
			}
		})
	}
}

// simPriced is a sim workflow whose calls cost known amounts: the reply
// "abcd" is 2 output tokens, "record N" prompts 3 input tokens.
func simPriced(extra string) string {
	return `
providers:
  sim: {kind: sim, sim: {reply: "abcd"}, price: {input_per_mtok: 1000000, output_per_mtok: 2000000}}
carry: [text]
defaults:
  provider: sim
  retry: {max_attempts: 2}
` + extra + `
actions:
  - name: first
    prompt: "{{ .text }}"
  - name: second
    prompt: "{{ .first }}"
`
}

// A pipeline whose per-result and total cost equal tokens × price, with
// the input line and the carried fields on each result.
func TestCostPipeline(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, results := expectJob(t, b, simPriced(""), 5, worker.Config{})
	require.EqualValues(t, 5, p.OK)
	var total float64
	require.NoError(t, b.EachResult(context.Background(), job.ID, func(r *broker.Result) error {
		// The action's own tokens (usage is the record's, over its actions).
		own := r.Actions[len(r.Actions)-1].Usage
		want := float64(own.InputTokens)*1 + float64(own.OutputTokens)*2 // dollars a token
		require.NotNil(t, r.Cost, r.Action)
		require.InDelta(t, want, *r.Cost, 1e-9, "%s/%s: tokens × price", r.ID, r.Action)
		require.Equal(t, "stop", r.FinishReason)
		total += *r.Cost
		return nil
	}))
	for i := 1; i <= 5; i++ {
		r := results[fmt.Sprintf("r%d", i)]
		require.Equal(t, "second", r.Action)
		require.Equal(t, i, r.Line, "the input line, for results --sorted")
		require.Equal(t, map[string]any{"text": fmt.Sprintf("record %d", i)}, r.Input, "carry: [text]")
		// first: 3 in ("record N": 8/4+1), 2 out; second: 2 in ("abcd"), 2 out.
		require.InDelta(t, 3+4.0, *r.TotalCost-*r.Cost, 1e-9, "total_cost adds the first action's")
		require.InDelta(t, 2+4.0, *r.Cost, 1e-9)
	}
	// The job's entry holds the same sum once the worker has flushed it.
	testenv.Eventually(t, 5*time.Second, func() bool {
		j, _, err := b.GetJob(context.Background(), job.ID)
		return err == nil && fmt.Sprintf("%.6f", j.Cost) == fmt.Sprintf("%.6f", total)
	}, "job cost %v", total)
}

// max_cost stops new calls mid-job like a raise, with nothing lost: a call
// goes only while what is spent and set aside for calls under way is below
// the budget, the records not called are dead-lettered with class and
// reason budget, and a replay after the budget is raised finishes the job.
func TestMaxCostStopsThenReplayFinishes(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	ctx := context.Background()
	// One action at $1 an input token and $2 an output token: "record N"
	// is 3 input tokens to the sim and "abcd" 2 output: $7 a call. Its
	// worst case: 32 input tokens (16 for the request, 8 for the message,
	// 8 bytes of prompt) and max_tokens 2: $36.
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {reply: "abcd"}, price: {input_per_mtok: 1000000, output_per_mtok: 2000000}}
defaults: {provider: sim, max_cost: 60, params: {max_tokens: 2}}
actions:
  - {name: a, prompt: "{{ .text }}"}
`)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 20), dispatcher.Options{})
	require.Equal(t, 60.0, res.Job.MaxCost)
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 1, ReadAhead: -1})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.Equal(t, broker.JobFailed, job.Status)
	require.Contains(t, job.Reason, "max_cost $60.00 reached")
	// $7 a call, one at a time: the ninth goes with $56 spent, the tenth
	// finds $63 spent. The cap is passed by $3, less than a call's worst
	// case ($36).
	require.EqualValues(t, 9, p.OK)
	require.EqualValues(t, 11, p.Failed)
	require.Equal(t, map[string]int64{"budget": 11}, p.ByReason, "nothing lost: every record is ok or dead-lettered for budget")
	require.EqualValues(t, 9, pool.Calls())
	results := testenv.Results(t, b, job)
	for _, r := range results {
		if r.Status == broker.StatusFailed {
			require.Equal(t, 0, r.Recovery.Attempts, "no call made")
			require.Equal(t, "budget", r.Error.Class, "its class says why")
			require.True(t, r.Cost == nil || *r.Cost == 0, "nothing spent on it")
		}
	}
	var dead []*deadletter.Entry
	require.NoError(t, deadletter.Each(ctx, b, deadletter.Filter{Job: job.ID}, func(e *deadletter.Entry) error {
		dead = append(dead, e)
		return nil
	}))
	require.Len(t, dead, 11)
	for _, e := range dead {
		require.Equal(t, retry.ReasonBudget, e.Reason)
		require.Equal(t, retry.ClassBudget, e.Class)
	}
	testenv.Eventually(t, 5*time.Second, func() bool {
		j, _, err := b.GetJob(ctx, job.ID)
		return err == nil && j.Cost == 63 && j.Ledger.Held() == 0
	}, "the job's spend: 9 calls at $7, and no budget held once the job is over")

	// The budget is raised and the dead letters replayed: the job finishes.
	_, err := b.UpdateJob(ctx, job.ID, func(j *broker.Job) bool { j.MaxCost = 1000; j.Ledger.Reached = false; return true })
	require.NoError(t, err)
	rep, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: job.ID, Reason: "budget"}})
	require.NoError(t, err)
	require.Equal(t, 11, rep.Replayed)
	testenv.Eventually(t, 30*time.Second, func() bool {
		j, _, err := b.GetJob(ctx, job.ID)
		if err != nil {
			return false
		}
		pr, err := b.JobProgress(ctx, j, false)
		return err == nil && pr.OK == 20
	}, "replayed records succeed")
	require.EqualValues(t, 20, pool.Calls(), "the nine paid ones are not called again")
	testenv.Eventually(t, 5*time.Second, func() bool {
		j, _, err := b.GetJob(ctx, job.ID)
		return err == nil && j.Cost == 140
	}, "the job's spend: 20 calls at $7")
}
