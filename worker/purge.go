package worker

import (
	"context"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// Where the work stream keeps acked messages (broker.WorkKeepsAcked: every
// write is synced), the pool purges what each job's consumer has acked,
// once a purgeEvery, when its job is done, and when it stops: one purge
// and one fsync for many records, where a work-queue stream removes and
// syncs each on its ack. Every worker of a job purges it; a purge is
// idempotent, and one denied (a user without the right) is warned of and
// left to the sweep, which purges before it removes a finished job's
// consumer (broker.Sweep).

// purgeEvery is how often a pool purges its jobs' acked work.
const purgeEvery = time.Second

// purgeLoop purges every purgeEvery until ctx is done.
func (p *Pool) purgeLoop(ctx context.Context) {
	t := time.NewTicker(purgeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.mu.Lock()
		jobs := make([]*jobRunner, 0, len(p.jobs))
		for _, jr := range p.jobs {
			jobs = append(jobs, jr)
		}
		p.mu.Unlock()
		for _, jr := range jobs {
			jr.purgeAcked(ctx)
		}
	}
}

// purgeAcked purges the job's acked work, if its stream keeps it.
func (jr *jobRunner) purgeAcked(ctx context.Context) {
	if !jr.keepsAcked.Load() {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, purgeWait)
	defer cancel()
	jr.purging.Lock()
	defer jr.purging.Unlock()
	floor, err := jr.p.b.PurgeAcked(pctx, jr.id, jr.purged)
	if err != nil {
		if ctx.Err() != nil {
			return // the pool stops: it purges once more (Stop)
		}
		if minuteSince(&jr.p.purgeWarned) {
			jr.p.log.Warn().Err(err).Str("job", jr.id).Str("hint", broker.FaultHint(err)).
				Msg("the job's acked work could not be purged: the work stream keeps it until a purge lands (the sweep purges a finished job's)")
		}
		return
	}
	jr.purged = floor
}

// purgeWait bounds one purge of a job's acked work; purgeOnStopFor, the
// purges of a pool that stops.
const (
	purgeWait      = 10 * time.Second
	purgeOnStopFor = 3 * time.Second
)
