package jobstatus

import (
	"context"
	"time"

	"github.com/rs/zerolog"

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
//
// A poll the server does not answer (a busy or electing cluster, a node
// down: broker.Unanswered) is asked again at the next tick, said once on
// log: the job goes on without its waiter.
func Wait(ctx context.Context, b *broker.Broker, jobID string, every time.Duration, progress func(*broker.Job, broker.Progress),
	log zerolog.Logger) (*broker.Job, error) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	var counted time.Time
	var counts broker.Counts
	var unanswered time.Time // since when the server has not answered a poll
	for {
		job, st, fresh, err := poll(ctx, b, jobID, progress != nil && time.Since(counted) > waitCountEvery, &counts)
		switch {
		case err == nil:
			if !unanswered.IsZero() {
				log.Info().Dur("for", time.Since(unanswered).Round(time.Second)).Msg("the server answers again")
			}
			unanswered = time.Time{}
		case ctx.Err() == nil && broker.Unanswered(err):
			if unanswered.IsZero() {
				unanswered = time.Now()
				log.Warn().Err(err).Str("hint", broker.FaultHint(err)).Msg("waiting for the job: the server did not answer; asking again")
			}
		default:
			return nil, err
		}
		if err == nil {
			if fresh {
				counted = time.Now()
			}
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
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// poll reads the job, its backlog, and its result counts when the backlog
// is drained (to decide) or count is set (for the progress); counts keeps
// the last ones read.
func poll(ctx context.Context, b *broker.Broker, jobID string, count bool, counts *broker.Counts) (_ *broker.Job, _ broker.Progress, fresh bool, _ error) {
	job, _, err := b.GetJob(ctx, jobID)
	if err != nil {
		return nil, broker.Progress{}, false, err
	}
	st, err := b.Backlog(ctx, jobID)
	if err != nil {
		return nil, st, false, err
	}
	if st.Drained() || count {
		c, err := b.JobCounts(ctx, job, false)
		if err != nil {
			return nil, st, false, err
		}
		*counts, fresh = c, true
	}
	st.Counts = *counts
	return job, st, fresh, nil
}
