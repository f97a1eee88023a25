// Package jobstatus reads what `jetpool status` shows of a job — queued, in
// flight, storing, waiting for redelivery, succeeded, failed, dead letters by
// reason, outstanding provider batches — from the job's work consumer, its
// results and the workers' answers on jetpool.ctl.stats. `jetpool status` and
// the dashboard (ui/) both read it here, so they never disagree.
package jobstatus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/worker"
)

// Job is one job's status: `jetpool status --json`.
type Job struct {
	Job        string           `json:"job"`
	Status     string           `json:"status"`
	Reason     string           `json:"reason,omitempty"`
	Total      int64            `json:"total"`
	Queued     uint64           `json:"queued"`
	InFlight   int64            `json:"in_flight"`
	Storing    int64            `json:"storing"`
	Waiting    int64            `json:"waiting_for_redelivery"`
	Succeeded  int64            `json:"succeeded"`
	Failed     int64            `json:"failed"` // records failed at some action; cancelled ones are Cancelled
	DeadByReas map[string]int64 `json:"dead_lettered_by_reason,omitempty"`
	Paused     bool             `json:"paused,omitempty"`
	// PausedUntil is when the server resumes a paused job by itself (zero:
	// paused until resumed, or not paused); a job scheduled to start
	// later is paused until then (Scheduled).
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// Scheduled: the job was dispatched to start at StartAt (dispatch
	// --at/--after), and its pause is that wait.
	Scheduled bool      `json:"scheduled,omitempty"`
	StartAt   time.Time `json:"start_at,omitzero"`
	// Steps and StepsTotal count a pipeline's work done, a step a record
	// and action (Steps): progress a job of several actions shows before
	// records leave its last one. Zero for a job of one action.
	Steps      int64 `json:"steps,omitempty"`
	StepsTotal int64 `json:"steps_total,omitempty"`
	// Priority is the job's weight when workers divide their slots among
	// the jobs that have work (jetpool job priority changes it).
	Priority int `json:"priority"`
	// Cancelled is the records a cancel ended (status cancelled: not
	// counted in Failed; in the dead letters by reason, as cancelled).
	Cancelled int64 `json:"cancelled"`
	// DeadLetters is the job's dead letters in the DLQ now, read with the
	// split by reason. Failed counts failed results: a dead letter purged
	// (dlq purge, the dashboard) leaves its record failed and is no longer
	// here; one replayed leaves both (its failed result goes with it).
	DeadLetters *int64    `json:"dead_letters,omitempty"`
	Rate        float64   `json:"records_per_second"`
	Created     time.Time `json:"created"`
	Workers     int       `json:"workers"`
	Batches     []Batch   `json:"batches,omitempty"` // outstanding provider batches (mode: batch)
	// Cost is what the job's calls have cost so far, in dollars, as the
	// workers added it to the job's ledger (each at most a second behind):
	// O(1), no walk over results. MaxCost is its budget; CostHeld what the
	// workers' leases hold of it for calls under way and the next ones;
	// CostInDoubt what workers that stopped answering held (they may have
	// spent it: broker.Ledger).
	Cost        float64 `json:"cost,omitempty"`
	MaxCost     float64 `json:"max_cost,omitempty"`
	CostHeld    float64 `json:"cost_held,omitempty"`
	CostInDoubt float64 `json:"cost_in_doubt,omitempty"`
	// Unservable is the workers that will not serve this job, with why
	// (a key they lack or may not send there, a newer workflow format).
	Unservable []Refusal `json:"unservable,omitempty"`
	// Replay is an unfinished replay of the job's dead letters (jetpool retry).
	Replay *broker.ReplayMark `json:"replay,omitempty"`
	// StorageFaults are the writes the workers' store refuses now: their
	// records are held (counted in storing) and written again.
	StorageFaults []WorkerFault `json:"storage_faults,omitempty"`
	// Revision is the job's current workflow revision (results name the
	// one that produced them).
	Revision int `json:"revision"`
	// Unanswered is the parts of this status (PartBacklog, PartResults,
	// PartBatches, PartSteps) whose reads did not answer within the
	// status's bound, with why: their figures are unknown, not zero.
	Unanswered map[string]string `json:"unanswered,omitempty"`
	// FromReplica: the job's entries were read from a replica of their
	// buckets, their leader not answering (broker.JobsFromReplica): its
	// status, reason and cost may be a moment behind.
	FromReplica bool `json:"from_replica,omitempty"`
}

// Answered reports whether part of s was read.
func (s *Job) Answered(part string) bool {
	_, missed := s.Unanswered[part]
	return !missed
}

// miss records that part of s did not answer.
func (s *Job) miss(part string, err error) {
	if s.Unanswered == nil {
		s.Unanswered = map[string]string{}
	}
	s.Unanswered[part] = err.Error()
}

// Refusal is a worker that will not serve a job, and why.
type Refusal struct {
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// WorkerFault is a storage fault one worker reports.
type WorkerFault struct {
	Worker string `json:"worker"`
	worker.StorageFault
}

// Faults lists the storage faults the workers report.
func Faults(stats []worker.Stats) []WorkerFault {
	var out []WorkerFault
	for _, s := range stats {
		for _, f := range s.Faults {
			out = append(out, WorkerFault{Worker: s.Worker, StorageFault: f})
		}
	}
	return out
}

// Batch is one outstanding provider batch (JETPOOL_BATCHES).
type Batch struct {
	Action     string `json:"action"`
	Key        string `json:"key"`
	ProviderID string `json:"provider_batch_id,omitempty"`
	// Deployment is the provider's deployment the batch went to ("": a
	// provider without deployments).
	Deployment string       `json:"deployment,omitempty"`
	State      string       `json:"state"` // submitting, or the provider's word
	Round      int          `json:"round"`
	Counts     batch.Counts `json:"counts"`
	Age        string       `json:"age"`
	LastError  string       `json:"last_error,omitempty"`
}

// Read returns the status of each of jobs (with byReason, failures split by
// reason) and the answers of the live workers, its reads bounded by Bound.
func Read(ctx context.Context, b *broker.Broker, jobs []*broker.Job, byReason bool) ([]Job, []worker.Stats, error) {
	return ReadWithin(ctx, b, jobs, byReason, NewReads(Bound))
}

// ReadWithin is Read with its reads bounded by r: a part that does not
// answer in time is named in the job's Unanswered.
func ReadWithin(ctx context.Context, b *broker.Broker, jobs []*broker.Job, byReason bool, r *Reads) ([]Job, []worker.Stats, error) {
	// The backlogs first, then the workers' counts at once: the closer
	// together, the less a busy job's records move between the two.
	infos := map[string]*jetstream.ConsumerInfo{}
	missed := map[string]error{}
	for _, j := range jobs {
		err := r.Do(ctx, func(ctx context.Context) error {
			cons, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(j.ID))
			if err == nil {
				infos[j.ID] = cons.CachedInfo() // the lookup's own answer
			}
			return err
		})
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			missed[j.ID] = err // a job without a consumer (finished, swept) has no backlog
		}
	}
	stats, _ := worker.Gather(b) // no answer: no worker counts
	ws := sumCounts(stats)
	out := make([]Job, 0, len(jobs))
	for _, j := range jobs {
		s := of(ctx, b, r, j, infos[j.ID], ws, byReason)
		if err := missed[j.ID]; err != nil {
			s.miss(PartBacklog, err)
		}
		s.Workers = len(stats)
		s.StorageFaults = Faults(stats)
		for _, st := range stats {
			if why, ok := st.Unservable[j.ID]; ok {
				s.Unservable = append(s.Unservable, Refusal{Worker: st.Worker, Reason: why})
			}
		}
		out = append(out, s)
	}
	return out, stats, nil
}

// oneColumn takes out of Storing, then Waiting, the records that are
// counted as Succeeded, Failed or Cancelled too: a record whose result was stored but
// whose worker has not heard so (a write whose ack was lost, tried again;
// a group commit stored, its records not yet acked) is done, and every
// record is in one column.
func (s *Job) oneColumn() {
	if s.Total <= 0 {
		return
	}
	over := int64(s.Queued) + s.InFlight + s.Storing + s.Waiting + s.Succeeded + s.Failed + s.Cancelled - s.Total
	for _, col := range []*int64{&s.Storing, &s.Waiting} {
		if over <= 0 {
			return
		}
		take := min(over, *col)
		*col -= take
		over -= take
	}
}

// of is job j's status; info is its consumer's (nil: none, or
// unreadable). Each read is bounded by r.
func of(ctx context.Context, b *broker.Broker, r *Reads, j *broker.Job, info *jetstream.ConsumerInfo, ws workerCounts, byReason bool) Job {
	s := Job{Job: j.ID, Status: j.Status, Reason: j.Reason, Total: j.Total, Created: j.Created, Replay: j.Replay, Cost: j.Cost, MaxCost: j.MaxCost,
		Revision: j.Revision()}
	l := j.Ledger
	l.Reclaim(time.Now()) // a lease past its renewal counts in doubt here (a copy: the job is not changed)
	s.CostHeld, s.CostInDoubt = l.Held(), l.InDoubt()
	var c broker.Counts
	counted := r.Do(ctx, func(ctx context.Context) (err error) {
		c, err = b.JobCounts(ctx, j, byReason)
		return err
	})
	if counted != nil {
		s.miss(PartResults, counted)
	}
	s.Succeeded, s.Failed, s.Cancelled, s.DeadByReas = c.OK, c.Failed, c.Cancelled, c.ByReason
	if byReason {
		var n uint64
		if err := r.Do(ctx, func(ctx context.Context) (err error) {
			n, err = b.Count(ctx, broker.StreamDLQ, broker.DLQFilter(j.ID, ""))
			return err
		}); err != nil {
			s.miss(PartDeadLetters, err)
		} else {
			dead := int64(n)
			s.DeadLetters = &dead
		}
	}
	s.StartAt = j.StartAt
	s.Priority = j.Weight()
	backlog := info != nil
	if backlog {
		// A record a worker read ahead is delivered but not started:
		// queued, as it was a few milliseconds before. One called, whose
		// result is being stored, is storing: neither in a slot nor
		// waiting.
		pending := int64(info.NumAckPending)
		ahead := min(ws.readAhead[j.ID], pending)
		s.Queued = info.NumPending + uint64(ahead)
		s.InFlight = min(ws.inFlight[j.ID], pending-ahead)
		s.Storing = min(ws.storing[j.ID], pending-ahead-s.InFlight)
		s.Waiting = pending - ahead - s.InFlight - s.Storing
		pause := broker.PauseOf(info)
		s.Paused = pause.Paused
		if pause.Paused && pause.Until.Before(broker.PauseForever) {
			s.PausedUntil = pause.Until
		}
		s.Scheduled = pause.Paused && !j.StartAt.IsZero() && pause.Until.Equal(j.StartAt)
		s.oneColumn()
	}
	var hs []*batch.Header
	if err := r.Do(ctx, func(ctx context.Context) (err error) {
		hs, err = batch.List(ctx, b, j.ID)
		return err
	}); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		s.miss(PartBatches, err)
	} else {
		for _, h := range hs {
			st := h.State
			if h.ProviderState != "" {
				st = h.ProviderState
			}
			s.Batches = append(s.Batches, Batch{Action: h.Action, Key: h.Key, ProviderID: h.ProviderID, Deployment: h.Deployment, State: st,
				Round: h.Round, Counts: h.Counts, Age: time.Since(h.Created).Round(time.Second).String(), LastError: h.LastError})
		}
	}
	if len(j.Actions) > 1 && counted == nil {
		var at map[string]uint64
		if err := r.Do(ctx, func(ctx context.Context) (err error) {
			at, err = AtActions(ctx, b, j.ID)
			return err
		}); err != nil {
			s.miss(PartSteps, err)
		} else {
			s.Steps, s.StepsTotal = Steps(j.Total, c.Done, j.Actions, at)
		}
	}
	if el := j.Elapsed(time.Now()).Seconds(); el > 0 && counted == nil {
		s.Rate = float64(c.Done) / el
	}
	// A job worked by long-running workers has nobody waiting on it: the
	// first status that sees it finished records that it completed (one
	// whose user may write job states: a read-only one says so only).
	p := broker.Progress{Counts: c, Queued: s.Queued, AckPending: int(s.InFlight + s.Storing + s.Waiting)}
	if backlog && counted == nil && j.Status == broker.JobRunning && p.Finished(j) {
		if !b.MayPublish(ctx, "$KV."+broker.BucketJobState+"."+j.ID) {
			s.Status = broker.JobCompleted
		} else if nj, err := completeJob(ctx, b, r, j.ID); err == nil {
			s.Status, s.Replay = nj.Status, nj.Replay
		} else {
			s.Status = broker.JobCompleted
		}
	}
	return s
}

// completeJob records that a finished job completed, within r's bound.
func completeJob(ctx context.Context, b *broker.Broker, r *Reads, id string) (nj *broker.Job, err error) {
	err = r.Do(ctx, func(ctx context.Context) error {
		nj, err = b.CompleteJob(ctx, id)
		return err
	})
	return nj, err
}

// workerCounts is what the live workers answered, by job.
type workerCounts struct{ inFlight, storing, readAhead map[string]int64 }

// sumCounts adds up the workers' counts by job.
func sumCounts(stats []worker.Stats) workerCounts {
	ws := workerCounts{inFlight: map[string]int64{}, storing: map[string]int64{}, readAhead: map[string]int64{}}
	for _, s := range stats {
		addCounts(ws.inFlight, s.InFlight)
		addCounts(ws.storing, s.Storing)
		addCounts(ws.readAhead, s.ReadAhead)
	}
	return ws
}

// addCounts adds a worker's counts by job to the sums.
func addCounts(sum, counts map[string]int64) {
	for j, v := range counts {
		sum[j] += v
	}
}
