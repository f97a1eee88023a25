//go:build chaos

package e2e

import (
	"fmt"
	"testing"
	"time"
)

// max_cost at concurrency 64 and 256, two worker processes, prices, caps,
// output bounds and record counts varied: the provider's bill never passes
// the cap by more than one call's worst case, and every figure of the
// job's cost is the bill (runBudget). docs/results.md has the figures.
func TestChaosBudgetConcurrency(t *testing.T) {
	t.Parallel()
	for _, c := range []budgetCase{
		{records: 1500, workers: 2, concurrency: 64, maxCost: 0.5, maxTokens: 40, in: 40, out: 160, latency: 30 * time.Millisecond},
		{records: 3000, workers: 2, concurrency: 256, maxCost: 1.2, maxTokens: 200, in: 3, out: 15, latency: 50 * time.Millisecond},
		{records: 2000, workers: 2, concurrency: 256, maxCost: 0.07, maxTokens: 20, in: 150, out: 600, latency: 10 * time.Millisecond},
		{records: 800, workers: 2, concurrency: 64, maxCost: 0.6, maxTokens: 1000, in: 2.5, out: 10, latency: 100 * time.Millisecond},
		{records: 4000, workers: 2, concurrency: 256, maxCost: 0.9, maxTokens: 60, in: 15, out: 60, latency: 0},
	} {
		t.Run(fmt.Sprintf("c%d-%drecords-cap%g", c.concurrency, c.records, c.maxCost), func(t *testing.T) {
			o := runBudget(t, c)
			t.Logf("bill $%.6f of max_cost $%g (%+.2f%%; a call's worst case $%.6f), %d calls, %d ok, %d stopped for the budget",
				o.bill, c.maxCost, 100*(o.bill-c.maxCost)/c.maxCost, o.worst, o.calls, o.ok, o.budget)
		})
	}
}

// A worker SIGKILLed while it holds a lease: its lease is taken back into
// doubt after broker.LeaseTTL, the other worker goes on with the rest of
// the budget (nothing is locked for good beyond what the dead worker
// held), and the cap still holds.
func TestChaosBudgetWorkerKilled(t *testing.T) {
	t.Parallel()
	o := runBudget(t, budgetCase{records: 2000, workers: 2, concurrency: 64, maxCost: 0.6, maxTokens: 40, in: 40, out: 160,
		latency: 40 * time.Millisecond, faultAt: 60, kill: true})
	t.Logf("bill $%.6f of max_cost $0.6, ledger $%.6f + $%.6f in doubt, %d calls", o.bill, o.ledger, o.doubt, o.calls)
}

// A worker frozen (SIGSTOP) past broker.LeaseTTL with calls in flight: its
// lease is taken back into doubt meanwhile, so the other worker cannot
// spend it; thawed, it reports what its calls cost and the doubt goes:
// the ledger is the bill again, the calls paid twice included.
func TestChaosBudgetWorkerFrozen(t *testing.T) {
	t.Parallel()
	o := runBudget(t, budgetCase{records: 2000, workers: 2, concurrency: 64, maxCost: 0.6, maxTokens: 40, in: 40, out: 160,
		latency: 40 * time.Millisecond, faultAt: 60, freeze: 5 * time.Second})
	t.Logf("bill $%.6f of max_cost $0.6, ledger $%.6f, %d calls", o.bill, o.ledger, o.calls)
}
