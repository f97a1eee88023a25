package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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
	// TwinWaited: the record waited once for a twin delivery after an
	// outage held its lookup (worker/handle.go); it does not wait again.
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
	Holder  string    `json:"holder"`
	Replays int       `json:"replays"`
	At      time.Time `json:"at"`
}

// Claim takes the right to call the model for a record's action, for
// holder (unique to the delivery), unless another holder's claim of the same
// replay generation younger than ttl stands: ok false then. A worker takes
// one only after a storage fault, when JetStream may have delivered the
// record twice and its twin may be calling (worker/handle.go): of two twins
// that both find no result, one calls. Compare-and-set on the bucket's
// leader; a claim needs no release: it lapses after ttl, and the winner's
// result, once stored, is found before any claim is asked for.
func (b *Broker) Claim(ctx context.Context, job, action, record string, replays int, holder string, ttl time.Duration) (ok bool, _ error) {
	kv, err := b.KV(ctx, BucketAttempts)
	if err != nil {
		return false, err
	}
	key := StateKey(job, action, record) + ".claim"
	data, err := json.Marshal(claim{Holder: holder, Replays: replays, At: time.Now()})
	if err != nil {
		return false, err
	}
	m, err := b.kvLast(ctx, BucketAttempts, key)
	if err != nil {
		return false, fmt.Errorf("claim of %s/%s/%s: %w", job, action, record, err)
	}
	if m == nil {
		_, err = kv.Create(ctx, key, data)
	} else {
		var c claim
		if json.Unmarshal(m.Data, &c) == nil && c.Replays == replays && c.Holder != holder && time.Since(c.At) < ttl {
			return false, nil
		}
		_, err = kv.Update(ctx, key, data, m.Sequence)
	}
	switch {
	case err == nil:
		return true, nil
	case IsConflict(err):
		return false, nil // another holder took it a moment ago
	}
	return false, fmt.Errorf("claim of %s/%s/%s: %w", job, action, record, err)
}
