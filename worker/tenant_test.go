package worker_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// tenantBill is a billing endpoint and the workflow of a job that calls
// it: one action, max_tokens 40, at $40 and $160 a million tokens.
func tenantBill(t *testing.T) (*providertest.Biller, func(extra string) *workflow.Workflow) {
	return tenantBillFor(t, 20*time.Millisecond)
}

// tenantBillFor is tenantBill with calls of latency.
func tenantBillFor(t testing.TB, latency time.Duration) (*providertest.Biller, func(extra string) *workflow.Workflow) {
	bill := providertest.NewBiller(map[string]providertest.Rates{"bill-1": {Input: 40, Output: 160}})
	srv := providertest.NewBillingServer(t, bill)
	srv.Script = func(c providertest.BillCall) providertest.BillAnswer {
		// Answers of varied length, all within max_tokens: the last call
		// admitted may pass the budget by a part of its worst case.
		n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(c.Key, ":a"), "r"))
		return providertest.BillAnswer{Latency: latency, Text: "answer " + strings.Repeat("w", n*7%150)}
	}
	return bill, func(extra string) *workflow.Workflow {
		return testenv.Workflow(t, fmt.Sprintf(`providers:
  bill: {kind: openai, base_url: %s/v1, price: {input_per_mtok: 40, output_per_mtok: 160}}
defaults: {provider: bill, model: bill-1, params: {max_tokens: 40}%s}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
`, srv.URL, extra))
	}
}

// A tenant's budget caps its jobs together: three jobs (two without a
// max_cost of their own, one with a larger one) worked by two pools at
// concurrency 16 each. The bill passes the tenant's budget by at most one
// call's worst case (the call that took what was left), every job fails
// naming the tenant's budget, no record is lost, and the tenant's ledger
// is the bill. Another tenant (another account: another store) calling
// the same way meanwhile finishes every record.
func TestTenantBudgetCapsJobsTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit, records = 0.05, 120
	bill, wf := tenantBill(t)
	a := testenv.Broker(t)
	require.NoError(t, a.SetTenantBudget(ctx, limit))
	jobs := []string{"t1", "t2", "t3"}
	for i, id := range jobs {
		w := wf("")
		if i == 2 {
			w = wf(", max_cost: 10")
		}
		testenv.Dispatch(t, a, w, testenv.Records(t, records), dispatcher.Options{JobID: id})
	}
	otherBill, otherWF := tenantBill(t)
	other := testenv.Broker(t)
	testenv.Dispatch(t, other, otherWF(""), testenv.Records(t, 60), dispatcher.Options{JobID: "t1"})

	testenv.Pool(t, a, worker.Config{Concurrency: 16})
	testenv.Pool(t, a, worker.Config{Concurrency: 16})
	testenv.Pool(t, other, worker.Config{Concurrency: 16})

	// A call's worst case as the worker reserves it: 16 tokens for the
	// request, 8 for its message, one a byte of its prompt; max_tokens out.
	var worst float64
	for i := 1; i <= records; i++ {
		p := fmt.Sprintf("[[r%d:a]] record %d", i, i)
		worst = max(worst, (float64(16+8+len(p))*40+40*160)/1e6)
	}
	var costs float64
	for _, id := range jobs {
		j, p := testenv.WaitFinished(t, a, id, time.Minute)
		require.Equal(t, broker.JobFailed, j.Status, id)
		require.Contains(t, j.Reason, "tenant budget $0.0500 reached", id)
		require.EqualValues(t, records, p.OK+p.ByReason["budget"], "%s: every record ok or dead-lettered for the budget (%+v)", id, p)
		require.EqualValues(t, records, p.Done, "%s: one outcome a record", id)
		costs += j.Cost
	}
	oj, op := testenv.WaitFinished(t, other, "t1", time.Minute)
	require.NotEqual(t, broker.JobFailed, oj.Status, "the other tenant's job is not capped: %s", oj.Reason)
	require.EqualValues(t, 60, op.OK)
	require.Len(t, otherBill.Lines(), 60)

	total := bill.Total()
	t.Logf("billed $%.6f of a tenant budget of $%.2f (a call's worst case $%.6f), %d calls", total, limit, worst, len(bill.Lines()))
	require.LessOrEqual(t, total, limit+worst, "the bill passes the tenant's budget by at most one call's worst case")
	require.GreaterOrEqual(t, total, limit-1e-9, "the budget is spent before the jobs stop")
	testenv.Eventually(t, 10*time.Second, func() bool {
		tl, err := a.TenantLedger(ctx)
		return err == nil && math.Abs(tl.Cost-total) < 1e-9 && tl.Held() == 0 && tl.InDoubt() == 0
	}, "the tenant's ledger is the bill, nothing held once the jobs are over")
	require.InDelta(t, total, costs, 1e-9, "and so are the jobs' costs, summed")

	// Each record the budget stopped says so; raised, a replay of one
	// job's dead letters finishes it, calling only those.
	j1, _, err := a.GetJob(ctx, "t1")
	require.NoError(t, err)
	stopped := 0
	for _, r := range testenv.Results(t, a, j1) {
		if r.Status == broker.StatusFailed {
			require.Equal(t, "budget", r.Error.Class)
			require.Contains(t, r.Error.Message, "tenant budget $0.0500 reached")
			stopped++
		}
	}
	require.Greater(t, stopped, 0)
	require.NoError(t, a.SetTenantBudget(ctx, 100))
	calls := len(bill.Lines())
	rep, err := deadletter.Replay(ctx, a, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: "t1", Reason: "budget"}})
	require.NoError(t, err)
	require.Equal(t, stopped, rep.Replayed)
	testenv.Eventually(t, time.Minute, func() bool {
		j, _, err := a.GetJob(ctx, "t1")
		if err != nil {
			return false
		}
		p, err := a.JobProgress(ctx, j, false)
		return err == nil && p.OK == records
	}, "the replayed records succeed under the raised budget")
	require.Len(t, bill.Lines(), calls+stopped, "only the stopped records are called")
}
