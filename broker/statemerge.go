package broker

import (
	"context"
	"encoding/json"
	"fmt"
)

// stateMergeTries bounds MergeState's reads and writes: each conflict is
// another delivery's write of the same record's state a moment before.
const stateMergeTries = 8

// MergeState writes st as the state of a record's action, made on the
// entry of revision rev (LoadStateRev; 0: none), and returns the revision
// written. Where another delivery of the record wrote it since (a twin
// parked while this one's worker was stopped, say), the entry is read again
// and merge makes the state to write from the one stored (nil when there
// is none or it cannot be read); merge returning nil writes nothing.
func (b *Broker) MergeState(ctx context.Context, job, action, record string, rev uint64, st *RecordState, merge func(stored *RecordState) *RecordState) (uint64, error) {
	kv, err := b.KV(ctx, BucketAttempts)
	if err != nil {
		return 0, err
	}
	key := StateKey(job, action, record)
	for try := 0; ; try++ {
		data, err := json.Marshal(st)
		if err != nil {
			return 0, err
		}
		var next uint64
		if rev == 0 {
			next, err = kv.Create(ctx, key, data)
		} else {
			next, err = kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return next, nil
		}
		if !IsConflict(err) || try+1 >= stateMergeTries {
			return 0, fmt.Errorf("save state of %s/%s/%s: %w", job, action, record, err)
		}
		m, err := b.kvLast(ctx, BucketAttempts, key)
		if err != nil {
			return 0, fmt.Errorf("save state of %s/%s/%s: %w", job, action, record, err)
		}
		var stored *RecordState
		rev = 0
		if m != nil {
			rev = m.Sequence
			var s RecordState
			if json.Unmarshal(m.Data, &s) == nil {
				stored = &s
			}
		}
		if st = merge(stored); st == nil {
			return rev, nil
		}
	}
}
