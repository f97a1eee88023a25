package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JobCancelled is the state of a job that `jetpool job cancel` stopped: no
// new call is made for it; calls under way finish and their answers are
// stored; what is queued ends with StatusCancelled, reason cancelled.
const JobCancelled = "cancelled"

// StatusCancelled is the result status of a record that a cancel stopped
// before its next call (reason cancelled, dead-lettered with it, so
// `jetpool retry --reason cancelled` runs it).
const StatusCancelled = "cancelled"

// Stopped reports whether the job makes no new calls: it failed or was
// cancelled. Its queued records end without a call, dead-lettered.
func (j *Job) Stopped() bool { return j.Status == JobFailed || j.Status == JobCancelled }

// Ended reports whether the job is over: completed, failed or cancelled.
func (j *Job) Ended() bool { return j.Status == JobCompleted || j.Stopped() }

// ErrJobEnded is returned by CancelJob for a job that completed or failed
// before the cancel: there is nothing left to stop.
var ErrJobEnded = errors.New("job has ended")

// CancelJob marks job id cancelled (a job cancelled already is left as it
// is: changed is false). Workers watch the state and make no new call for
// the job from then on (worker.AwaitStopped tells when each has seen it).
// A paused job is resumed so that its queued records reach a worker, to end
// as cancelled without a call; a job scheduled for later likewise.
func (b *Broker) CancelJob(ctx context.Context, id, why string) (j *Job, changed bool, err error) {
	if j, _, err = b.GetJob(ctx, id); err != nil {
		return nil, false, err
	}
	if j.Status == JobRunning {
		// Every record has its final result, and nobody has said so yet
		// (a long-running worker's job: jetpool status completes it).
		if p, err := b.JobProgress(ctx, j, false); err == nil && p.Finished(j) {
			if _, err := b.CompleteJob(ctx, id); err != nil {
				return nil, false, err
			}
		}
	}
	j, err = b.UpdateJob(ctx, id, func(j *Job) bool {
		if j.Status == JobCancelled || j.Status == JobCompleted || j.Status == JobFailed {
			return false
		}
		j.Status, j.Reason, changed = JobCancelled, why, true
		return true
	})
	if err != nil {
		return nil, false, err
	}
	if !changed && j.Status != JobCancelled {
		return j, false, fmt.Errorf("job %s %s: %w", id, j.Status, ErrJobEnded)
	}
	if _, err := b.ResumeJob(ctx, id); err != nil && !errors.Is(err, ErrNoConsumer) {
		return j, changed, err
	}
	return j, changed, nil
}

// SetPriority sets the job's priority (its weight among the jobs a worker
// serves at once); workers follow it at once.
func (b *Broker) SetPriority(ctx context.Context, id string, priority int) (*Job, error) {
	return b.UpdateJob(ctx, id, func(j *Job) bool {
		if j.Priority == priority {
			return false
		}
		j.Priority = priority
		return true
	})
}

// ErrNoConsumer is returned by PauseJob and ResumeJob for a job that has no
// work consumer: not published yet, or finished and swept.
var ErrNoConsumer = errors.New("job has no work consumer")

// Pause is a job's work consumer's pause, as the server keeps it.
type Pause struct {
	Paused bool      `json:"paused"`
	Until  time.Time `json:"until,omitzero"` // the deadline the server resumes it at
}

// PauseForever is the deadline of a pause with no end of its own (the
// consumer pause needs one): far enough that only a resume ends it.
var PauseForever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// PauseJob pauses the job's work consumer until until (zero:
// PauseForever): the server delivers none of its records, new or
// redelivered, until then or a resume. The pause is the consumer's, kept
// by the server across restarts, the same one `nats consumer pause` sets.
func (b *Broker) PauseJob(ctx context.Context, id string, until time.Time) (Pause, error) {
	if until.IsZero() {
		until = PauseForever
	}
	r, err := b.JS.PauseConsumer(ctx, StreamWork, ConsumerName(id), until)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return Pause{}, fmt.Errorf("job %s: %w", id, ErrNoConsumer)
	}
	if err != nil {
		return Pause{}, fmt.Errorf("pause job %s: %w", id, err)
	}
	return Pause{Paused: r.Paused, Until: r.PauseUntil}, nil
}

// ResumeJob ends the pause of the job's work consumer (none: nothing
// changes).
func (b *Broker) ResumeJob(ctx context.Context, id string) (Pause, error) {
	r, err := b.JS.ResumeConsumer(ctx, StreamWork, ConsumerName(id))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return Pause{}, fmt.Errorf("job %s: %w", id, ErrNoConsumer)
	}
	if err != nil {
		return Pause{}, fmt.Errorf("resume job %s: %w", id, err)
	}
	return Pause{Paused: r.Paused, Until: r.PauseUntil}, nil
}

// JobPause reads the pause of the job's work consumer.
func (b *Broker) JobPause(ctx context.Context, id string) (Pause, error) {
	c, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(id))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return Pause{}, fmt.Errorf("job %s: %w", id, ErrNoConsumer)
	}
	if err != nil {
		return Pause{}, fmt.Errorf("job %s: %w", id, err)
	}
	return PauseOf(c.CachedInfo()), nil
}

// PauseOf is the pause a consumer's info shows.
func PauseOf(info *jetstream.ConsumerInfo) Pause {
	if info == nil || !info.Paused {
		return Pause{}
	}
	p := Pause{Paused: true}
	if info.Config.PauseUntil != nil {
		p.Until = info.Config.PauseUntil.UTC()
	}
	return p
}

// pauseAdvisory is the prefix of the server's advisories of a work
// consumer paused or resumed (by `jetpool job pause`, `nats consumer
// pause`, or its deadline passing); the consumer's name follows.
const pauseAdvisory = "$JS.EVENT.ADVISORY.CONSUMER.PAUSE." + StreamWork + "."

// PauseSubject is where the server says that a job's work consumer was
// paused or resumed: workers listen, so that a record already delivered
// makes no call while its job is paused.
const PauseSubject = pauseAdvisory + ">"

// WatchPauses calls fn, on the subscription's goroutine (one at a time,
// in order), for every pause or resume of a job's work consumer the server
// announces, until the returned stop is called.
func (b *Broker) WatchPauses(fn func(job string, p Pause)) (stop func(), err error) {
	s, err := b.NC.Subscribe(PauseSubject, func(m *nats.Msg) {
		consumer, _ := strings.CutPrefix(m.Subject, pauseAdvisory)
		job, ok := strings.CutPrefix(consumer, ConsumerName(""))
		if !ok || job == "" {
			return
		}
		var a struct {
			Paused     bool      `json:"paused"`
			PauseUntil time.Time `json:"pause_until"`
		}
		if json.Unmarshal(m.Data, &a) != nil {
			return
		}
		p := Pause{Paused: a.Paused}
		if a.Paused {
			p.Until = a.PauseUntil.UTC()
		}
		fn(job, p)
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = s.Unsubscribe() }, nil
}
