package jetpool

import (
	"context"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/steer"
)

// Cancel cancels a job (package steer): no worker that answered starts a
// call of it once Cancel returns nil; its records end as cancelled. When
// some live worker did not confirm in time the report comes with
// steer.ErrStillCalling.
func (c *Client) Cancel(ctx context.Context, jobID string, o steer.CancelOptions) (steer.CancelReport, error) {
	return steer.Cancel(ctx, c.b, jobID, o)
}

// Pause pauses a job until until (zero: until Resume): the server
// delivers none of its records meanwhile; calls under way finish.
func (c *Client) Pause(ctx context.Context, jobID string, until time.Time) (steer.PauseReport, error) {
	return steer.Pause(ctx, c.b, jobID, until)
}

// Resume ends a job's pause (a scheduled start too: it starts now).
func (c *Client) Resume(ctx context.Context, jobID string) (steer.PauseReport, error) {
	return steer.Resume(ctx, c.b, jobID)
}

// SetPriority sets a job's priority (workflow.PriorityMin to PriorityMax):
// its weight when workers divide their slots among the jobs that have
// work. Workers follow it at once.
func (c *Client) SetPriority(ctx context.Context, jobID string, priority int) (*broker.Job, error) {
	return steer.SetPriority(ctx, c.b, jobID, priority)
}
