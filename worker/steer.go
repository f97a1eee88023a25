package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// A cancelled or paused job makes no new call from the moment a worker
// sees its state: each call checks it under the job's steer lock just
// before it goes, and a worker that sees the cancel or the pause takes that
// lock once, so every call that checked before it has gone by then (a call
// in flight, which finishes and is stored). Only after that does the worker
// stop listing the job among those it may call for (Stats.Calling), which
// is what AwaitStopped waits for.

// cancelStop is the *retry.NotCalled cause of a call a cancel stopped.
type cancelStop struct{ err *retry.Error }

func (s *cancelStop) Error() string { return s.err.Error() }

// cancelError is the final error of a record a cancel stopped.
func cancelError(j *broker.Job) *retry.Error {
	msg := "the job was cancelled before this record's call"
	if j.Reason != "" {
		msg += ": " + j.Reason
	}
	return &retry.Error{Class: retry.ClassUnknown, TypeName: "JobCancelled", Message: msg}
}

// stopOutcome is what ends a record of a failed or cancelled job that has
// made no call of this delivery: its final error, reason and diagnostic.
func stopOutcome(j *broker.Job) (*retry.Error, retry.Reason, string) {
	switch {
	case j.Status == broker.JobCancelled:
		e := cancelError(j)
		return e, retry.ReasonCancelled, "job cancelled: " + e.Message
	case j.OverBudget(): // worker/budget.go
		return budgetError(j), retry.ReasonBudget, "job failed: " + j.Reason
	}
	final := &retry.Error{Class: retry.ClassUnknown, TypeName: "JobFailed", Message: "the job failed before this record ran: " + j.Reason}
	return final, retry.ReasonJobFailed, "job failed: " + j.Reason
}

// errPaused is the *retry.NotCalled cause of a call a pause stopped: the
// record hands its delivery back (pauseEnded).
var errPaused = errors.New("the job is paused")

// enterCall checks, just before a call, that the job may still call; it
// returns the function to run once the call is counted as made (it ends the
// check's hold on the steer lock), or a *retry.NotCalled when the job was
// cancelled or is paused.
func (jr *jobRunner) enterCall() (func(), error) {
	jr.steer.RLock()
	if j := jr.current(); j != nil && j.Status == broker.JobCancelled {
		jr.steer.RUnlock()
		return nil, &retry.NotCalled{Err: &cancelStop{err: cancelError(j)}}
	}
	if jr.pausedNow() {
		jr.steer.RUnlock()
		jr.verifyPause() // worker/pause.go: a resume this worker missed
		return nil, &retry.NotCalled{Err: errPaused}
	}
	return jr.steer.RUnlock, nil
}

// stopped reports whether the job may start no call: cancelled, or paused.
func (jr *jobRunner) stopped() bool {
	j := jr.current()
	return (j != nil && j.Status == broker.JobCancelled) || jr.pausedNow()
}

// restate follows a change of the job's state (setJob) or of its pause
// (worker/pause.go): once it is cancelled or paused, the calls that
// checked before are let through to the provider before the worker says it
// calls no more for the job.
func (jr *jobRunner) restate() {
	jr.restating.Lock()
	defer jr.restating.Unlock()
	if !jr.stopped() {
		jr.quiet.Store(false)
		return
	}
	if jr.quiet.Load() {
		return
	}
	jr.steer.Lock()
	//lint:ignore SA2001 taking the lock is the point: every call that checked has gone
	jr.steer.Unlock()
	jr.quiet.Store(true)
}

// cancelEnded reads a session that a cancel stopped before a call: the
// record ends with reason cancelled, its earlier calls kept. It reports
// whether o was one.
func cancelEnded(run *sessionEnd, o retry.Outcome) bool {
	var s *cancelStop
	if !errors.As(o.NotCalled, &s) {
		return false
	}
	run.err, run.reason = s.err, retry.ReasonCancelled
	return true
}

// pauseEnded reads a session that a pause stopped before a call: the
// delivery is handed back, its attempts kept, to continue after the
// resume. It reports whether o was one.
func pauseEnded(run *sessionEnd, o retry.Outcome) bool {
	if !errors.Is(o.NotCalled, errPaused) {
		return false
	}
	run.paused = true
	return true
}

// AwaitStopped waits until every live worker says it will start no call
// for job (Stats.Calling: it saw the job cancelled, and the calls that had
// checked before have gone), or until ctx is done. It returns the workers
// that answered and those that still list the job.
func AwaitStopped(ctx context.Context, b *broker.Broker, job string) (answered int, calling []string, err error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		stats, err := GatherWithin(b, GatherPatient, GatherPatientQuiet)
		if err != nil {
			return 0, nil, err
		}
		calling = calling[:0]
		for _, s := range stats {
			if slices.Contains(s.Calling, job) {
				calling = append(calling, s.Worker)
			}
		}
		if len(calling) == 0 {
			return len(stats), nil, nil
		}
		select {
		case <-ctx.Done():
			return len(stats), calling, nil
		case <-tick.C:
		}
	}
}
