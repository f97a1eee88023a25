package worker

import (
	"context"

	"github.com/jetpool/jetpool/broker"
)

// storedOutcome is the outcome of a record of a failed job whose outcome
// is stored already: a redelivery of a record its worker stored and did
// not ack (killed, frozen), which must not be dead-lettered on top of it
// for the job's failure (a budget reached, a raise). settled false: none
// is stored, or the store did not answer (the record then ends with the
// job, as before).
func (jr *jobRunner) storedOutcome(ctx context.Context, d *delivery) (o outcome, settled bool) {
	if d.unpaid() {
		return outcome{}, false
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	last, _, err := jr.p.b.LastOutcome(ctx, d.job, d.action.Name, d.env.ID)
	switch {
	case err != nil || last == nil:
		return outcome{}, false
	case last.Status == broker.StatusOK:
		d.run = paidRun(last)        // worker/cost.go
		d.account = ownAccount(last) // forwarded again with the record
		return outcome{kind: outcomeSettled, result: last}, true
	case last.Replays >= d.replays:
		return outcome{kind: outcomeSettled, result: last}, true
	}
	return outcome{}, false
}
