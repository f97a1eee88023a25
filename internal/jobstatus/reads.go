package jobstatus

import (
	"context"
	"errors"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// A status must answer while a node of the cluster is cut off: a stream
// whose leader was there does not answer until the others elect a new one
// (seconds), and a read that waits for it would hold the whole status. So
// each read is bounded (ReadTimeout), tried again while the store says it
// is not ready or does not answer, within the status's bound in all
// (Bound); a part whose read did not answer is left out and named
// (Job.Unanswered), never shown as a zero.
const (
	// ReadTimeout bounds one read of a status.
	ReadTimeout = 1500 * time.Millisecond
	// ReplicaTimeout bounds one read that any replica answers: a live one
	// answers at once, and the next try may reach another.
	ReplicaTimeout = 500 * time.Millisecond
	// ListBound is how long a status waits for the list of its jobs, and
	// Bound for the reads of their parts after it, in all. Without the list
	// there is no answer at all, so it is given longer: on a loaded host
	// a replica's answer can take seconds while the leader is silent.
	ListBound = 5 * time.Second
	Bound     = 3500 * time.Millisecond
)

// Parts of a job's status that may not answer (Job.Unanswered).
const (
	PartBacklog = "backlog" // queued, in flight, waiting: the job's work consumer on JETPOOL_WORK
	PartResults = "results" // succeeded, failed, by reason: JETPOOL_RESULTS
	PartBatches = "batches" // outstanding provider batches: JETPOOL_BATCHES
	PartSteps   = "steps"   // a pipeline's steps done: JETPOOL_WORK
	// PartDeadLetters is the dead letters still in JETPOOL_DLQ (with the
	// split by reason).
	PartDeadLetters = "dead_letters"
)

// Reads bounds the reads of one status: each by ReadTimeout, all of them
// by one deadline.
type Reads struct {
	deadline time.Time
	retry    time.Duration // the first pause before a read is tried again
}

// NewReads bounds reads to within from now.
func NewReads(within time.Duration) *Reads {
	return &Reads{deadline: time.Now().Add(within), retry: 100 * time.Millisecond}
}

// Once runs read once, bounded as Do bounds each try.
func (r *Reads) Once(ctx context.Context, read func(context.Context) error) error {
	left := time.Until(r.deadline)
	if left <= 0 {
		return ErrNoTime
	}
	rctx, cancel := context.WithTimeout(ctx, min(ReadTimeout, left))
	defer cancel()
	return read(rctx)
}

// ErrNoTime is returned for a read not tried: the status's bound had
// passed.
var ErrNoTime = errors.New("not read: the status's time was up")

// Do runs read with a context bounded by ReadTimeout and what is left of
// the bound, again while it meets a transient error (broker.Transient)
// and time is left. It returns read's last error.
func (r *Reads) Do(ctx context.Context, read func(context.Context) error) error {
	return r.DoEach(ctx, ReadTimeout, read)
}

// DoEach is Do with each try bounded by per.
func (r *Reads) DoEach(ctx context.Context, per time.Duration, read func(context.Context) error) error {
	pause := r.retry
	err := ErrNoTime
	for {
		left := time.Until(r.deadline)
		if left <= 0 {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, min(per, left))
		err = read(rctx)
		cancel()
		if err == nil || ctx.Err() != nil || !broker.Transient(err) {
			return err
		}
		if time.Until(r.deadline) <= pause {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}
