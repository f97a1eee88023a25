package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// Where every write is synced (sync_interval: always; Config.Batched), a
// work-queue stream costs an fsync per record on top of the result's: the
// server removes each acked message at once and syncs the tombstone it
// writes for it alone. JetStream writes the tombstones of a purge together
// and syncs once. So there the work stream is made with limits retention:
// an acked message stays until the workers purge what a job's consumer has
// acked (PurgeAcked, about once a second), and the sweep purges before it
// removes a finished job's consumer. A stream keeps the retention it was
// made with (ensureStream). docs/decisions.md "The work stream keeps acked
// records where every write is synced".

// workRetention is the retention a new work stream is made with.
func (b *Broker) workRetention() jetstream.RetentionPolicy {
	if b.Cfg.Batched() {
		return jetstream.LimitsPolicy
	}
	return jetstream.WorkQueuePolicy
}

func workDescription(r jetstream.RetentionPolicy) string {
	if r == jetstream.LimitsPolicy {
		return "jetpool work: one message per record and action; acked ones purged by the workers"
	}
	return "jetpool work: one message per record and action; removed on ack"
}

// WorkKeepsAcked reports whether the work stream keeps acked messages until
// they are purged (limits retention): a job's consumer made again then
// delivers the acked ones not purged yet, as first deliveries, so no
// delivery may skip its result lookup (HeaderFirstRun).
func (b *Broker) WorkKeepsAcked(ctx context.Context) (bool, error) {
	s, err := b.stream(ctx, StreamWork)
	if err != nil {
		return false, err
	}
	return s.CachedInfo().Config.Retention == jetstream.LimitsPolicy, nil
}

// PurgeAcked purges the work of job that its consumer has acked, up to the
// consumer's ack floor (every message of the job at or below it is acked),
// in one purge: one fsync for all their tombstones. floor is the ack floor
// purged to; from: purge nothing when the floor is not past it (the last
// floor purged). A job without a consumer has nothing purged.
func (b *Broker) PurgeAcked(ctx context.Context, job string, from uint64) (floor uint64, err error) {
	c, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(job))
	if err != nil {
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return from, nil
		}
		return from, fmt.Errorf("purge the acked work of job %s: %w", job, err)
	}
	floor = c.CachedInfo().AckFloor.Stream // read just now by Consumer
	if floor <= from {
		return from, nil
	}
	if _, err := b.purgeSubjectBelow(ctx, StreamWork, WorkFilter(job), floor+1); err != nil {
		return from, err
	}
	return floor, nil
}

// purgeSubjectBelow purges stream's messages on subject with a sequence
// below seq.
func (b *Broker) purgeSubjectBelow(ctx context.Context, stream, subject string, seq uint64) (uint64, error) {
	req, _ := json.Marshal(jetstream.StreamPurgeRequest{Subject: subject, Sequence: seq})
	return b.purge(ctx, stream, subject, req)
}
