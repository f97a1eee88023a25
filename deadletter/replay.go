package deadletter

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/tracing"
)

// ReplayOptions select and steer a replay.
type ReplayOptions struct {
	Filter
	DryRun bool
	// Mode, when "online", makes a batch action run its replayed records online.
	Mode string
	// Each, when set, is told about every entry as it is handled.
	Each func(e *Entry, replayed bool, why string)
	// crashAfterPublish, in tests, stops after the republish of the first entry.
	crashAfterPublish bool
	// afterPublish, in tests, runs after each republish.
	afterPublish func(*Entry)
}

// ReplayResult counts what a replay did.
type ReplayResult struct {
	Matched  int
	Replayed int
	Skipped  int
	Jobs     map[string]bool
}

// Replay republishes matching dead letters to the work stream as a new replay
// generation and deletes each from the DLQ only after its republish is
// acknowledged. A crash at any point leaves each record in the DLQ, in the
// work stream, or both — never neither; replaying again never runs a record
// twice (the generation's Nats-Msg-Id dedupes it, and workers skip records
// that already have a successful result).
func Replay(ctx context.Context, b *broker.Broker, o ReplayOptions) (*ReplayResult, error) {
	res := &ReplayResult{Jobs: map[string]bool{}}
	var entries []*Entry
	err := Each(ctx, b, o.Filter, func(e *Entry) error { entries = append(entries, e); return nil })
	if err != nil {
		return res, err
	}
	perJob := map[string]int{}
	revision := map[string]int{} // the job's current revision: replays run under it
	for _, e := range entries {
		perJob[e.Job]++
	}
	for _, e := range entries {
		res.Matched++
		env, err := e.Envelope()
		if err != nil {
			res.Skipped++
			if o.Each != nil {
				o.Each(e, false, "its body is not a record (bad input): fix the input file and dispatch it again")
			}
			continue
		}
		if o.DryRun {
			if o.Each != nil {
				o.Each(e, false, "dry run")
			}
			continue
		}
		if !res.Jobs[e.Job] {
			if revision[e.Job], err = reopen(ctx, b, e.Job, perJob[e.Job]); err != nil {
				return res, err
			}
			res.Jobs[e.Job] = true
		}
		if err := replayOne(ctx, b, o, e, env, revision[e.Job]); err != nil {
			return res, err
		}
		res.Replayed++
		if o.Each != nil {
			o.Each(e, true, "")
		}
	}
	return res, nil
}

// reopen readies a job for n replayed records and returns the revision they
// run under. A job that failed (on_exhausted: raise) or completed runs
// again; its mark says a replay is under way before anything is
// republished, so that a replay killed half way is found and finished by
// the next (Unfinished); a finished job's work consumer, which goes after a
// grace (broker.Sweep), is made again.
func reopen(ctx context.Context, b *broker.Broker, job string, n int) (int, error) {
	j, err := b.UpdateJob(ctx, job, func(j *broker.Job) bool {
		if j.Ended() {
			j.Status, j.Reason = broker.JobRunning, ""
			// Its budget, if it stopped it, is asked again call by call.
			j.Ledger.Reached = false
			j.Ledger.TenantCap = 0
		}
		j.Replay = &broker.ReplayMark{At: time.Now().UTC(), Records: n}
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("job %s: %w", job, err)
	}
	if err := b.RestoreConsumer(ctx, j); err != nil {
		return 0, fmt.Errorf("job %s: %w", job, err)
	}
	return j.Revision(), nil
}

// replayOne republishes one dead letter's record as the next replay
// generation, then deletes its failed result and the dead letter.
func replayOne(ctx context.Context, b *broker.Broker, o ReplayOptions, e *Entry, env *broker.Envelope, rev int) error {
	// The failed result that no longer holds once the record is back in
	// the work stream. It is looked up before the republish and deleted
	// by its sequence after it: a worker may run the record and store
	// its new result on the same subject in between, and that one stays.
	old, err := b.LastMsg(ctx, broker.StreamResults, broker.ResultSubject(e.Job, e.Action, string(e.Reason), e.Record))
	if err != nil {
		return fmt.Errorf("replay %s/%s/%s: %w (it is still in the DLQ)", e.Job, e.Action, e.Record, err)
	}
	if old != nil {
		// What the failed generation cost goes with the record, so
		// that its last result still adds up every call it took.
		var r broker.Result
		if json.Unmarshal(old.Data, &r) == nil && len(r.Actions) > 0 {
			env.Accounts = append(env.Accounts, r.Actions[len(r.Actions)-1])
			if r.Cost != nil {
				env.Cost += *r.Cost // the record's total_cost keeps it
			}
		}
	}
	m, err := broker.NewWorkMsg(e.Job, e.Action, env, e.Replays+1)
	if err != nil {
		return err
	}
	// The replay goes on in the record's trace (package tracing): under
	// the delivery that failed it, or, while this process does not trace,
	// with that delivery's context passed on as it was.
	_, span := tracing.StartReplay(ctx, e.Trace, tracing.Record{Job: e.Job, Action: e.Action, ID: e.Record}, e.Replays+1, string(e.Reason))
	if span.SpanContext().IsValid() {
		tracing.InjectSpan(span, m.Header)
	} else if e.Trace != "" {
		m.Header[broker.HeaderTraceparent] = []string{e.Trace}
	}
	defer span.End()
	if rev > 1 {
		m.Header.Set(broker.HeaderRevision, strconv.Itoa(rev))
	}
	if o.Mode != "" {
		m.Header.Set(broker.HeaderMode, o.Mode)
	}
	if _, err := b.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("replay %s/%s/%s: %w (it is still in the DLQ)", e.Job, e.Action, e.Record, err)
	}
	if o.crashAfterPublish {
		return errCrash
	}
	if o.afterPublish != nil {
		o.afterPublish(e)
	}
	// The record is back in the work stream: its failed result no longer
	// holds, and its dead letter goes.
	if old != nil {
		if err := b.DeleteMsg(ctx, broker.StreamResults, old.Sequence); err != nil {
			return err
		}
	}
	if err := b.DeleteMsg(ctx, broker.StreamDLQ, e.Seq); err != nil {
		return fmt.Errorf("replayed %s but could not delete dead letter %d: %w (a second retry will not run it twice)", e.Record, e.Seq, err)
	}
	return nil
}

var errCrash = fmt.Errorf("simulated crash")

// Reasons accepted by filters.
func ValidReason(r string) bool {
	for _, x := range retry.Reasons {
		if string(x) == r {
			return true
		}
	}
	return false
}

// UnfinishedReplay is a job whose last replay has records not yet
// finished: in the work stream, or waiting for redelivery.
type UnfinishedReplay struct {
	Job     string
	At      time.Time // when the replay began
	Records int       // dead letters it replayed
	Left    int64     // the job's records still queued, in flight or waiting
}

// Unfinished lists the jobs (job, or every job when "") with a replay not
// finished: a `jetpool retry` killed after it republished, or one whose
// records no worker has run yet. Cheap: the jobs bucket and one consumer
// info a job with a replay mark.
func Unfinished(ctx context.Context, b *broker.Broker, job string) ([]UnfinishedReplay, error) {
	var jobs []*broker.Job
	if job != "" {
		j, _, err := b.GetJob(ctx, job)
		if err != nil {
			return nil, err
		}
		jobs = []*broker.Job{j}
	} else {
		var err error
		if jobs, err = b.ListJobs(ctx); err != nil {
			return nil, err
		}
	}
	var out []UnfinishedReplay
	for _, j := range jobs {
		if j.Replay == nil {
			continue
		}
		p, err := b.Backlog(ctx, j.ID)
		if err != nil {
			return nil, err
		}
		left := int64(p.Queued) + int64(p.AckPending)
		if left == 0 && j.Status != broker.JobRunning {
			continue
		}
		out = append(out, UnfinishedReplay{Job: j.ID, At: j.Replay.At, Records: j.Replay.Records, Left: left})
	}
	return out, nil
}
