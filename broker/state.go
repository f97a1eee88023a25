package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
)

// RecordState is what one delivery of a record's action passes on to the
// next: the calls it made, the deliveries those spent, the waits, and an
// answer that was paid for but could not be stored. It is kept in the KV
// bucket JETPOOL_ATTEMPTS, one entry per record and action
// (StateKey), only while a record needs one: from its first redelivery by
// jetpool (a retry, a wait, a hand-back at a stop) until its final outcome.
//
// A record's deliveries are counted twice: by JetStream (every delivery,
// NumDelivered) and here. Every delivery jetpool hands back itself is
// counted in Handled; the difference is the deliveries that ended with no
// word from any worker (a process killed or hung: AckWait ran out), which
// jetpool bounds itself (docs/durability.md), so no record depends on the
// server's MaxDeliver advisories.
type RecordState struct {
	// Replays is the replay generation the state belongs to: a state of an
	// earlier generation is ignored (LoadState returns none).
	Replays int `json:"replays"`
	// Attempts are the record's calls so far that did not end it, in order.
	Attempts []retry.Attempt `json:"attempts,omitempty"`
	// Deliveries is the exec layer's budget spent: deliveries that made calls
	// and were redelivered.
	Deliveries int `json:"deliveries,omitempty"`
	// Handled is the deliveries a worker handed back and accounted for here
	// (retried, parked, handed back at a stop).
	Handled int `json:"handled,omitempty"`
	// Lost is the deliveries that ended with no word from any worker (the
	// process was killed or hung, and AckWait ran out), counted when the
	// next delivery hands the record back.
	Lost int `json:"lost,omitempty"`
	// HandBacks is the deliveries a stopping worker handed back.
	HandBacks int `json:"hand_backs,omitempty"`
	// Waits and Waited are the times the record was parked for a provider
	// (a shared cooldown, an open circuit) without a call, and how long in all.
	Waits  int           `json:"waits,omitempty"`
	Waited time.Duration `json:"waited,omitempty"`
	// Answer is a paid answer whose result a worker could not store before
	// it had to stop: the next delivery stores it instead of calling again.
	Answer *Result `json:"answer,omitempty"`
	// TwinWaited: the record waited for a twin delivery, after an outage
	// held its lookup or for another delivery's claim (worker/handle.go):
	// it does not wait for an outage again, and a claim of an earlier
	// delivery stands against it (Bid.Waited).
	TwinWaited bool `json:"twin_waited,omitempty"`
}

// StateKey is the JETPOOL_ATTEMPTS key of a record's action.
func StateKey(job, action, record string) string {
	return job + "." + action + "." + RecordToken(record)
}

// LoadState reads the state of a record's action in replay generation
// replays; nil when there is none (or only one of an earlier generation).
func (b *Broker) LoadState(ctx context.Context, job, action, record string, replays int) (*RecordState, error) {
	// From the bucket's leader, as a lookup of an outcome is: a replica
	// behind could miss an answer parked a moment ago (leaderget.go).
	m, err := b.kvLast(ctx, BucketAttempts, StateKey(job, action, record))
	if err != nil {
		return nil, fmt.Errorf("state of %s/%s/%s: %w", job, action, record, err)
	}
	if m == nil {
		return nil, nil
	}
	var st RecordState
	if err := json.Unmarshal(m.Data, &st); err != nil {
		// A state that cannot be read is no state: its deliveries count as
		// unaccounted, which the crash allowance bounds.
		return nil, nil
	}
	if st.Replays != replays {
		return nil, nil
	}
	return &st, nil
}

// SaveState writes the state of a record's action.
func (b *Broker) SaveState(ctx context.Context, job, action, record string, st *RecordState) error {
	kv, err := b.KV(ctx, BucketAttempts)
	if err != nil {
		return err
	}
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, StateKey(job, action, record), data); err != nil {
		return fmt.Errorf("save state of %s/%s/%s: %w", job, action, record, err)
	}
	return nil
}

// ClearState removes the state of a record's action (its outcome is final).
func (b *Broker) ClearState(ctx context.Context, job, action, record string) error {
	kv, err := b.KV(ctx, BucketAttempts)
	if err != nil {
		return err
	}
	return kv.Purge(ctx, StateKey(job, action, record))
}

// claim is a worker's right to call the model for a record's action,
// for a while (Claim).
type claim struct {
	Holder   string    `json:"holder"`
	Replays  int       `json:"replays"`
	Delivery int       `json:"delivery,omitempty"`
	At       time.Time `json:"at"`
}

// Bid is a delivery's bid for the right to call the model for a record's
// action (Claim).
type Bid struct {
	Job, Action, Record string
	Replays             int
	// Holder is unique to the delivery; Delivery is its number
	// (NumDelivered).
	Holder   string
	Delivery int
	// Waited: the record already waited for another holder's claim (or
	// for a twin after an outage), so a claim of an earlier delivery
	// stands against it too.
	Waited bool
	// TTL is how long a claim stands.
	TTL time.Duration
}

// Claim takes the right to call the model for a record's action for
// bid's holder, unless another holder's claim stands: of the same replay
// generation, younger than the TTL, and of a delivery at least as late as
// the bid's (or the bidder waited for it already). On a replicated work
// stream a worker claims before every call (worker/handle.go): a consumer
// leader lost just after a delivery it had not passed on delivers the
// record again as new, and the twin, a first delivery too, must not call
// while the first is calling. A claim of an earlier delivery is taken
// over: that delivery ended (retried, parked) or its process died, and
// AckWait ran out. The claim is a create on the bucket's leader, one write
// (a read too only when a claim is there); it lapses after the TTL or is
// let go (Unclaim), and the winner's result, once stored, is found before
// any claim is asked for. Claims are kept in JETPOOL_CLAIMS, in memory
// (topology.go). rev is the claim's revision, for Unclaim.
func (b *Broker) Claim(ctx context.Context, bid Bid) (rev uint64, ok bool, _ error) {
	kv, err := b.KV(ctx, BucketClaims)
	if err != nil {
		return 0, false, err
	}
	key := StateKey(bid.Job, bid.Action, bid.Record)
	data, err := json.Marshal(claim{Holder: bid.Holder, Replays: bid.Replays, Delivery: bid.Delivery, At: time.Now()})
	if err != nil {
		return 0, false, err
	}
	rev, err = kv.Create(ctx, key, data)
	switch {
	case err == nil:
		return rev, true, nil
	case !IsConflict(err):
		return 0, false, fmt.Errorf("claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
	}
	m, err := b.kvLast(ctx, BucketClaims, key)
	if err != nil {
		return 0, false, fmt.Errorf("claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
	}
	if m == nil { // let go of a moment ago
		rev, err = kv.Create(ctx, key, data)
	} else {
		var c claim
		if json.Unmarshal(m.Data, &c) == nil && c.Replays == bid.Replays && c.Holder != bid.Holder &&
			time.Since(c.At) < bid.TTL && (bid.Waited || c.Delivery >= bid.Delivery) {
			return 0, false, nil
		}
		rev, err = kv.Update(ctx, key, data, m.Sequence)
	}
	switch {
	case err == nil:
		return rev, true, nil
	case IsConflict(err):
		return 0, false, nil // another holder took it a moment ago
	}
	return 0, false, fmt.Errorf("claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
}

// Unclaim lets go of a claim of revision rev (Claim) whose delivery ended
// without an outcome stored (retried, parked, handed back), so a later
// delivery that waited for it need not wait out its TTL. A claim taken
// over since is left alone.
func (b *Broker) Unclaim(ctx context.Context, job, action, record string, rev uint64) error {
	kv, err := b.KV(ctx, BucketClaims)
	if err != nil {
		return err
	}
	err = kv.Delete(ctx, StateKey(job, action, record), jetstream.LastRevision(rev))
	if err != nil && !IsConflict(err) {
		return fmt.Errorf("unclaim %s/%s/%s: %w", job, action, record, err)
	}
	return nil
}

// ClaimsKept is how long the JETPOOL_CLAIMS bucket keeps a claim (its max
// age): a claim stands at most that long, whatever its TTL. The bucket holds the claims
// of that long in the servers' memory store (about 300 bytes a call); one
// the full store refuses is an error, and the call goes on without it.
const ClaimsKept = 5 * time.Minute
