package worker

import (
	"context"

	"github.com/jetpool/jetpool/broker"
)

// storedOutcome finds the outcome of a record of a failed job stored
// already: a redelivery of a record its worker stored and did
// not ack (killed, frozen), which must not be dead-lettered on top of it
// for the job's failure (a budget reached, a raise). The zero verdict: none
// is stored, or the store did not answer (the record then ends with the
// job, as before).
func (jr *jobRunner) storedOutcome(ctx context.Context, d *delivery) verdict {
	if d.unpaid() {
		return verdict{}
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	last, _, err := jr.p.b.LastOutcome(ctx, d.job, d.action.Name, d.env.ID)
	switch {
	case err != nil || last == nil:
		return verdict{}
	case last.Status == broker.StatusOK:
		d.run = paidRun(last)        // worker/cost.go
		d.account = ownAccount(last) // forwarded again with the record
		return verdict{kind: verdictStored, result: last}
	case last.Replays >= d.replays:
		return verdict{kind: verdictStored, result: last}
	}
	return verdict{}
}
