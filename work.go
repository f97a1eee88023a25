package jetpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// WorkParams steer Work.
type WorkParams struct {
	// Concurrency is the number of concurrent model calls (Config.Concurrency).
	Concurrency int
	// Trusted are the workflows whose keys and endpoints the workers may
	// use beyond the operator's policy (Trust). Nil on an embedded store:
	// every revision of the job's workflow, which this machine's user
	// dispatched from their own files.
	Trusted []*workflow.Workflow
	// Progress, when set, is called as the job moves (every
	// ProgressEvery, ProgressEveryDefault).
	Progress      func(*broker.Job, broker.Progress)
	ProgressEvery time.Duration
	// Done, when set, is called once every record has its final result,
	// before the workers stop.
	Done func()
}

// ProgressEveryDefault is how often Work and Wait read a job's progress.
const ProgressEveryDefault = 200 * time.Millisecond

// WorkResult is what Work did.
type WorkResult struct {
	// Job is the job's entry at its end: JobCompleted or JobFailed (a
	// raise action, or its max_cost reached: Job.Reason says).
	Job *broker.Job
	// Calls is the model calls this process made.
	Calls int64
	// Limits is the workers' rate limiters, as they ended.
	Limits *ratelimit.Registry
}

// UnservableError ends Work when its workers cannot serve the job (a key
// missing or not allowed where the workflow sends it): the job stays
// queued for a process that can. It is ErrInvalid.
type UnservableError struct {
	Job string
	Err error
}

func (e *UnservableError) Error() string {
	return fmt.Sprintf("this process cannot work job %s: %v (its records stay queued: run the same command again once that is fixed, or let a `jetpool worker` that can serve the job work them)", e.Job, e.Err)
}

func (e *UnservableError) Unwrap() error        { return e.Err }
func (e *UnservableError) Is(target error) bool { return target == ErrInvalid }

// Work runs workers (and the dead-letter catcher) in this process on one
// job until every record has a final result, then stops them: in-flight
// calls finish or are handed back. A canceled ctx stops it the same way;
// the job resumes with the next Work, Run or worker.
func (c *Client) Work(ctx context.Context, jobID string, p WorkParams) (*WorkResult, error) {
	trusted := p.Trusted
	if trusted == nil && c.b.Embedded() {
		trusted = c.jobWorkflows(ctx, jobID)
	}
	trust, err := Trust(trusted...)
	if err != nil {
		return nil, err
	}
	wctx, unserved := context.WithCancelCause(ctx)
	defer unserved(nil)
	pool := worker.New(c.b, worker.Config{Concurrency: cmp.Or(p.Concurrency, c.cfg.Concurrency), Log: c.log,
		Jobs: []string{jobID}, Trust: trust,
		OnUnservable: func(job string, why error) { unserved(&UnservableError{Job: job, Err: why}) }})
	if err := pool.Start(ctx); err != nil {
		return nil, err
	}
	catcher := &deadletter.Catcher{B: c.b, Log: c.log}
	if err := catcher.Start(ctx); err != nil {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = pool.Stop(stopCtx)
		return nil, err
	}
	job, waitErr := c.Wait(wctx, jobID, p.Progress, p.ProgressEvery)
	if p.Done != nil {
		p.Done()
	}
	if waitErr == nil {
		pool.JobDone(jobID) // nothing left to pull: the stop need not wait for the idle pull
	}
	stopFor := 30 * time.Second
	if c.b.StoreErr() != nil {
		stopFor = time.Second // nothing held can be stored any more: the store is gone
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopFor)
	defer cancel()
	if err := pool.Stop(stopCtx); err != nil {
		c.log.Warn().Err(err).Msg("worker pool stop")
	}
	catcher.Stop()
	if waitErr != nil {
		var ue *UnservableError
		if errors.As(context.Cause(wctx), &ue) {
			return nil, ue
		}
		return nil, waitErr
	}
	return &WorkResult{Job: job, Calls: pool.Calls(), Limits: pool.Limits()}, nil
}

// Wait waits until every record of the job has a final result (or the job
// failed and nothing is left in flight), whoever works it, calling
// progress (when set) every `every` (ProgressEveryDefault).
func (c *Client) Wait(ctx context.Context, jobID string, progress func(*broker.Job, broker.Progress), every time.Duration) (*broker.Job, error) {
	return jobstatus.Wait(ctx, c.b, jobID, cmp.Or(every, ProgressEveryDefault), progress, c.log)
}

// RunResult is what Run did.
type RunResult struct {
	Dispatch *DispatchResult
	Work     *WorkResult
	// Summary counts the job's final results (Summary.Job its end).
	Summary *Summary
}

// Run is `jetpool run`: it dispatches wf over p's records (Dispatch),
// works the job in this process to its end (Work) and summarizes its
// results (Summarize). Run again with the same workflow and input, it
// resumes the job: records that succeeded are not run again.
//
// A job that completed with failed records is no error: Summary.Failed
// counts them and Retry replays them. Summary.Job.Status is
// broker.JobFailed when a raise action or the budget failed the job.
func (c *Client) Run(ctx context.Context, wf *workflow.Workflow, p DispatchParams, wp WorkParams) (*RunResult, error) {
	d, err := c.Dispatch(ctx, wf, p)
	if err != nil {
		return nil, err
	}
	if wp.Trusted == nil {
		wp.Trusted = []*workflow.Workflow{wf}
	}
	w, err := c.Work(ctx, d.Job.ID, wp)
	if err != nil {
		return &RunResult{Dispatch: d}, err
	}
	s, err := c.Summarize(ctx, w.Job, "")
	if err != nil {
		return &RunResult{Dispatch: d, Work: w}, err
	}
	return &RunResult{Dispatch: d, Work: w, Summary: s}, nil
}
