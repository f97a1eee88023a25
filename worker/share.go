package worker

import (
	"context"
	"time"
)

// A pool divides its slots among the jobs that want them by weight (the
// job's priority, broker.Job.Weight): while another job wants a slot, a
// job holds at most its share, Concurrency × weight / the weights of the
// jobs that hold or want slots (rounded), and at least one slot, so no job
// starves.
// A job alone takes every slot (the division costs nothing then), and a
// share left unused goes to the others. The read-ahead, one buffer for
// every job, is not refilled while jobs share: its records would start in
// whichever job's slot came free.
//
// A record back from a backoff it waited off its slot (slot.go) takes a
// slot within its job's share too, else a job with slow retries would fill
// the pool through its returning records. It goes before its job's new
// records (the fetch loop leaves it room: returning), and it cannot starve:
// its job has at least one slot, and each that comes free is its room.

// shareWait is how long a job over its share waits before it looks again.
const shareWait = 2 * time.Millisecond

// shareRecent: a job that holds slots and asked for more this recently
// wants slots still (its loop is pulling what it was granted), though it
// waits for none right now.
const shareRecent = 100 * time.Millisecond

// wanting reports whether jr wants slots now: its loop waits for one, a
// record of it back from a backoff does, it has work left (its last pull
// brought records), or it holds slots and asked lately. Work left is no
// matter of time: a loop that a busy CPU keeps from asking for a while,
// its records all done meanwhile, still has its share.
func (jr *jobRunner) wanting(now int64) bool {
	return jr.wants.Load() || jr.returning.Load() > 0 || jr.hasWork.Load() ||
		(jr.inFlight.Load() > 0 && now-jr.wantedAt.Load() < int64(shareRecent))
}

// shareRoom is how many more slots jr's new records may take now (-1: no
// bound, no other job wants any), and whether other jobs want slots.
func (jr *jobRunner) shareRoom() (room int, shared bool) {
	room, shared = jr.shareLeft()
	if room > 0 {
		room = max(room-int(jr.returning.Load()), 0) // the records back from a backoff go first
	}
	return room, shared
}

// shareLeft is how many more slots jr may hold now (-1: no bound), and
// whether other jobs want slots.
func (jr *jobRunner) shareLeft() (room int, shared bool) {
	p := jr.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.jobs) < 2 {
		return -1, false
	}
	total, others := 0, false
	now := time.Now().UnixNano()
	for _, o := range p.jobs {
		if o != jr && (o.inFlight.Load() > 0 || o.wants.Load() || o.returning.Load() > 0 || o.hasWork.Load()) {
			total += o.current().Weight()
			others = others || o.wanting(now)
		}
	}
	if !others {
		return -1, total > 0
	}
	w := jr.current().Weight()
	// Rounded, not cut: 64 slots at 10 and 1 are 58 and 6 (9.7 : 1), where
	// cutting gave 58 and 5 (11.6 : 1) and left a slot to nobody.
	limit := max((2*p.cfg.Concurrency*w+total+w)/(2*(total+w)), 1)
	return max(limit-int(jr.inFlight.Load()), 0), true
}

// awaitReturn waits, for a record back from a backoff (jr.returning counts
// it), while jr holds its share of the slots and another job wants one; it
// fails only when ctx is done.
func (jr *jobRunner) awaitReturn(ctx context.Context) error {
	for {
		if room, _ := jr.shareLeft(); room != 0 {
			return nil
		}
		jr.pause(ctx, shareWait)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// awaitShare waits while jr holds its share of the slots and another job
// wants one; it returns how many slots jr may take (-1: any), and whether
// jobs share the pool; ok is false when ctx is done.
func (jr *jobRunner) awaitShare(ctx context.Context) (room int, shared, ok bool) {
	for {
		room, shared = jr.shareRoom()
		if room != 0 {
			return room, shared, true
		}
		jr.wants.Store(true) // still a job that wants slots: its share counts
		jr.pause(ctx, shareWait)
		if ctx.Err() != nil {
			return 0, shared, false
		}
	}
}
