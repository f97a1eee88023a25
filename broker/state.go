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
	// OpenCalls and OpenRound are the calls of a delivery cut short before
	// its session was over (parked for a provider that stopped taking calls,
	// handed back by a stopping worker): all of them, and those of the round
	// that was cut. Such a delivery is not spent: the next one continues it
	// with the calls it had left. Zero once a delivery is spent.
	OpenCalls int `json:"open_calls,omitempty"`
	OpenRound int `json:"open_round,omitempty"`
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
	// Usage and Cost are what the answered calls of the earlier deliveries
	// (of this generation) spent, so that the record's result counts every
	// call it was billed for, not only the last delivery's.
	Usage Usage   `json:"usage,omitzero"`
	Cost  float64 `json:"cost,omitempty"`
	// TwinWaited: the record waited for a twin delivery, after an outage
	// held its lookup or for another delivery's claim (worker/handle.go):
	// it does not wait for an outage again, and a claim of an earlier
	// delivery stands against it (Bid.Waited).
	TwinWaited bool `json:"twin_waited,omitempty"`
	// Alone is the delivery (NumDelivered) that runs the record alone in
	// its worker, written before its call (worker/poison.go); Blamed is
	// the deliveries lost while the record ran alone: the losses that are
	// the record's own, not its neighbours'.
	Alone  int `json:"alone,omitempty"`
	Blamed int `json:"blamed,omitempty"`
}

// StateKey is the JETPOOL_ATTEMPTS key of a record's action.
func StateKey(job, action, record string) string {
	return job + "." + action + "." + RecordToken(record)
}

// LoadState reads the state of a record's action in replay generation
// replays; nil when there is none (or only one of an earlier generation).
func (b *Broker) LoadState(ctx context.Context, job, action, record string, replays int) (*RecordState, error) {
	st, _, err := b.LoadStateRev(ctx, job, action, record, replays)
	return st, err
}

// LoadStateRev is LoadState with the revision of the record's state entry
// (0 when there is none), whatever generation it is of: the revision a
// write made on what was read expects (MergeState).
func (b *Broker) LoadStateRev(ctx context.Context, job, action, record string, replays int) (*RecordState, uint64, error) {
	// From the bucket's leader, as a lookup of an outcome is: a replica
	// behind could miss an answer parked a moment ago (leaderget.go).
	m, err := b.kvLast(ctx, BucketAttempts, StateKey(job, action, record))
	if err != nil {
		return nil, 0, fmt.Errorf("state of %s/%s/%s: %w", job, action, record, err)
	}
	if m == nil {
		return nil, 0, nil
	}
	var st RecordState
	if err := json.Unmarshal(m.Data, &st); err != nil {
		// A state that cannot be read is no state: its deliveries count as
		// unaccounted, which the crash allowance bounds.
		return nil, m.Sequence, nil
	}
	if st.Replays != replays {
		return nil, m.Sequence, nil
	}
	return &st, m.Sequence, nil
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
// for as long as its holder renews it (Claim, RenewClaim).
type claim struct {
	Holder   string `json:"holder"`
	Replays  int    `json:"replays"`
	Delivery int    `json:"delivery,omitempty"`
	// At is when the claim was taken or last renewed.
	At time.Time `json:"at"`
	// Calls is the calls its holder made, or is making, under it: a
	// holder records each call here before it makes it, so that a
	// delivery taking a lapsed claim over knows what the silent holder
	// spent (Claimed.LapsedCalls).
	Calls int `json:"calls,omitempty"`
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
	// Calls is the calls the holder has made or is about to make under
	// the claim (1 for a claim taken just before a delivery's first call).
	Calls int
	// TTL is how long a claim stands after it was taken or last renewed.
	TTL time.Duration
}

func (bid Bid) key() string { return StateKey(bid.Job, bid.Action, bid.Record) }

func (bid Bid) claim() ([]byte, error) {
	return json.Marshal(claim{Holder: bid.Holder, Replays: bid.Replays, Delivery: bid.Delivery, At: time.Now(), Calls: bid.Calls})
}

// Claimed is what a won bid got (Claim).
type Claimed struct {
	// Rev is the claim's revision, for RenewClaim and Unclaim.
	Rev uint64
	// LapsedCalls is, when the bid took over another holder's claim that
	// stood no more (its holder was silent for the TTL: killed, stopped,
	// cut off), the calls that holder had made under it, which no state
	// of the record holds.
	LapsedCalls int
}

// Claim takes the right to call the model for a record's action for
// bid's holder, unless another holder's claim of the same replay
// generation stands: one taken or renewed less than the TTL ago. Its
// holder renews it while its call runs (RenewClaim), however long that
// takes, so it stands whatever the deliveries' numbers: a later delivery
// of the record is a twin (a consumer's leader lost before it passed a
// delivery on delivers it again as new) or a redelivery after AckWait ran
// out on a holder that is stopped or cut off and may still hold its answer.
// Only a claim left alone for the TTL is taken over: its holder ended
// without letting go, or died, or has been silent so long that it is
// taken for dead (and, should it come back, finds its claim gone and
// makes no more calls). A claim is a create on the bucket's leader, one
// write (a read too only when a claim is there); it is let go (Unclaim)
// when its delivery ends without an outcome stored, and the winner's
// result, once stored, is found before any claim is asked for. Claims are
// kept in JETPOOL_CLAIMS, in memory (topology.go). ok false: another
// holder's claim stands.
func (b *Broker) Claim(ctx context.Context, bid Bid) (c Claimed, ok bool, _ error) {
	kv, err := b.KV(ctx, BucketClaims)
	if err != nil {
		return c, false, err
	}
	key := bid.key()
	data, err := bid.claim()
	if err != nil {
		return c, false, err
	}
	c.Rev, err = kv.Create(ctx, key, data)
	switch {
	case err == nil:
		return c, true, nil
	case !IsConflict(err):
		return c, false, fmt.Errorf("claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
	}
	m, err := b.kvLast(ctx, BucketClaims, key)
	if err != nil {
		return c, false, fmt.Errorf("claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
	}
	if m == nil { // let go of a moment ago
		c.Rev, err = kv.Create(ctx, key, data)
	} else {
		var old claim
		if json.Unmarshal(m.Data, &old) == nil && old.Replays == bid.Replays && old.Holder != bid.Holder {
			if time.Since(old.At) < bid.TTL {
				return Claimed{}, false, nil
			}
			c.LapsedCalls = old.Calls
		}
		c.Rev, err = kv.Update(ctx, key, data, m.Sequence)
	}
	switch {
	case err == nil:
		return c, true, nil
	case IsConflict(err):
		return Claimed{}, false, nil // another holder took it a moment ago
	}
	return Claimed{}, false, fmt.Errorf("claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
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
