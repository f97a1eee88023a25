package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
)

// budgetCase is a job with a max_cost on the billing fake, worked by
// `jetpool worker` processes.
type budgetCase struct {
	records     int
	workers     int
	concurrency int
	maxCost     float64
	maxTokens   int
	in, out     float64 // the price, dollars per million tokens
	latency     time.Duration
	// faultAt, when set, SIGKILLs the first worker (kill) or stops it
	// (SIGSTOP) for freeze once this many calls were billed: its lease is
	// taken back into doubt once it expires; a frozen worker that comes
	// back resolves it.
	faultAt int
	kill    bool
	freeze  time.Duration
}

// budgetOutcome is what a budgetCase ended with.
type budgetOutcome struct {
	bill, worst, ledger, doubt float64
	calls, ok, budget          int
}

// runBudget runs c and holds it to the promise of a budget: the provider's
// bill passes max_cost by at most one call's worst case (jetpool's own
// reservation, computed here from the call's prompt as the worker does),
// nothing is lost (every record ok or dead-lettered with reason budget),
// the job fails saying so, and every figure of its cost is the bill.
func runBudget(t *testing.T, c budgetCase) budgetOutcome {
	t.Helper()
	ackWait := 10 * time.Second
	b, url := embeddedServer(t, ackWait)
	bill := providertest.NewBiller(map[string]providertest.Rates{"bill-1": {Input: c.in, Output: c.out}})
	srv := providertest.NewBillingServer(t, bill)
	srv.Script = func(bc providertest.BillCall) providertest.BillAnswer {
		// Answers of varied length, all within max_tokens.
		n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(bc.Key, ":a"), "r"))
		return providertest.BillAnswer{Latency: c.latency, Text: "answer " + strings.Repeat("w", n%(4*c.maxTokens-8))}
	}
	prompt := "[[{{ .id }}:a]] {{ .text }}, said thrice: {{ .text }} {{ .text }}"
	wf := testenv.Workflow(t, fmt.Sprintf(`providers:
  bill: {kind: openai, base_url: %s/v1, api_key_env: BILL_KEY, price: {input_per_mtok: %g, output_per_mtok: %g}}
defaults: {provider: bill, model: bill-1, max_cost: %g, params: {max_tokens: %d}}
actions:
  - {name: a, prompt: %q}
`, srv.URL, c.in, c.out, c.maxCost, c.maxTokens, prompt))
	job := testenv.Dispatch(t, b, wf, testenv.Records(t, c.records), dispatcher.Options{JobID: "budget"}).Job
	// A call's worst case as the worker reserves it: 16 tokens for the
	// request, 8 for its message, one a byte of its prompt; max_tokens out.
	var worst float64
	for i := 1; i <= c.records; i++ {
		text := fmt.Sprintf("record %d", i)
		p := fmt.Sprintf("[[r%d:a]] %s, said thrice: %s %s", i, text, text, text)
		worst = max(worst, (float64(16+8+len(p))*c.in+float64(c.maxTokens)*c.out)/1e6)
	}

	env := workerEnv(url, ackWait, "BILL_KEY", "k", "JETPOOL_KEY_HOSTS", "BILL_KEY="+srv.Listener.Addr().String(),
		"JETPOOL_METRICS_ADDR", "127.0.0.1:0")
	var procs []*proc
	var metrics []string
	for range c.workers {
		p := start(t, env, "worker", "--concurrency", strconv.Itoa(c.concurrency), "--job", job.ID)
		metrics = append(metrics, p.waitOutput(t, regexp.MustCompile(`"addr":"(127\.0\.0\.1:\d+)"[^\n]*metrics on`), 30*time.Second))
		procs = append(procs, p)
	}
	if c.faultAt > 0 {
		testenv.Eventually(t, time.Minute, func() bool { return len(bill.Lines()) >= c.faultAt }, "%d calls billed", c.faultAt)
		if c.kill {
			procs[0].signal(t, syscall.SIGKILL)
			procs[0].wait(t, 10*time.Second)
			metrics = metrics[1:]
			t.Logf("killed a worker after %d calls billed", len(bill.Lines()))
		} else {
			procs[0].signal(t, syscall.SIGSTOP)
			t.Logf("froze a worker after %d calls billed", len(bill.Lines()))
			testenv.Eventually(t, broker.LeaseTTL+time.Minute, func() bool { return costStatus(t, url, job.ID).CostInDoubt > 0 },
				"the frozen worker's lease counted in doubt")
			time.Sleep(c.freeze) // the fault: frozen this much longer, its lease in doubt
			procs[0].signal(t, syscall.SIGCONT)
		}
	}
	j, p := waitFinished(t, b, job.ID, 3*time.Minute)
	if c.freeze > 0 {
		// The thawed worker's calls end and their answers are stored after
		// the other worker ended their records for the budget: the job's
		// results are read once it has written its last spend.
		testenv.Eventually(t, time.Minute, func() bool {
			st := costStatus(t, url, job.ID)
			return st.CostHeld == 0 && st.CostInDoubt == 0
		}, "the thawed worker's lease resolved and handed back")
		j, p = waitFinished(t, b, job.ID, time.Minute)
	}
	o := budgetOutcome{bill: bill.Total(), worst: worst, calls: srv.Calls()}
	final := map[string]*broker.Result{}
	require.NoError(t, b.EachFinal(context.Background(), j, func(r *broker.Result, isFinal bool) error {
		if isFinal {
			require.NotContains(t, final, r.ID, "one final result a record")
			final[r.ID] = r
		}
		return nil
	}))
	for _, r := range final {
		switch {
		case r.Status == broker.StatusOK:
			o.ok++
		case r.Reason == "budget":
			o.budget++
		}
	}
	if c.freeze == 0 {
		require.EqualValues(t, c.records, p.Done, "one outcome a record: none dead-lettered for the budget on top of its stored answer")
	} else if p.Done > int64(c.records) {
		// A frozen worker that comes back stores the answers it held, also
		// of records another worker has since ended for the budget: the
		// answer is the record's line, the dead letter stays. Fencing a
		// thawed worker's writes is a known gap (docs/durability.md).
		t.Logf("%d records have both a stored answer and a budget dead letter after the freeze", p.Done-int64(c.records))
	}

	require.Equal(t, broker.JobFailed, j.Status, "the budget stopped the job")
	limit := fmt.Sprintf("$%.4f", c.maxCost)
	if c.maxCost >= 1 {
		limit = fmt.Sprintf("$%.2f", c.maxCost)
	}
	require.Contains(t, j.Reason, "max_cost "+limit+" reached")
	require.Equal(t, c.records, o.ok+o.budget, "nothing lost: every record ok or dead-lettered for its budget (%+v)", p)
	require.Len(t, final, c.records)
	require.Greater(t, o.budget, 0)
	require.LessOrEqual(t, o.bill, c.maxCost+worst, "the bill passes max_cost by at most one call's worst case")
	if !c.kill && c.freeze == 0 {
		require.GreaterOrEqual(t, o.bill, c.maxCost-0.0001, "and the budget is spent before the job stops")
	}

	var results float64
	for _, r := range final {
		if r.TotalCost != nil {
			results += *r.TotalCost
		}
	}
	if c.kill {
		// What the killed worker held is in doubt: its answers that came
		// in after its last renewal were billed and never reported.
		testenv.Eventually(t, 10*time.Second, func() bool {
			st := costStatus(t, url, job.ID)
			o.ledger, o.doubt = st.Cost, st.CostInDoubt
			return st.CostHeld == 0
		}, "the leases handed back")
		require.Greater(t, o.doubt, 0.0)
		require.LessOrEqual(t, o.ledger, o.bill+0.0001, "the ledger counts what was reported")
		require.GreaterOrEqual(t, o.ledger+o.doubt, o.bill-0.0001, "and what is in doubt covers the rest")
		require.LessOrEqual(t, o.ledger+o.doubt, c.maxCost+worst)
		return o
	}
	// The ledger: once the workers have written their last spend, it is
	// the bill — a frozen worker's calls too, paid again or not.
	testenv.Eventually(t, 10*time.Second, func() bool {
		st := costStatus(t, url, job.ID)
		o.ledger, o.doubt = st.Cost, st.CostInDoubt
		return math.Abs(st.Cost-o.bill) <= 0.0001 && st.CostHeld == 0 && st.CostInDoubt == 0
	}, "status --json: the ledger's cost is the bill (%v), nothing held or in doubt", bill.Total())
	var scraped float64
	for _, addr := range metrics {
		scraped += scrapeCost(t, addr)
	}
	require.InDelta(t, o.bill, scraped, 0.0001, "jetpool_cost_dollars_total over the workers")
	if c.freeze == 0 {
		require.InDelta(t, o.bill, results, 0.0001, "the results' total_cost, summed")
	} else {
		require.LessOrEqual(t, results, o.bill+0.0001, "the results hold the calls that made them")
	}
	return o
}

// costStatus is the cost figures of `jetpool status JOB --json` on url.
func costStatus(t *testing.T, url, job string) (st struct {
	Cost        float64 `json:"cost"`
	CostHeld    float64 `json:"cost_held"`
	CostInDoubt float64 `json:"cost_in_doubt"`
}) {
	t.Helper()
	r := jetpool(t, map[string]string{"JETPOOL_NATS_URL": url}, "status", job, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	return st
}

// scrapeCost sums jetpool_cost_dollars_total on a worker's /metrics.
func scrapeCost(t *testing.T, addr string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var sum float64
	for _, m := range regexp.MustCompile(`(?m)^jetpool_cost_dollars_total\{[^}]*\} (\S+)$`).FindAllStringSubmatch(string(body), -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		sum += v
	}
	return sum
}

// max_cost is a cap with two worker processes at concurrency 64: the
// provider's bill passes it by at most one call's worst case, and every
// figure of the job's cost — status, the results, each worker's /metrics —
// is the bill. (Larger and longer runs: budget_chaos_test.go.)
func TestBudgetCapsTwoWorkers(t *testing.T) {
	t.Parallel()
	o := runBudget(t, budgetCase{records: 300, workers: 2, concurrency: 64, maxCost: 0.05, maxTokens: 40,
		in: 40, out: 160, latency: 20 * time.Millisecond})
	t.Logf("bill $%.6f of max_cost $0.05 (a call's worst case $%.6f), %d calls, %d ok, %d stopped for the budget",
		o.bill, o.worst, o.calls, o.ok, o.budget)
}
