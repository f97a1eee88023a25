package jetpool

import (
	"context"
	"errors"
	"iter"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
)

// DeadLetters is the dead letters f selects, oldest first, each with its
// story (reason, error class, attempts, the record). A read that fails
// yields the error once, with a nil entry, and stops. Retry replays them;
// PurgeDeadLetters deletes them.
func (c *Client) DeadLetters(ctx context.Context, f deadletter.Filter) iter.Seq2[*deadletter.Entry, error] {
	return func(yield func(*deadletter.Entry, error) bool) {
		if err := f.Check(); err != nil {
			yield(nil, invalid(err))
			return
		}
		err := deadletter.Each(ctx, c.b, f, func(e *deadletter.Entry) error {
			if !yield(e, nil) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(nil, err)
		}
	}
}

// PurgeDeadLetters deletes the dead letters f selects for good (one by
// its sequence with Filter.Seq, a record's with Filter.Record) and returns
// how many. Their records' failed results stay: a purged record is still
// counted failed in Status (it never succeeded), and no longer in the DLQ
// (JobStatus.DeadLetters).
func (c *Client) PurgeDeadLetters(ctx context.Context, f deadletter.Filter) (int, error) {
	if err := f.Check(); err != nil {
		return 0, invalid(err)
	}
	return deadletter.Purge(ctx, c.b, f)
}

// Jobs lists every job's entry.
func (c *Client) Jobs(ctx context.Context) ([]*broker.Job, error) { return c.b.ListJobs(ctx) }
