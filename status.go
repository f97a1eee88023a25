package jetpool

import (
	"context"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/worker"
)

// JobStatus is a job's progress: its records queued, in flight, waiting
// for redelivery, succeeded and failed, its dead letters by reason, its
// cost against its budget, and what the live workers say of it. It is
// what `jetpool status --json` prints.
type JobStatus = jobstatus.Job

// WorkerStats is what one live worker process answers about itself: its
// calls, the jobs it serves or cannot serve and why, its storage faults.
type WorkerStats = worker.Stats

// Status reads one job's status, with its failures split by reason.
func (c *Client) Status(ctx context.Context, jobID string) (*JobStatus, error) {
	j, _, err := c.b.GetJob(ctx, jobID)
	if err != nil {
		return nil, err
	}
	out, _, err := jobstatus.Read(ctx, c.b, []*broker.Job{j}, true)
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// Statuses reads the status of jobs (every job when nil; byReason splits
// their failures by reason, a read of each job's results) and the answers
// of the live workers.
func (c *Client) Statuses(ctx context.Context, jobs []*broker.Job, byReason bool) ([]JobStatus, []WorkerStats, error) {
	if jobs == nil {
		var err error
		if jobs, err = c.b.ListJobs(ctx); err != nil {
			return nil, nil, err
		}
	}
	return jobstatus.Read(ctx, c.b, jobs, byReason)
}

// Workers asks every live worker for its stats (a request on the control
// subject; the answers of a short wait). None answering is no error.
func (c *Client) Workers(ctx context.Context) ([]WorkerStats, error) {
	return worker.Gather(c.b)
}
