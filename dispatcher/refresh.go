package dispatcher

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// Refreshed counts what Refresh did.
type Refreshed struct {
	Job       *broker.Job
	New       int64 // records no earlier input had: dispatched
	Changed   int64 // records whose text changed (broker.RecordSum): dispatched again
	Unchanged int64 // kept as they are, results and all
	Skipped   int64 // later uses of ids used before (DuplicatesFirst)
	BadLines  int64 // new bad lines, dead-lettered as bad_input (SkipBad)
	// Fixed is the bad lines of the earlier input (bad_input, an id made
	// of their line) whose line now holds something else: their results
	// and dead letters are removed, and they no longer count.
	Fixed int64
	// Missing is the job's records that this input lacks: they keep their
	// results (and are in the job's export).
	Missing int64
}

// Refresh dispatches into job, dispatched before from an earlier version of
// its input, only the records of opts.Input that are new or changed: an
// input fix (two bad records of 10k corrected) pays for those alone. A
// record is matched by id, and is changed when the hash of its text differs
// from the one its first action's result keeps (broker.Result.RecordSum).
// A changed record's results, at every action, and its dead letters are
// removed before it is published again, as a new replay generation, under
// the job's current revision; so it counts once, and its old story cannot
// be replayed over it. A bad line of the earlier input (bad_input) whose
// line now holds a good record or another bad one is removed the same way.
// Records of the earlier input that the new one lacks keep their results.
// The job must have nothing queued or in flight.
func (d *Dispatcher) Refresh(ctx context.Context, wf *workflow.Workflow, job *broker.Job, opts Options) (*Refreshed, error) {
	p, err := d.B.Backlog(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	if left := p.Queued + uint64(p.AckPending); left > 0 {
		return nil, fmt.Errorf("job %s still has %d records queued or in flight: let it finish (jetpool status %s) before changing its input", job.ID, left, job.ID)
	}
	dead, oldBad, err := deadLetters(ctx, d.B, job.ID)
	if err != nil {
		return nil, err
	}
	first, rev := job.Actions[0], job.Revision()
	res := &Refreshed{}
	var fixed []string
	opts.readFiles = true
	hash, err := eachRecord(wf, opts, func(rec Record, le *LineError) error {
		if id, ok := oldBad[rec.Line]; ok && (le == nil || badID(rec) != id) {
			fixed = append(fixed, id)
		}
		if le != nil {
			return d.refreshBad(ctx, job, first, rec, le, res)
		}
		if opts.skip(rec) {
			res.Skipped++
			return nil
		}
		sum := broker.RecordSum(rec.Raw)
		last, _, err := d.B.LastOutcome(ctx, job.ID, first, rec.ID)
		if err != nil {
			return err
		}
		replays := 0
		switch {
		case last == nil:
			res.New++
		case last.RecordSum != "" && broker.SameRecord(last.RecordSum, rec.Raw), last.RecordSum == "" && last.Reason != string(retry.ReasonBadInput):
			// (A result of an earlier jetpool keeps no sum: kept.)
			res.Unchanged++
			return nil
		default:
			res.Changed++
			if replays, err = d.forget(ctx, job, rec.ID, dead[rec.ID]); err != nil {
				return err
			}
			replays++
		}
		env := &broker.Envelope{ID: rec.ID, RawRecord: rec.Raw, Line: rec.Line, Sum: sum, Files: rec.Files}
		m, err := broker.NewDispatchMsg(job, first, env, replays)
		if err != nil {
			return err
		}
		if rev > 1 {
			m.Header.Set(broker.HeaderRevision, strconv.Itoa(rev))
		}
		if _, err := d.B.JS.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("publish %s: %w", rec.ID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, id := range fixed {
		if _, err := d.forget(ctx, job, id, dead[id]); err != nil {
			return nil, err
		}
		res.Fixed++
	}
	res.Missing = max(job.Total-res.Changed-res.Unchanged-res.Fixed, 0)
	// The totals and the input are the job's spec (the dispatcher's); its
	// status is its state (broker.UpdateJob).
	if _, err := d.B.UpdateJobSpec(ctx, job.ID, func(j *broker.Job) bool {
		j.Total += res.New + res.BadLines - res.Fixed
		j.Input, j.InputHash = opts.Input, hash
		return true
	}); err != nil {
		return nil, err
	}
	j, err := d.B.UpdateJob(ctx, job.ID, func(j *broker.Job) bool {
		if res.New+res.Changed+res.BadLines > 0 && j.Status != broker.JobDispatching {
			j.Status, j.Reason = broker.JobRunning, ""
			return true
		}
		return false
	})
	if err != nil {
		return nil, err
	}
	res.Job = j
	d.Log.Info().Str("job", job.ID).Int64("new", res.New).Int64("changed", res.Changed).
		Int64("unchanged", res.Unchanged).Msg("input refreshed")
	return res, nil
}

// refreshBad dead-letters a bad line the job has no result for yet.
func (d *Dispatcher) refreshBad(ctx context.Context, job *broker.Job, first string, rec Record, le *LineError, res *Refreshed) error {
	id := badID(rec)
	last, _, err := d.B.LastOutcome(ctx, job.ID, first, id)
	if err != nil {
		return err
	}
	if last != nil {
		res.Unchanged++ // the same bad line as before: its dead letter stays
		return nil
	}
	res.BadLines++
	return d.deadLetterBad(ctx, job.ID, first, rec, le)
}

// forget removes every result of record in job, at every action, and its
// dead letters (seqs), and returns the highest replay generation its
// results had.
func (d *Dispatcher) forget(ctx context.Context, job *broker.Job, record string, seqs []uint64) (int, error) {
	top := 0
	for _, a := range job.Actions {
		// One message per subject, but a record may have an ok and a
		// failure at one action (a stop between the two writes).
		for range 4 {
			r, seq, err := d.B.LastOutcome(ctx, job.ID, a, record)
			if err != nil {
				return 0, err
			}
			if r == nil {
				break
			}
			top = max(top, r.Replays)
			if err := d.B.DeleteMsg(ctx, broker.StreamResults, seq); err != nil {
				return 0, err
			}
		}
	}
	for _, seq := range seqs {
		if err := d.B.DeleteMsg(ctx, broker.StreamDLQ, seq); err != nil {
			return 0, err
		}
	}
	return top, nil
}

// deadLetters maps the records of job that have dead letters to their
// sequences (failures are few), and the lines of its bad lines that have
// no id of their own (badID: "line<N>-<hash>") to that id.
func deadLetters(ctx context.Context, b *broker.Broker, job string) (map[string][]uint64, map[int]string, error) {
	seqs, bad := map[string][]uint64{}, map[int]string{}
	err := deadletter.Each(ctx, b, deadletter.Filter{Job: job}, func(e *deadletter.Entry) error {
		seqs[e.Record] = append(seqs[e.Record], e.Seq)
		var n int
		var sum string
		if e.Reason == retry.ReasonBadInput {
			if _, err := fmt.Sscanf(e.Record, "line%d-%s", &n, &sum); err == nil {
				bad[n] = e.Record
			}
		}
		return nil
	})
	return seqs, bad, err
}
