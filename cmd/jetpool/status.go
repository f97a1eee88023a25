package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/worker"
)

// jobStatus is `jetpool status --json`.
type jobStatus struct {
	Job        string           `json:"job"`
	Status     string           `json:"status"`
	Reason     string           `json:"reason,omitempty"`
	Total      int64            `json:"total"`
	Queued     uint64           `json:"queued"`
	InFlight   int64            `json:"in_flight"`
	Storing    int64            `json:"storing"`
	Waiting    int64            `json:"waiting_for_redelivery"`
	Succeeded  int64            `json:"succeeded"`
	Failed     int64            `json:"failed"`
	DeadByReas map[string]int64 `json:"dead_lettered_by_reason,omitempty"`
	Paused     bool             `json:"paused,omitempty"`
	Rate       float64          `json:"records_per_second"`
	Created    time.Time        `json:"created"`
	Workers    int              `json:"workers"`
	Batches    []batchStatus    `json:"batches,omitempty"` // outstanding provider batches (mode: batch)
	// Unservable is the workers that will not serve this job, with why
	// (no key, an endpoint their operator does not allow, a newer format).
	Unservable []refusal `json:"unservable,omitempty"`
}

// refusal is a worker that cannot serve a job.
type refusal struct {
	Worker string `json:"worker"`
	Reason string `json:"reason"`
}

// batchStatus is one outstanding provider batch (JETPOOL_BATCHES).
type batchStatus struct {
	Action     string       `json:"action"`
	Key        string       `json:"key"`
	ProviderID string       `json:"provider_batch_id,omitempty"`
	State      string       `json:"state"` // submitting, or the provider's word
	Round      int          `json:"round"`
	Counts     batch.Counts `json:"counts"`
	Age        string       `json:"age"`
	LastError  string       `json:"last_error,omitempty"`
}

func cmdStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "status", "[JOB] [--json]", "Show queued, in flight, waiting for redelivery, succeeded, failed and dead letters by reason.")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	var jobs []*broker.Job
	if len(pos) == 1 {
		j, _, err := b.GetJob(ctx, pos[0])
		if err != nil {
			return err
		}
		jobs = []*broker.Job{j}
	} else if len(pos) == 0 {
		if jobs, err = b.ListJobs(ctx); err != nil {
			return err
		}
	} else {
		return usageErr("want at most one JOB")
	}
	// The backlogs first, then the workers' counts at once: the closer
	// together, the less a busy job's records move between the two.
	infos := map[string]*jetstream.ConsumerInfo{}
	for _, j := range jobs {
		if cons, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(j.ID)); err == nil {
			infos[j.ID] = cons.CachedInfo() // the lookup's own answer
		}
	}
	ws, workers := workerStats(b)
	var out []jobStatus
	for _, j := range jobs {
		s, err := statusOf(ctx, b, j, infos[j.ID], ws, len(pos) == 1)
		if err != nil {
			return err
		}
		s.Workers = workers
		s.Unservable = ws.refused[j.ID]
		out = append(out, s)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if len(pos) == 1 {
			return enc.Encode(out[0])
		}
		return enc.Encode(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(e.stdout, "no jobs")
		return nil
	}
	tw := newTable(e)
	fmt.Fprintln(tw, "JOB\tSTATUS\tTOTAL\tQUEUED\tIN FLIGHT\tWAITING\tSUCCEEDED\tFAILED\tREC/S")
	for _, s := range out {
		st := s.Status
		if s.Paused {
			st += " (paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\n", s.Job, st, s.Total, s.Queued, s.InFlight, s.Waiting, s.Succeeded, s.Failed, s.Rate)
	}
	tw.Flush()
	for _, s := range out {
		if len(s.DeadByReas) > 0 {
			fmt.Fprintf(e.stdout, "%s dead letters by reason: %s\n", s.Job, kvList(s.DeadByReas))
		}
		if s.Reason != "" {
			fmt.Fprintf(e.stdout, "%s failed: %s\n", s.Job, s.Reason)
		}
		for _, r := range s.Unservable {
			fmt.Fprintf(e.stdout, "worker %s cannot serve job %s: %s\n", r.Worker, s.Job, r.Reason)
		}
	}
	printBatches(e, out)
	printLimits(ctx, e, b) // status_limits.go: cooldowns and open circuits
	fmt.Fprintf(e.stdout, "(%d workers answered)\n", workers)
	return nil
}

// statusOf is job j's status; info is its consumer's (nil: none, or
// unreadable).
func statusOf(ctx context.Context, b *broker.Broker, j *broker.Job, info *jetstream.ConsumerInfo, ws workerCounts, byReason bool) (jobStatus, error) {
	s := jobStatus{Job: j.ID, Status: j.Status, Reason: j.Reason, Total: j.Total, Created: j.Created}
	c, err := b.JobCounts(ctx, j, byReason)
	if err != nil {
		return s, err
	}
	s.Succeeded, s.Failed, s.DeadByReas = c.OK, c.Failed, c.ByReason
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
		s.Paused = info.Paused
	}
	if hs, err := batch.List(ctx, b, j.ID); err == nil {
		for _, h := range hs {
			st := h.State
			if h.ProviderState != "" {
				st = h.ProviderState
			}
			s.Batches = append(s.Batches, batchStatus{Action: h.Action, Key: h.Key, ProviderID: h.ProviderID, State: st,
				Round: h.Round, Counts: h.Counts, Age: time.Since(h.Created).Round(time.Second).String(), LastError: h.LastError})
		}
	}
	if el := time.Since(j.Created).Seconds(); el > 0 {
		s.Rate = float64(c.Done) / el
	}
	// A job worked by long-running workers has nobody waiting on it: the
	// first status that sees it finished records that it completed.
	p := broker.Progress{Counts: c, Queued: s.Queued, AckPending: int(s.InFlight + s.Storing + s.Waiting)}
	if backlog && j.Status == broker.JobRunning && p.Finished(j) {
		if nj, err := b.UpdateJob(ctx, j.ID, func(j *broker.Job) bool {
			if j.Status != broker.JobRunning {
				return false
			}
			j.Status = broker.JobCompleted
			return true
		}); err == nil {
			s.Status = nj.Status
		} else {
			s.Status = broker.JobCompleted
		}
	}
	return s, nil
}

// Scatter-gather of workerStats: answers come within statsWait, and the
// gather ends early once statsQuiet passes with no new answer.
const (
	statsWait  = 300 * time.Millisecond
	statsQuiet = 50 * time.Millisecond
)

// workerCounts is what the live workers answered, by job.
type workerCounts struct {
	inFlight, storing, readAhead map[string]int64
	refused                      map[string][]refusal // by job: the workers that cannot serve it
}

// addCounts adds a worker's counts by job to the sums.
func addCounts(sum, counts map[string]int64) {
	for j, v := range counts {
		sum[j] += v
	}
}

// workerStats asks every live worker for its in-flight and read-ahead records (scatter-gather
// on jetpool.ctl.stats). With no worker, the server's no-responders status
// ends it at once; otherwise it ends statsQuiet after the last answer.
func workerStats(b *broker.Broker) (workerCounts, int) {
	ws := workerCounts{inFlight: map[string]int64{}, storing: map[string]int64{}, readAhead: map[string]int64{},
		refused: map[string][]refusal{}}
	inbox := nats.NewInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := b.NC.ChanSubscribe(inbox, ch)
	if err != nil {
		return ws, 0
	}
	defer sub.Unsubscribe()
	if err := b.NC.PublishRequest(broker.SubjectControl, inbox, nil); err != nil {
		return ws, 0
	}
	n := 0
	deadline := time.NewTimer(statsWait)
	defer deadline.Stop()
	quiet := time.NewTimer(statsWait)
	defer quiet.Stop()
	for {
		select {
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return ws, n // no responders: no worker is running
			}
			var s worker.Stats
			if json.Unmarshal(m.Data, &s) == nil {
				n++
				addCounts(ws.inFlight, s.InFlight)
				addCounts(ws.storing, s.Storing)
				addCounts(ws.readAhead, s.ReadAhead)
				for j, why := range s.Unservable {
					ws.refused[j] = append(ws.refused[j], refusal{Worker: s.Worker, Reason: why})
				}
			}
			quiet.Reset(statsQuiet)
		case <-quiet.C:
			return ws, n
		case <-deadline.C:
			return ws, n
		}
	}
}

// printBatches lists the outstanding provider batches of the jobs shown.
func printBatches(e *env, out []jobStatus) {
	n := 0
	for _, s := range out {
		n += len(s.Batches)
	}
	if n == 0 {
		return
	}
	tw := newTable(e)
	fmt.Fprintln(tw, "JOB\tACTION\tPROVIDER BATCH\tSTATE\tROUND\tTOTAL\tSUCCEEDED\tFAILED\tAGE")
	for _, s := range out {
		for _, b := range s.Batches {
			id := b.ProviderID
			if id == "" {
				id = "(" + b.Key + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Job, b.Action, id, b.State, b.Round,
				b.Counts.Total, b.Counts.Succeeded, b.Counts.Failed, b.Age)
		}
	}
	tw.Flush()
}
