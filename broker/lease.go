package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrClaimTaken is returned by RenewClaim when another holder's claim
// replaced the one renewed: it lapsed (its holder was silent for the TTL,
// stopped or cut off) and a twin delivery of the record took it over. The
// holder has no right to call any more.
var ErrClaimTaken = errors.New("the claim was taken over by another delivery")

// RenewClaim renews the claim of revision rev (Claim) for bid's holder,
// with bid.Calls as the calls made under it, and returns its new revision.
// A holder renews its claim while its call runs, so that the claim stands
// however long the call takes, and before each call after its first, so
// that the call is recorded before it is made. retaken: the claim had
// vanished (let go of, or aged out of the bucket while its holder was
// stopped) and is taken again; a twin may have run meanwhile, so the
// holder looks the record's result up before it calls. ErrClaimTaken:
// another holder has it now.
func (b *Broker) RenewClaim(ctx context.Context, bid Bid, rev uint64) (next uint64, retaken bool, _ error) {
	kv, err := b.KV(ctx, BucketClaims)
	if err != nil {
		return 0, false, err
	}
	key := bid.key()
	data, err := bid.claim()
	if err != nil {
		return 0, false, err
	}
	next, err = kv.Update(ctx, key, data, rev)
	switch {
	case err == nil:
		return next, false, nil
	case !IsConflict(err):
		return 0, false, fmt.Errorf("renew the claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
	}
	// Not the revision renewed last: the claim is another holder's now, or
	// gone, or this holder's own renewal landed and its answer was lost.
	m, err := b.kvLast(ctx, BucketClaims, key)
	if err != nil {
		return 0, false, fmt.Errorf("renew the claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
	}
	if m == nil {
		next, err = kv.Create(ctx, key, data)
		retaken = true
	} else {
		var c claim
		if json.Unmarshal(m.Data, &c) != nil || c.Holder != bid.Holder || c.Replays != bid.Replays {
			return 0, false, ErrClaimTaken
		}
		next, err = kv.Update(ctx, key, data, m.Sequence)
	}
	switch {
	case err == nil:
		return next, retaken, nil
	case IsConflict(err):
		return 0, false, ErrClaimTaken // taken a moment ago
	}
	return 0, false, fmt.Errorf("renew the claim of %s/%s/%s: %w", bid.Job, bid.Action, bid.Record, err)
}
