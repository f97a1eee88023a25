package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Job states.
const (
	JobDispatching = "dispatching"
	JobRunning     = "running"
	JobCompleted   = "completed"
	JobFailed      = "failed"
)

// Job is one job's entry in the JETPOOL_JOBS bucket. Workers read the
// workflow from here, so they need no files.
type Job struct {
	ID         string          `json:"id"`
	Workflow   json.RawMessage `json:"workflow"` // workflow.Encode()
	Actions    []string        `json:"actions"`
	Input      string          `json:"input,omitempty"`
	Total      int64           `json:"total"`      // records dispatched (valid once Dispatched)
	Dispatched bool            `json:"dispatched"` // every record is published
	Status     string          `json:"status"`
	// Reason says why a failed job failed: the diagnostic of the record that raised.
	Reason     string    `json:"reason,omitempty"`
	MaxDeliver int       `json:"max_deliver"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`
	// Replay is set by `jetpool retry` before it republishes a job's dead
	// letters, and cleared when the job completes: a retry killed half way
	// is found and finished by the next one.
	Replay *ReplayMark `json:"replay,omitempty"`

	// Revisions are the job's later workflows (jetpool retry --workflow):
	// revision n ≥ 2 is Revisions[n-2], revision 1 is Workflow. A work
	// message names its revision (HeaderRevision).
	Revisions []Revision `json:"revisions,omitempty"`
	// InputHash is the hash of the input's content when it was last
	// dispatched: `run --job` with a changed input dispatches only the
	// records that are new or changed.
	InputHash string `json:"input_hash,omitempty"`
	// Finished is when the job last completed: a finished job's rate is
	// over its own duration, Created to Finished.
	Finished time.Time `json:"finished,omitzero"`
}

// Revision is one later revision of a job's workflow.
type Revision struct {
	Workflow json.RawMessage `json:"workflow"` // workflow.Encode()
	File     string          `json:"file,omitempty"`
	Created  time.Time       `json:"created"`
}

// Revision is the job's current revision: the one new work runs under.
func (j *Job) Revision() int { return 1 + len(j.Revisions) }

// WorkflowOf returns the encoded workflow of revision rev (0 or 1: the
// first), false when the job has no such revision.
func (j *Job) WorkflowOf(rev int) (json.RawMessage, bool) {
	switch {
	case rev <= 1:
		return j.Workflow, true
	case rev-2 < len(j.Revisions):
		return j.Revisions[rev-2].Workflow, true
	}
	return nil, false
}

// Elapsed is how long the job has run: to now, or to Finished once it
// completed (so its rate does not fall after it).
func (j *Job) Elapsed(now time.Time) time.Duration {
	if j.Status == JobCompleted && !j.Finished.IsZero() {
		return j.Finished.Sub(j.Created)
	}
	return now.Sub(j.Created)
}

// ReplayMark is a replay of a job's dead letters that has not finished.
type ReplayMark struct {
	At      time.Time `json:"at"`
	Records int       `json:"records"` // dead letters it set out to replay
}

// AddRevision adds a revision of the job's workflow (enc, read from file)
// and returns the job with it. Work published after it names it
// (HeaderRevision); records already in flight keep theirs.
func (b *Broker) AddRevision(ctx context.Context, id string, enc json.RawMessage, file string) (*Job, error) {
	return b.UpdateJob(ctx, id, func(j *Job) bool {
		j.Revisions = append(j.Revisions, Revision{Workflow: enc, File: file, Created: time.Now().UTC()})
		return true
	})
}

// ErrJobNotFound is returned by GetJob when the job does not exist.
var ErrJobNotFound = errors.New("job not found")

// GetJob reads a job and its revision.
func (b *Broker) GetJob(ctx context.Context, id string) (*Job, uint64, error) {
	kv, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return nil, 0, err
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if err != nil {
		return nil, 0, err
	}
	var j Job
	if err := json.Unmarshal(e.Value(), &j); err != nil {
		return nil, 0, fmt.Errorf("job %s: corrupt entry: %w", id, err)
	}
	return &j, e.Revision(), nil
}

// PutJob writes a job unconditionally.
func (b *Broker) PutJob(ctx context.Context, j *Job) error {
	kv, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return err
	}
	j.Updated = time.Now().UTC()
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	_, err = kv.Put(ctx, j.ID, data)
	return err
}

// UpdateJob applies fn to the job with compare-and-set, retrying on conflict.
// fn returns false to leave the job as it is.
func (b *Broker) UpdateJob(ctx context.Context, id string, fn func(*Job) bool) (*Job, error) {
	kv, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return nil, err
	}
	for range 50 {
		j, rev, err := b.GetJob(ctx, id)
		if err != nil {
			return nil, err
		}
		if !fn(j) {
			return j, nil
		}
		j.Updated = time.Now().UTC()
		data, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		if _, err := kv.Update(ctx, id, data, rev); err == nil {
			return j, nil
		} else if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("job %s: too many concurrent updates", id)
}

// ListJobs returns every job.
func (b *Broker) ListJobs(ctx context.Context) ([]*Job, error) {
	kv, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var jobs []*Job
	for k := range keys.Keys() {
		j, _, err := b.GetJob(ctx, k)
		if errors.Is(err, ErrJobNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// CompleteJob marks a job completed, once every record has its final
// result (unless it failed, or is marked already); a replay mark goes with
// it: the replay is finished.
//
// Finished is when the job's last result was stored (the moment it
// finished, even when a status that saw it later completes it), or now.
func (b *Broker) CompleteJob(ctx context.Context, id string) (*Job, error) {
	finished := time.Now().UTC()
	if m, err := b.LastMsg(ctx, StreamResults, "jetpool.results."+id+".>"); err == nil && m != nil {
		finished = m.Time.UTC()
	}
	return b.UpdateJob(ctx, id, func(j *Job) bool {
		if j.Status == JobFailed || (j.Status == JobCompleted && j.Replay == nil) {
			return false
		}
		if j.Status != JobFailed {
			j.Status = JobCompleted
		}
		j.Replay = nil
		j.Finished = finished
		return true
	})
}
