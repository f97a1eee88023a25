package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Job states.
const (
	// JobChecking: the dispatcher publishes the records while it still
	// validates them, and nothing serves them yet (the job has no work
	// consumer until the whole input is found good: docs/decisions.md).
	JobChecking    = "checking"
	JobDispatching = "dispatching"
	JobRunning     = "running"
	JobCompleted   = "completed"
	JobFailed      = "failed"
)

// BucketJobState holds each job's status and reason, apart from its
// workflow: workers may write a job's state (a raise fails the job) but
// never its workflow, and NATS permissions tell the two apart by bucket
// (deploy/nats/accounts.conf). A separate bucket rather than a key prefix
// in JETPOOL_JOBS, because a writer of any key of a bucket can also roll
// the whole bucket up (a Nats-Rollup: all header) and so erase every
// workflow in it.
const BucketJobState = "JETPOOL_JOB_STATE"

// Job is a job as jetpool reads it: its entry in the JETPOOL_JOBS bucket
// (the workflow and what the dispatcher knows), merged with its state in
// BucketJobState (Status, Reason). Workers read the workflow from here, so
// they need no files.
type Job struct {
	ID         string          `json:"id"`
	Workflow   json.RawMessage `json:"workflow"` // workflow.Encode()
	Actions    []string        `json:"actions"`
	Input      string          `json:"input,omitempty"`
	Total      int64           `json:"total"`      // records dispatched (valid once Dispatched)
	Dispatched bool            `json:"dispatched"` // every record is published
	// Status and Reason live in BucketJobState; the copy in JETPOOL_JOBS is
	// what the dispatcher wrote, and counts only while no state entry exists
	// (a job of an earlier version).
	Status string `json:"status"`
	// Reason says why a failed job failed: the diagnostic of the record that raised.
	Reason     string    `json:"reason,omitempty"`
	MaxDeliver int       `json:"max_deliver"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`

	// The rest, like Status and Reason, lives in BucketJobState: what a
	// running job changes (workers add to Cost; retry raises MaxCost and
	// marks a Replay).
	//
	// MaxCost is the job's budget in dollars (0: none): new calls stop once
	// Cost reaches it (worker/cost.go). `jetpool retry --max-cost` raises it.
	MaxCost float64 `json:"max_cost,omitempty"`
	// Cost is what the job's calls have cost so far, as the workers have
	// added it (each at most a second behind: worker/cost.go).
	Cost float64 `json:"cost,omitempty"`
	// Replay is set by `jetpool retry` before it republishes a job's dead
	// letters, and cleared when the job completes: a retry killed half way
	// is found and finished by the next one.
	Replay *ReplayMark `json:"replay,omitempty"`
	// Ledger is the part of the budget the workers hold (ledger.go): their
	// leases, what stopped workers may have spent, the budget's stop.
	Ledger Ledger `json:"-"`

	// Deleted is set on the job a JobWatch passes on when its entry was
	// removed (jetpool job delete): only ID is set then.
	Deleted bool `json:"-"`
	// Revisions are the job's later workflows (jetpool retry --workflow):
	// revision n ≥ 2 is Revisions[n-2], revision 1 is Workflow. A work
	// message names its revision (HeaderRevision).
	Revisions []Revision `json:"revisions,omitempty"`
	// InputHash is the hash of the input's content when it was last
	// dispatched: `run --job` with a changed input dispatches only the
	// records that are new or changed.
	InputHash string `json:"input_hash,omitempty"`
	// Nonce, when set, names the dispatch that owns the job's first
	// publishing (dispatcher/checking.go): it ends the Nats-Msg-Id of every
	// work message the dispatcher publishes for the job's first action, and
	// is in its HeaderNonce (NewDispatchMsg). A purged attempt's ids, which
	// the server keeps for its dedupe window, are then never a later one's,
	// and a worker drops the late messages of a dispatch that lost the job.
	Nonce string `json:"nonce,omitempty"`
	// Lease is set while a dispatch publishes the job as it validates its
	// input (JobChecking): the time of its last renewal, about every second.
	// Nothing serves the job then (it has no work consumer), its records
	// carry no Nats-Msg-Id, and a dispatch that finds the lease not renewed
	// for long takes the job over: a new Nonce, the records purged, the
	// input published again. Zero once the pass is over.
	Lease time.Time `json:"lease,omitzero"`
	// Finished is when the job last completed: a finished job's rate is
	// over its own duration, Created to Finished.
	Finished time.Time `json:"finished,omitzero"`
	// StartAt, when set, is when the job was scheduled to start (dispatch
	// --at/--after): its work consumer was made paused until then, which
	// is what holds it back (the server keeps that across restarts).
	StartAt time.Time `json:"start_at,omitzero"`
	// Priority is the job's weight among the jobs a worker serves at once
	// (0: 1); it lives in BucketJobState, so it changes while the job runs
	// (SetPriority) and workers see it at once.
	Priority int `json:"priority,omitempty"`
}

// Weight is the job's priority as a worker weighs it: at least 1.
func (j *Job) Weight() int { return max(j.Priority, 1) }

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

// jobState is a job's entry in BucketJobState.
type jobState struct {
	Status  string      `json:"status"`
	Reason  string      `json:"reason,omitempty"`
	Updated time.Time   `json:"updated"`
	MaxCost float64     `json:"max_cost,omitempty"`
	Cost    float64     `json:"cost,omitempty"`
	Replay  *ReplayMark `json:"replay,omitempty"`
	// Finished: when the job last completed (its rate's end).
	Finished time.Time `json:"finished,omitzero"`
	Priority int       `json:"priority,omitempty"`
	Ledger
}

func (j *Job) state() jobState {
	return jobState{Status: j.Status, Reason: j.Reason, Updated: j.Updated, MaxCost: j.MaxCost, Cost: j.Cost, Replay: j.Replay,
		Finished: j.Finished, Priority: j.Priority, Ledger: j.Ledger}
}

func (j *Job) apply(s jobState) {
	j.Status, j.Reason, j.MaxCost, j.Cost, j.Replay, j.Finished = s.Status, s.Reason, s.MaxCost, s.Cost, s.Replay, s.Finished
	j.Priority = s.Priority
	j.Ledger = s.Ledger
	if s.Updated.After(j.Updated) {
		j.Updated = s.Updated
	}
}

// AddRevision adds a revision of the job's workflow (enc, read from file)
// and returns the job with it. Work published after it names it
// (HeaderRevision); records already in flight keep theirs.
func (b *Broker) AddRevision(ctx context.Context, id string, enc json.RawMessage, file string) (*Job, error) {
	return b.UpdateJobSpec(ctx, id, func(j *Job) bool {
		j.Revisions = append(j.Revisions, Revision{Workflow: enc, File: file, Created: time.Now().UTC()})
		return true
	})
}

// ErrJobNotFound is returned by GetJob when the job does not exist.
var ErrJobNotFound = errors.New("job not found")

// GetJob reads a job, its state applied, and the revision of its
// JETPOOL_JOBS entry.
func (b *Broker) GetJob(ctx context.Context, id string) (*Job, uint64, error) {
	j, rev, _, err := b.getJob(ctx, id)
	return j, rev, err
}

// getJob reads a job and the revisions of its two entries (stateRev 0: it
// has no state entry yet).
func (b *Broker) getJob(ctx context.Context, id string) (j *Job, specRev, stateRev uint64, err error) {
	j, specRev, err = b.getSpec(ctx, id)
	if err != nil {
		return nil, 0, 0, err
	}
	st, stateRev, err := b.getState(ctx, id)
	if err != nil {
		return nil, 0, 0, err
	}
	if stateRev > 0 {
		j.apply(st)
	}
	return j, specRev, stateRev, nil
}

func (b *Broker) getSpec(ctx context.Context, id string) (*Job, uint64, error) {
	e, err := b.kvLast(ctx, BucketJobs, id)
	if err != nil {
		return nil, 0, err
	}
	if e == nil {
		return nil, 0, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	var j Job
	if err := json.Unmarshal(e.Data, &j); err != nil {
		return nil, 0, fmt.Errorf("job %s: corrupt entry: %w", id, err)
	}
	return &j, e.Sequence, nil
}

// getState reads a job's state entry; rev 0 means there is none.
func (b *Broker) getState(ctx context.Context, id string) (jobState, uint64, error) {
	e, err := b.kvLast(ctx, BucketJobState, id)
	if err != nil || e == nil {
		return jobState{}, 0, err
	}
	var s jobState
	if err := json.Unmarshal(e.Data, &s); err != nil {
		return jobState{}, 0, fmt.Errorf("job %s: corrupt state entry: %w", id, err)
	}
	return s, e.Sequence, nil
}

// PutJob writes a job unconditionally: its JETPOOL_JOBS entry, then its
// state. Only a dispatcher does (the deploy/ worker user may not write
// JETPOOL_JOBS).
func (b *Broker) PutJob(ctx context.Context, j *Job) error {
	kv, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return err
	}
	states, err := b.KV(ctx, BucketJobState)
	if err != nil {
		return err
	}
	j.Updated = time.Now().UTC()
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	if err := putAnswered(ctx, kv, j.ID, data); err != nil {
		return err
	}
	data, err = json.Marshal(j.state())
	if err != nil {
		return err
	}
	return putAnswered(ctx, states, j.ID, data)
}

// putWait bounds how long putAnswered asks again a put nobody answered.
var putWait = 15 * time.Second

// putAnswered puts key, asking again while the bucket's stream does not
// answer (a cluster formed a moment ago is still electing its leader: CI
// met "nats: no response from stream" at a job's first put). A put of the
// same value twice is harmless.
func putAnswered(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) error {
	noAnswer := func(err error) bool {
		return Unanswered(err) || notReady(err)
	}
	_, err := untilAnswered(ctx, putWait, 50*time.Millisecond, time.Second, noAnswer, func() {}, func() error {
		_, err := kv.Put(ctx, key, data)
		return err
	})
	return err
}

// updateTries bounds the compare-and-set retries of one update.
const updateTries = 50

// UpdateJob applies fn to the job and writes its state (Status, Reason,
// MaxCost, Cost, Replay) with compare-and-set, retrying on conflict. fn
// returns false to leave the job as it is. What fn changes besides the
// state is not written: that is the dispatcher's (UpdateJobSpec). A worker
// may call it.
func (b *Broker) UpdateJob(ctx context.Context, id string, fn func(*Job) bool) (*Job, error) {
	states, err := b.KV(ctx, BucketJobState)
	if err != nil {
		return nil, err
	}
	for range updateTries {
		j, _, rev, err := b.getJob(ctx, id)
		if err != nil {
			return nil, err
		}
		if !fn(j) {
			return j, nil
		}
		j.Updated = time.Now().UTC()
		data, err := json.Marshal(j.state())
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = states.Create(ctx, id, data)
		} else {
			_, err = states.Update(ctx, id, data, rev)
		}
		if err == nil {
			return j, nil
		}
		if !IsConflict(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("job %s: too many concurrent updates", id)
}

// UpdateJobSpec applies fn to the job and writes its JETPOOL_JOBS entry
// with compare-and-set, retrying on conflict; fn returns false to leave it.
// Status and Reason are UpdateJob's: what fn changes of them is not
// written. The dispatcher's (Total, Dispatched).
func (b *Broker) UpdateJobSpec(ctx context.Context, id string, fn func(*Job) bool) (*Job, error) {
	kv, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return nil, err
	}
	for range updateTries {
		spec, rev, err := b.getSpec(ctx, id)
		if err != nil {
			return nil, err
		}
		j := *spec
		if !fn(&j) {
			return b.withState(ctx, &j)
		}
		st := spec.state()
		j.apply(st) // the state is UpdateJob's
		j.Updated = time.Now().UTC()
		data, err := json.Marshal(&j)
		if err != nil {
			return nil, err
		}
		_, err = kv.Update(ctx, id, data, rev)
		if err == nil {
			return b.withState(ctx, &j)
		}
		if !IsConflict(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("job %s: too many concurrent updates", id)
}

// withState applies the job's state entry, if any, to j.
func (b *Broker) withState(ctx context.Context, j *Job) (*Job, error) {
	st, rev, err := b.getState(ctx, j.ID)
	if err != nil {
		return nil, err
	}
	if rev > 0 {
		j.apply(st)
	}
	return j, nil
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

// JobWatch follows every job: its JETPOOL_JOBS entry merged with its state.
type JobWatch struct {
	b             *Broker
	specs, states jetstream.KeyWatcher
}

// WatchJobs starts watching both job buckets (WatchAll: a start nobody
// answers is tried again). Each reads the changes; Stop ends the watch.
func (b *Broker) WatchJobs(ctx context.Context) (*JobWatch, error) {
	jobs, err := b.KV(ctx, BucketJobs)
	if err != nil {
		return nil, err
	}
	states, err := b.KV(ctx, BucketJobState)
	if err != nil {
		return nil, err
	}
	ws, err := WatchAll(ctx, jobs)
	if err != nil {
		return nil, err
	}
	wt, err := WatchAll(ctx, states)
	if err != nil {
		_ = ws.Stop()
		return nil, err
	}
	return &JobWatch{b: b, specs: ws, states: wt}, nil
}

// Each calls fn with every job, then again whenever its entry or its state
// changes, until ctx is done or the watch is stopped. A job is passed once
// its JETPOOL_JOBS entry is seen, with its state applied; fn owns the Job
// it is given. A removed entry is passed on as a Job with only ID and
// Deleted set.
func (w *JobWatch) Each(ctx context.Context, fn func(*Job)) {
	specs := map[string]*Job{}
	states := map[string]jobState{}
	// Nothing is passed on until both buckets' initial values are read: a
	// job passed before its state would look running to a worker, which
	// would call for a job cancelled or failed long ago.
	specsRead, statesRead := false, false
	emit := func(id string) {
		spec, ok := specs[id]
		if !ok || !specsRead || !statesRead {
			return // its state came first, or the initial values are being read
		}
		j := *spec
		if st, ok := states[id]; ok {
			j.apply(st)
		}
		fn(&j)
	}
	emitAll := func() {
		if !specsRead || !statesRead {
			return
		}
		for _, id := range slices.Sorted(maps.Keys(specs)) {
			emit(id)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.specs.Updates():
			if !ok {
				return
			}
			if e == nil {
				specsRead = true
				emitAll()
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				if _, known := specs[e.Key()]; known {
					delete(specs, e.Key())
					delete(states, e.Key())
					fn(&Job{ID: e.Key(), Deleted: true})
				}
				continue
			}
			var j Job
			if err := json.Unmarshal(e.Value(), &j); err != nil {
				w.b.Log.Warn().Str("job", e.Key()).Err(err).Msg("unreadable job entry")
				continue
			}
			specs[e.Key()] = &j
			emit(e.Key())
		case e, ok := <-w.states.Updates():
			if !ok {
				return
			}
			if e == nil {
				statesRead = true
				emitAll()
				continue
			}
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st jobState
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				w.b.Log.Warn().Str("job", e.Key()).Err(err).Msg("unreadable job state entry")
				continue
			}
			states[e.Key()] = st
			emit(e.Key())
		}
	}
}

// Stop ends the watch.
func (w *JobWatch) Stop() {
	_ = w.specs.Stop()
	_ = w.states.Stop()
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
		if j.Stopped() || (j.Status == JobCompleted && j.Replay == nil) {
			return false
		}
		j.Status = JobCompleted
		j.Replay = nil
		j.Finished = finished
		return true
	})
}
