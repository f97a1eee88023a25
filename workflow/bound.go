package workflow

import (
	"cmp"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Bound is the worst case of one record of the action, with its provider
// p: the most calls it can make — every attempt of every delivery, each
// repair round and max_tokens doubling a round of attempts of its own,
// batch rounds — capped by max_calls, and the longest it can take. It is a
// hard bound that every retry layer keeps (docs/design.md §9); `jetpool
// validate` prints it.
func (a *Action) Bound(p provider.Config) retry.Bound {
	ra := retry.Action{Policy: a.Retry, MaxCalls: a.MaxCalls, Fallbacks: len(a.Fallbacks),
		CallTimeout: cmp.Or(p.Timeout, provider.TimeoutDefault), RetryAfterMax: p.RetryAfterCap()}
	if a.Expect != nil {
		ra.Repairs = a.Expect.RepairAttempts
	}
	if a.OnTruncated == OnTruncatedGrow {
		ra.Repairs += GrowMax
	}
	if a.Mode == ModeBatch {
		ra.BatchRounds = a.Retry.Attempts()
	}
	return ra.Bound()
}
