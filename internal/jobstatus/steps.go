package jobstatus

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
)

// Work done in a pipeline is counted in steps, one a record and action: a
// record counts as done only once its last action is, so a two-action job
// would show no progress until records begin to leave its second action
// (a real 20,000-record run sat at 0 for minutes). A record at action k
// (0-based, in the work stream) has done k steps; a record with its final
// result (ok, or failed at any action) counts all of them.

// Steps is the steps done of a job with actions, done records finished and
// at the records in the work stream by action; and the steps in all
// (total × actions).
func Steps(total, done int64, actions []string, at map[string]uint64) (steps, all int64) {
	n := int64(len(actions))
	steps = done * n
	for k, a := range actions {
		steps += int64(k) * int64(at[a])
	}
	all = total * n
	return min(steps, all), all
}

// AtActions reads how many records of job are at each action now: one
// stream info request over the job's work subjects.
func AtActions(ctx context.Context, b *broker.Broker, job string) (map[string]uint64, error) {
	s, err := b.Stream(ctx, broker.StreamWork)
	if err != nil {
		return nil, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(broker.WorkFilter(job)))
	if err != nil {
		return nil, err
	}
	at := map[string]uint64{}
	for subj, n := range info.State.Subjects {
		if parts := broker.SubjectParts(subj); len(parts) == 2 {
			at[parts[1]] += n
		}
	}
	return at, nil
}
