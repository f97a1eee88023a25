package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
)

const tenantHelp = `Show or set the tenant's budget: a cap on what all the jobs of this NATS account
(a tenant, deploy/nats/accounts.conf) spend together, beside each job's max_cost.

  jetpool tenant budget [--json]    show it: the budget, spent, held for calls, in doubt
  jetpool tenant budget USD         set it (dollars, e.g. 500 or 12.50)
  jetpool tenant budget none        remove it

Each call's worst case is set aside from it before the call is sent, as from a job's
max_cost, so the tenant's spend passes it by one call's worst case at most. Once it is
spent, each job fails at its next call, naming the budget, and its records not called
are dead-lettered with reason budget: raise the budget, then 'jetpool retry --job JOB
--reason budget'. Only the tenant's operator user may set it; workers read it.`

func cmdTenant(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "tenant", "budget [USD | none] [--json]", tenantHelp)
	asJSON := fs.Bool("json", false, "print the budget as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || pos[0] != "budget" || len(pos) > 2 {
		fs.Usage()
		return usageErr("want: tenant budget [USD | none]")
	}
	set := -1.0
	if len(pos) == 2 {
		if set, err = tenantAmount(pos[1]); err != nil {
			return err
		}
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	c := e.client(b)
	if set >= 0 {
		if !b.MayPublish(ctx, "$KV."+broker.BucketTenant+"."+broker.KeyTenantBudget) {
			return usageErr("tenant budget: this NATS user may not set the tenant's budget (only the tenant's operator may)")
		}
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		if err := c.SetTenantBudget(wctx, set); err != nil {
			return fmt.Errorf("tenant budget: %w", err)
		}
	}
	tb, err := c.TenantBudget(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(tb)
	}
	printTenantBudget(e, tb)
	return nil
}

// tenantAmount reads the USD argument of `tenant budget`: dollars, or
// none (0: no budget).
func tenantAmount(s string) (float64, error) {
	if s == "none" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 || v != v || v > 1e12 {
		return 0, usageErr("tenant budget: want a positive amount of dollars such as 500 or 12.50, or none; got %q", s)
	}
	return v, nil
}

func printTenantBudget(e *env, tb *jp.TenantBudget) {
	if tb.MaxCost <= 0 {
		fmt.Fprintln(e.stdout, "no tenant budget: each job is capped by its own max_cost only")
		if tb.Cost > 0 {
			fmt.Fprintf(e.stdout, "spent while one was set: %s\n", dollars(tb.Cost))
		}
		return
	}
	left := tb.MaxCost - tb.Cost - tb.Held - tb.InDoubt
	fmt.Fprintf(e.stdout, "tenant budget %s (set %s): %s spent, %s held for calls, %s in doubt, %s left\n",
		dollars(tb.MaxCost), tb.Set.Local().Format(time.DateTime), dollars(tb.Cost), dollars(tb.Held),
		dollars(tb.InDoubt), dollars(max(left, 0)))
	if tb.Cost+tb.InDoubt >= tb.MaxCost {
		fmt.Fprintln(e.stdout, "reached: jobs fail at their next call; raise it, then jetpool retry --job JOB --reason budget")
	}
}
