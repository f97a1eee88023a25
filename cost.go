package jetpool

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// SetMaxCost sets a job's budget (max_cost, dollars). Calls go again
// while their worst cases fit it.
func (c *Client) SetMaxCost(ctx context.Context, id string, v float64) (*broker.Job, error) {
	return c.b.UpdateJob(ctx, id, func(j *broker.Job) bool {
		if j.MaxCost == v {
			return false
		}
		j.MaxCost = v
		j.Ledger.Reached = false // a new budget: calls go while their worst cases fit it
		return true
	})
}

// ApplyMaxCost sets maxCost (above 0) on a job dispatched before with
// another budget, and updates *job.
func (c *Client) ApplyMaxCost(ctx context.Context, job *broker.Job, maxCost float64) error {
	if maxCost <= 0 || job.MaxCost == maxCost {
		return nil
	}
	j, err := c.SetMaxCost(ctx, job.ID, maxCost)
	if err == nil {
		*job = *j
	}
	return err
}

// RaiseBudget sets a job's max_cost before its dead letters are replayed:
// refused (ErrInvalid), and nothing changed, when it would not cover what
// the job has spent, or when wf (the workflow the replay runs under; nil:
// not checked) could not run under a budget.
func (c *Client) RaiseBudget(ctx context.Context, id string, v float64, wf *workflow.Workflow) (*broker.Job, error) {
	j, _, err := c.b.GetJob(ctx, id)
	if err != nil {
		return nil, err
	}
	if spent := j.Cost + j.Ledger.InDoubt(); v <= spent {
		return nil, invalid(fmt.Errorf("job %s has spent %s already: --max-cost %s would stop it again at once", id, Dollars(spent), Dollars(v)))
	}
	if wf != nil {
		if err := wf.CheckBudget(); err != nil {
			return nil, invalid(fmt.Errorf("--max-cost: %w (a fixed workflow: jetpool retry --job %s --workflow FIXED.yaml --max-cost %s)", err, id, Dollars(v)))
		}
	}
	return c.SetMaxCost(ctx, id, v)
}

// Dollars renders an amount: cents for sums above a dollar, four decimals
// below (a job of a few thousand cheap calls costs fractions of a cent).
func Dollars(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.4f", v)
}

// TenantBudget is a tenant's budget — the cap on what all the jobs of its
// NATS account spend together — and how much of it is spoken for.
type TenantBudget struct {
	// MaxCost is the budget in dollars; 0: none is set.
	MaxCost float64 `json:"max_cost"`
	// Set is when it was last set.
	Set time.Time `json:"set,omitzero"`
	// Cost is what the tenant's calls have cost while it had a budget, as
	// the workers wrote it (each at most a second behind); Held what
	// their leases hold for calls under way and the next ones; InDoubt
	// what workers that stopped answering held (they may have spent it).
	Cost    float64 `json:"cost"`
	Held    float64 `json:"held"`
	InDoubt float64 `json:"in_doubt"`
}

// TenantBudget reads the budget of the tenant this client's user belongs
// to, and its ledger.
func (c *Client) TenantBudget(ctx context.Context) (*TenantBudget, error) {
	tb, err := c.b.TenantBudget(ctx)
	if err != nil {
		return nil, err
	}
	l, err := c.b.TenantLedger(ctx)
	if err != nil {
		return nil, err
	}
	l.Reclaim(time.Now()) // a lease past its renewal counts in doubt here (a copy)
	return &TenantBudget{MaxCost: tb.MaxCost, Set: tb.Set, Cost: l.Cost, Held: l.Held(), InDoubt: l.InDoubt()}, nil
}

// SetTenantBudget sets the tenant's budget in dollars (0 removes it).
// Only the tenant's operator may (deploy/nats/accounts.conf); calls under
// way when it is lowered still settle, and the jobs stop at their next
// call once what is spent reaches it.
func (c *Client) SetTenantBudget(ctx context.Context, v float64) error {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return invalid(fmt.Errorf("tenant budget %v: want a number of dollars, 0 or more", v))
	}
	return c.b.SetTenantBudget(ctx, v)
}
