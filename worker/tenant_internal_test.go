package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// tenantChange, the step on the tenant's ledger, as the job's: a call is
// granted while some of the budget is left (the last may pass it by its
// own worst case), waits while other holders' leases hold what is left,
// and is stopped once the spend reaches the budget; a lease never drops
// below what the job's may still spend (floor); a holder back from a
// silence resolves its doubt instead of counting its spend twice.
func TestTenantChange(t *testing.T) {
	now := time.Now()
	b := &budget{holder: "w1/a", id: "L1"}
	call := func(worst, spent float64) ledgerWrite {
		return ledgerWrite{now: now, worst: worst, need: worst, want: worst, spent: spent}
	}

	tl := &broker.TenantLedger{}
	g := b.tenantChange(tl, 1, call(0.3, 0), 0, 0)
	require.True(t, g.granted)
	require.InDelta(t, 0.3, g.amount, 1e-12, "what the call needs, no more than asked")
	require.InDelta(t, 0.3, tl.Held(), 1e-12)

	// Another holder holds the rest: this call waits, its tenant wanted.
	tl = &broker.TenantLedger{Cost: 0.2}
	tl.SetLease("w2/b", broker.Lease{ID: "L2", Amount: 0.8, Renewed: now})
	g = b.tenantChange(tl, 1, call(0.3, 0), 0, 0)
	require.False(t, g.granted)
	require.Nil(t, g.stop)
	require.Equal(t, now, tl.Wanted)

	// A little left: granted, and the spend may pass the budget by this
	// call's worst case at most.
	tl = &broker.TenantLedger{Cost: 0.95}
	g = b.tenantChange(tl, 1, call(0.3, 0), 0, 0)
	require.True(t, g.granted)
	require.LessOrEqual(t, tl.Committed(), 1+0.3)

	// Spent: stopped, naming the budget.
	tl = &broker.TenantLedger{Cost: 1}
	g = b.tenantChange(tl, 1, call(0.3, 0), 0, 0)
	require.NotNil(t, g.stop)
	require.Contains(t, g.stop.Message, "tenant budget $1.00 reached")

	// A renewal keeps at least what the job's lease holds.
	tl = &broker.TenantLedger{}
	g = b.tenantChange(tl, 1, ledgerWrite{now: now, reserved: 0.1}, 0.4, 0)
	require.InDelta(t, 0.4, g.amount, 1e-12)

	// Taken back into doubt while silent, then back: its doubt goes, its
	// spend since the last write counted once.
	tl = &broker.TenantLedger{Cost: 0.5}
	tl.SetLease(b.holder, broker.Lease{ID: b.id, Amount: 0.3, Reported: 0.5, Renewed: now.Add(-broker.LeaseTTL - time.Second)})
	require.True(t, tl.Reclaim(now))
	require.InDelta(t, 0.3, tl.InDoubt(), 1e-12)
	g = b.tenantChange(tl, 1, ledgerWrite{now: now, spent: 0.6}, 0, 0.5)
	require.Zero(t, tl.InDoubt())
	require.InDelta(t, 0.6, tl.Cost, 1e-12, "0.1 spent since the lease was last written")
	require.Zero(t, g.amount)
}
