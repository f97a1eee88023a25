// Package steer steers running jobs: cancel, pause and resume. Each is a
// NATS primitive an operator with only the `nats` CLI sees too — a cancel
// is the job's state in the JETPOOL_JOB_STATE bucket, a pause is the
// pause of the job's work consumer (`nats consumer info JETPOOL_WORK
// jetpool-JOB` shows it) — so the CLI, the dashboard and a Go client all
// call the functions here.
package steer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// StopWaitDefault is how long Cancel waits, by default, for every live
// worker to say it starts no more calls for the job.
const StopWaitDefault = 10 * time.Second

// CancelOptions tune Cancel.
type CancelOptions struct {
	// Reason is kept as the job's reason (default "cancelled by an operator").
	Reason string
	// StopWait bounds the wait for the workers' word (StopWaitDefault).
	StopWait time.Duration
}

// CancelReport says what a cancel did.
type CancelReport struct {
	Job string `json:"job"`
	// Already: the job was cancelled before (nothing changed).
	Already bool `json:"already_cancelled,omitempty"`
	// Workers is the live workers that answered; Calling those of them
	// that had not said, by the end of the wait, that they make no more
	// calls for the job (they see the state within a moment, but it was not
	// confirmed).
	Workers int      `json:"workers"`
	Calling []string `json:"still_calling,omitempty"`
	// Queued and InFlight are the job's backlog when the cancel returned:
	// the queued records end with status cancelled as workers take them;
	// the calls in flight finish and their answers are stored.
	Queued   uint64 `json:"queued"`
	InFlight int    `json:"in_flight"`
}

// ErrStillCalling is returned by Cancel and Pause (with their report) when
// some live workers did not confirm, within the wait, that they start no
// more calls for the job.
var ErrStillCalling = errors.New("some workers did not confirm that they make no more calls")

// Cancel cancels job: its state becomes cancelled (broker.CancelJob), then
// it waits until every live worker says it will start no new call for it.
// From the moment Cancel returns nil no worker that answered starts a call
// for the job; calls in flight finish and are stored; queued records end
// with status cancelled, reason cancelled (replayable: jetpool retry
// --reason cancelled). A job that completed or failed is
// broker.ErrJobEnded; one not found broker.ErrJobNotFound.
func Cancel(ctx context.Context, b *broker.Broker, job string, o CancelOptions) (CancelReport, error) {
	rep := CancelReport{Job: job}
	if err := broker.CheckJobID(job); err != nil {
		return rep, err
	}
	_, changed, err := b.CancelJob(ctx, job, cmp.Or(o.Reason, "cancelled by an operator"))
	if err != nil {
		return rep, err
	}
	rep.Already = !changed
	wctx, stop := context.WithTimeout(ctx, cmp.Or(o.StopWait, StopWaitDefault))
	defer stop()
	rep.Workers, rep.Calling, err = worker.AwaitStopped(wctx, b, job)
	if err != nil {
		return rep, fmt.Errorf("job %s is cancelled; asking the workers: %w", job, err)
	}
	if p, err := b.Backlog(ctx, job); err == nil {
		rep.Queued, rep.InFlight = p.Queued, p.AckPending
	}
	if len(rep.Calling) > 0 {
		return rep, fmt.Errorf("job %s is cancelled, but %d of %d workers did not confirm within %s: %w",
			job, len(rep.Calling), rep.Workers, cmp.Or(o.StopWait, StopWaitDefault), ErrStillCalling)
	}
	return rep, nil
}

// PauseReport says what a pause or resume left.
type PauseReport struct {
	Job string `json:"job"`
	broker.Pause
	// InFlight is the job's records delivered before the pause and not
	// yet acked: they finish (or wait for their redelivery, which the
	// pause holds back).
	InFlight int    `json:"in_flight"`
	Queued   uint64 `json:"queued"`
	// Workers is the live workers that answered a pause; Calling those of
	// them that had not said, by the end of the wait, that they make no
	// more calls for the job.
	Workers int      `json:"workers,omitempty"`
	Calling []string `json:"still_calling,omitempty"`
}

// Pause pauses job until until (zero: until Resume): the server delivers
// none of its records meanwhile, and the workers, told by the server's
// pause advisory, start no call for it: a record delivered before hands its
// delivery back before its next call, its attempts kept. It waits until
// every live worker says so (StopWaitDefault; ErrStillCalling, with the
// report, when some did not), so that from the moment it returns nil no
// call starts for the job until the pause ends; calls in flight finish and
// are stored. The pause is the work consumer's, kept by the server across
// restarts of every process; `nats consumer pause` has the same effect.
func Pause(ctx context.Context, b *broker.Broker, job string, until time.Time) (PauseReport, error) {
	rep := PauseReport{Job: job}
	if err := live(ctx, b, job); err != nil {
		return rep, err
	}
	p, err := b.PauseJob(ctx, job, until)
	if err != nil {
		return rep, err
	}
	rep.Pause = p
	if p.Paused {
		wctx, stop := context.WithTimeout(ctx, StopWaitDefault)
		defer stop()
		if rep.Workers, rep.Calling, err = worker.AwaitStopped(wctx, b, job); err != nil {
			return rep, fmt.Errorf("job %s is paused; asking the workers: %w", job, err)
		}
	}
	if bl, err := b.Backlog(ctx, job); err == nil {
		rep.Queued, rep.InFlight = bl.Queued, bl.AckPending
	}
	if len(rep.Calling) > 0 {
		return rep, fmt.Errorf("job %s is paused, but %d of %d workers did not confirm within %s: %w",
			job, len(rep.Calling), rep.Workers, StopWaitDefault, ErrStillCalling)
	}
	return rep, nil
}

// Resume ends job's pause (a scheduled start too: it starts now).
func Resume(ctx context.Context, b *broker.Broker, job string) (PauseReport, error) {
	rep := PauseReport{Job: job}
	if err := live(ctx, b, job); err != nil {
		return rep, err
	}
	p, err := b.ResumeJob(ctx, job)
	if err != nil {
		return rep, err
	}
	rep.Pause = p
	if bl, err := b.Backlog(ctx, job); err == nil {
		rep.Queued, rep.InFlight = bl.Queued, bl.AckPending
	}
	return rep, nil
}

// SetPriority sets job's priority (workflow.PriorityMin to PriorityMax):
// its weight when workers divide their slots among the jobs that have
// work. Workers follow it at once.
func SetPriority(ctx context.Context, b *broker.Broker, job string, priority int) (*broker.Job, error) {
	if err := broker.CheckJobID(job); err != nil {
		return nil, err
	}
	if priority < workflow.PriorityMin || priority > workflow.PriorityMax {
		return nil, fmt.Errorf("priority %d is out of range %d-%d", priority, workflow.PriorityMin, workflow.PriorityMax)
	}
	return b.SetPriority(ctx, job, priority)
}

// live checks that job exists and has not ended.
func live(ctx context.Context, b *broker.Broker, job string) error {
	if err := broker.CheckJobID(job); err != nil {
		return err
	}
	j, _, err := b.GetJob(ctx, job)
	if err != nil {
		return err
	}
	if j.Ended() {
		return fmt.Errorf("job %s %s: %w", job, j.Status, broker.ErrJobEnded)
	}
	return nil
}
