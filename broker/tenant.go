package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketTenant holds what is set for the whole tenant — every job of this
// NATS account — apart from any job: its budget (KeyTenantBudget), which
// only the tenant's operator writes, and the ledger that shares it out
// (KeyTenantLedger), which the workers write.
const BucketTenant = "JETPOOL_TENANT"

// Keys of BucketTenant. Two keys, not one, so that a subject permission
// can let workers write the ledger and not the cap
// (deploy/nats/accounts.conf).
const (
	KeyTenantBudget = "budget"
	KeyTenantLedger = "ledger"
)

// TenantBudget is the cap on what all of a tenant's jobs together may
// spend, in dollars, as `jetpool tenant budget` sets it.
type TenantBudget struct {
	MaxCost float64   `json:"max_cost"`
	Set     time.Time `json:"set"`
}

// TenantLedger shares a tenant's budget among its jobs' workers as a job's
// Ledger shares its max_cost: every lease a worker takes of a job's budget
// is also taken here, by the same holder, so Cost + the leases + the doubt
// stay within the tenant's MaxCost when a lease grows. Cost counts what
// the calls of holders that wrote here cost since they first did: spend
// from before a budget was set is not in it.
type TenantLedger struct {
	Cost float64 `json:"cost"`
	Ledger
}

// Committed is what of the tenant's budget is spoken for: spent, held by
// leases, and in doubt.
func (t *TenantLedger) Committed() float64 { return t.Cost + t.Held() + t.InDoubt() }

// TenantBudget reads the tenant's budget; its MaxCost is 0 when none is
// set (or the bucket was never made: a store no dispatcher of this
// version has set up).
func (b *Broker) TenantBudget(ctx context.Context) (TenantBudget, error) {
	var tb TenantBudget
	if made, err := b.tenantBucket(ctx); !made || err != nil {
		return tb, err
	}
	e, err := b.kvLast(ctx, BucketTenant, KeyTenantBudget)
	if err != nil || e == nil {
		return tb, err
	}
	if err := DecodeTenantBudget(e.Data, &tb); err != nil {
		return tb, err
	}
	return tb, nil
}

// DecodeTenantBudget reads the value of KeyTenantBudget; one that is not
// a budget is an error naming the bucket and key.
func DecodeTenantBudget(data []byte, tb *TenantBudget) error {
	if err := json.Unmarshal(data, tb); err != nil {
		return fmt.Errorf("%s %s: not a tenant budget: %w", BucketTenant, KeyTenantBudget, err)
	}
	if tb.MaxCost < 0 || math.IsNaN(tb.MaxCost) || math.IsInf(tb.MaxCost, 0) {
		return fmt.Errorf("%s %s: max_cost %v: want a number of dollars, 0 or more", BucketTenant, KeyTenantBudget, tb.MaxCost)
	}
	return nil
}

// SetTenantBudget sets the tenant's budget (dollars; 0 removes it). Only
// the tenant's operator may: the deploy users of every other role are
// refused the write.
func (b *Broker) SetTenantBudget(ctx context.Context, v float64) error {
	if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("tenant budget %v: want a number of dollars, 0 or more", v)
	}
	kv, err := b.KV(ctx, BucketTenant)
	if err != nil {
		return err
	}
	if v == 0 {
		err := kv.Delete(ctx, KeyTenantBudget)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	}
	data, err := json.Marshal(TenantBudget{MaxCost: v, Set: time.Now().UTC()})
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, KeyTenantBudget, data)
	return err
}

// TenantLedger reads the tenant's ledger (empty when no worker wrote one).
func (b *Broker) TenantLedger(ctx context.Context) (*TenantLedger, error) {
	t, _, err := b.tenantLedger(ctx)
	return t, err
}

func (b *Broker) tenantLedger(ctx context.Context) (*TenantLedger, uint64, error) {
	t := &TenantLedger{}
	if made, err := b.tenantBucket(ctx); !made || err != nil {
		return t, 0, err
	}
	e, err := b.kvLast(ctx, BucketTenant, KeyTenantLedger)
	if err != nil || e == nil {
		return t, 0, err
	}
	if err := json.Unmarshal(e.Data, t); err != nil {
		return nil, 0, fmt.Errorf("%s %s: corrupt entry: %w", BucketTenant, KeyTenantLedger, err)
	}
	return t, e.Sequence, nil
}

// UpdateTenantLedger applies fn to the tenant's ledger and writes it with
// compare-and-set, retrying on conflict, as UpdateState does a job's.
func (b *Broker) UpdateTenantLedger(ctx context.Context, fn func(*TenantLedger) bool) (*TenantLedger, error) {
	kv, err := b.KV(ctx, BucketTenant)
	if err != nil {
		return nil, err
	}
	for range updateTries {
		t, rev, err := b.tenantLedger(ctx)
		if err != nil {
			return nil, err
		}
		if !fn(t) {
			return t, nil
		}
		data, err := json.Marshal(t)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = kv.Create(ctx, KeyTenantLedger, data)
		} else {
			_, err = kv.Update(ctx, KeyTenantLedger, data, rev)
		}
		if err == nil {
			return t, nil
		}
		if !IsConflict(err) {
			return nil, err
		}
	}
	return nil, errors.New("tenant ledger: too many concurrent updates")
}

// tenantBucket reports whether BucketTenant exists: a lookup in a stream
// that does not exist is asked again (it may be being placed), so a
// missing bucket is told apart first.
func (b *Broker) tenantBucket(ctx context.Context) (bool, error) {
	_, err := b.KV(ctx, BucketTenant)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return false, nil
	}
	return err == nil, err
}
