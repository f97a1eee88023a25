package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
)

// A tenant's budget on the shipped deploy config, every command as the
// role the deploy README gives it: acme's operator sets $0.05; acme's
// worker may not raise it (neither `jetpool tenant budget` nor the `nats`
// CLI); two acme jobs dispatched by its dispatcher and worked by a
// `jetpool worker` process as its worker user, on a billing endpoint, are
// billed at most the budget and one call's worst case and both fail
// naming it; globex, another account, has no budget and finishes its job.
func TestTenantBudgetAsDeployUsers(t *testing.T) {
	t.Parallel()
	srv := startDeployNATS(t)
	const limit, records = 0.05, 80

	r := jetpool(t, srv.as("acme-operator"), "tenant", "budget", "0.05")
	require.Equal(t, 0, r.code, r.stderr)
	r = jetpool(t, srv.as("acme-worker"), "tenant", "budget", "1000")
	require.Equal(t, 2, r.code, "a worker may not set the tenant's budget: %s", r.stdout)
	require.Contains(t, r.stderr, "only the tenant's operator may")
	put := srv.nats(tool(t, "nats"), "acme-worker", "kv", "put", "JETPOOL_TENANT", "budget", `{"max_cost":1000}`)
	require.NotEqual(t, 0, put.code, "the server refuses the worker's write: %s", put.stdout)
	r = jetpool(t, srv.as("acme-viewer"), "tenant", "budget")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "tenant budget $0.0500", "the viewer reads it, as the operator set it")

	type tenant struct {
		name string
		bill *providertest.Biller
		addr string
		wf   string
	}
	var tenants []tenant
	for _, name := range []string{"acme", "globex"} {
		bill := providertest.NewBiller(map[string]providertest.Rates{"bill-1": {Input: 40, Output: 160}})
		bs := providertest.NewBillingServer(t, bill)
		bs.Script = func(c providertest.BillCall) providertest.BillAnswer {
			n, _ := strconv.Atoi(strings.TrimPrefix(strings.TrimSuffix(c.Key, ":a"), "r"))
			return providertest.BillAnswer{Latency: 20 * time.Millisecond, Text: "answer " + strings.Repeat("w", n*7%150)}
		}
		wf := testenv.WriteFile(t, name+".yaml", fmt.Sprintf(`providers:
  bill: {kind: openai, base_url: %s/v1, api_key_env: BILL_KEY, price: {input_per_mtok: 40, output_per_mtok: 160}}
defaults: {provider: bill, model: bill-1, params: {max_tokens: 40}}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
`, bs.URL))
		tenants = append(tenants, tenant{name: name, bill: bill, addr: bs.Listener.Addr().String(), wf: wf})
	}
	input := testenv.Records(t, records)
	jobs := map[string][]string{"acme": {"t1", "t2"}, "globex": {"g1"}}
	for _, tn := range tenants {
		for _, job := range jobs[tn.name] {
			r := jetpool(t, srv.as(tn.name+"-dispatcher"), "dispatch", tn.wf, "--input", input, "--job", job, "--no-preflight")
			require.Equal(t, 0, r.code, r.stderr)
		}
		start(t, srv.as(tn.name+"-worker", "BILL_KEY", "k", "JETPOOL_KEY_HOSTS", "BILL_KEY="+tn.addr), "worker", "--concurrency", "16")
	}

	status := func(tn, job string) jobstatus.Job {
		r := jetpool(t, srv.as(tn+"-operator"), "status", job, "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var s jobstatus.Job
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		return s
	}
	done := func(tn, job string) jobstatus.Job {
		var s jobstatus.Job
		testenv.Eventually(t, 2*time.Minute, func() bool {
			s = status(tn, job)
			return s.Succeeded+s.Failed == records && s.Status != "running"
		}, "%s's job %s finished", tn, job)
		return s
	}
	for _, job := range jobs["acme"] {
		s := done("acme", job)
		require.Equal(t, "failed", s.Status, job)
		require.Contains(t, s.Reason, "tenant budget $0.0500 reached", job)
		require.EqualValues(t, s.Failed, s.DeadByReas["budget"], "%s: each failure is the budget's", job)
	}
	g := done("globex", "g1")
	require.Equal(t, "completed", g.Status, "globex has no budget: %s", g.Reason)
	require.EqualValues(t, records, g.Succeeded)

	// A call's worst case as the worker reserves it: 16 tokens for the
	// request, 8 for its message, one a byte of its prompt; max_tokens out.
	var worst float64
	for i := 1; i <= records; i++ {
		p := fmt.Sprintf("[[r%d:a]] record %d", i, i)
		worst = max(worst, (float64(16+8+len(p))*40+40*160)/1e6)
	}
	billed := tenants[0].bill.Total()
	t.Logf("acme billed $%.6f of its $%.2f budget (a call's worst case $%.6f) in %d calls; globex $%.6f in %d calls",
		billed, limit, worst, len(tenants[0].bill.Lines()), tenants[1].bill.Total(), len(tenants[1].bill.Lines()))
	require.LessOrEqual(t, billed, limit+worst, "the bill passes the budget by one call's worst case at most")
	require.GreaterOrEqual(t, billed, limit-1e-9, "the budget is spent before the jobs stop")
	var tb struct {
		MaxCost float64 `json:"max_cost"`
		Cost    float64 `json:"cost"`
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		r := jetpool(t, srv.as("acme-operator"), "tenant", "budget", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &tb))
		return math.Abs(billed-tb.Cost) < 1e-9
	}, "the tenant's ledger is the bill (each worker writes its spend within a second)")
	require.Equal(t, limit, tb.MaxCost, "the worker's write was refused: the budget is the operator's")
}
