package jobstatus

import (
	"context"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// waitCountEvery is how often Wait reads the result counts for a progress
// callback: they are counted by the server over every result subject, so
// they are read only that often, and whenever the backlog is drained.
const waitCountEvery = 2 * time.Second

// Wait waits until every record of the job has a final result (or the job
// failed and nothing of it is left in flight), polling every interval, and
// marks the job completed (and a replay of it finished) when it is not yet.
// progress, when not nil, sees the job and its progress at each poll; its
// result counts are at most waitCountEvery old. `jetpool run` and `retry`
// wait with a progress bar; the bench polls often, without one, so that its
// timings are not rounded up to a bar's tick.
func Wait(ctx context.Context, b *broker.Broker, jobID string, every time.Duration, progress func(*broker.Job, broker.Progress)) (*broker.Job, error) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var counted time.Time
	var counts broker.Counts
	for {
		job, _, err := b.GetJob(ctx, jobID)
		if err != nil {
			return nil, err
		}
		// The backlog is one cheap request; the counts are read only when
		// the backlog is drained (to decide) or for the progress callback.
		st, err := b.Backlog(ctx, jobID)
		if err != nil {
			return nil, err
		}
		if st.Drained() || (progress != nil && time.Since(counted) > waitCountEvery) {
			if counts, err = b.JobCounts(ctx, job, false); err != nil {
				return nil, err
			}
			counted = time.Now()
		}
		st.Counts = counts
		if progress != nil {
			progress(job, st)
		}
		if st.Drained() && st.Finished(job) {
			if job.Status != broker.JobFailed && (job.Status != broker.JobCompleted || job.Replay != nil) {
				if j, err := b.CompleteJob(ctx, jobID); err == nil {
					job = j
				}
			}
			return job, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}
