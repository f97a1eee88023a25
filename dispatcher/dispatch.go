package dispatcher

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// MaxPendingDefault bounds the publish acks in flight.
const MaxPendingDefault = 4096

// MaxReportedErrors is how many bad lines are listed before "and N more".
const MaxReportedErrors = 20

// Options of a dispatch.
type Options struct {
	Input      string
	Format     string // "" from the extension
	IDField    string
	JobID      string // "" derives <workflow>-<hash of workflow and input>
	SkipBad    bool   // dead-letter bad lines as bad_input instead of refusing the file
	MaxPending int
	// Checked says the caller already ran Check with these options and got
	// JobID and no bad lines (or SkipBad): Dispatch reads the input once.
	Checked bool
	// MaxPayload is the connected server's max_payload (nats.Conn's
	// MaxPayload): Check refuses a record whose work message would be
	// larger, and a workflow whose job entry would be. 0: not checked (no
	// server yet); Dispatch sets it from its connection.
	MaxPayload int64
	// Progress, when set, is called with the number of records published so far.
	Progress func(published int64)

	// StartAt, when set, schedules a new job's start: it is stored and
	// published now, and its work consumer is made paused until then
	// (broker.EnsureConsumerFrom), so workers get nothing of it before.
	StartAt time.Time
	// Priority, when above 0, is a new job's priority in place of the
	// workflow's priority: (broker.Job.Priority).
	Priority int

	// Duplicates is how a record id used more than once is treated:
	// DuplicatesError (DuplicatesDefault, also for "") or DuplicatesFirst.
	Duplicates string
	// dups: the ids used more than once, and the line of their first use
	// (Checked.Apply).
	dups map[string]int
	// checkedHash and bad are what the validation pass found (Apply): the
	// input's content hash, and its bad lines by line. With checkedHash set,
	// the publish pass trusts the check (eachRecord).
	checkedHash string
	bad         map[int]*LineError
	// readFiles: the pass publishes, so it reads the files of the
	// records' images and documents (files.go).
	readFiles bool
}

// Result of a dispatch.
type Result struct {
	Job        *broker.Job
	Published  int64 // new records published now
	Duplicates int64 // records already published (same id), skipped by dedupe: a resumed dispatch
	BadLines   int64 // dead-lettered as bad_input (SkipBad)
	Existing   bool  // the job was already fully dispatched: nothing published

	// Skipped is the later uses of ids used more than once in the input
	// (DuplicatesFirst): never published.
	Skipped   int64
	inputHash string
}

// Dispatcher publishes jobs.
type Dispatcher struct {
	B   *broker.Broker
	Log zerolog.Logger
}

// Check reads the whole input once, refusing it when any line is bad
// (unless SkipBad), and returns the job id and the number of records.
// Nothing is published.
//
// Ids used more than once are refused with the bad lines (see CheckInput
// for all that the pass finds).
func Check(wf *workflow.Workflow, opts Options) (jobID string, records int64, bad []error, err error) {
	c, err := CheckInput(wf, opts)
	if err != nil {
		return "", 0, nil, err
	}
	return c.JobID, c.Records, append(c.Bad, c.DupErrs...), nil
}

// jobID is the job id of opts: its JobID, or one derived from the
// workflow and the input's content.
func jobID(wf *workflow.Workflow, opts Options, contentHash string) (string, error) {
	jobID := opts.JobID
	if jobID == "" {
		enc, _ := wf.Encode()
		h := sha256.New()
		h.Write(enc)
		h.Write([]byte(contentHash))
		h.Write([]byte(opts.IDField))
		base := strings.TrimSuffix(filepath.Base(wf.File), filepath.Ext(wf.File))
		if wf.Name != "" {
			base = wf.Name
		}
		base = sanitize(base)
		jobID = base + "-" + hex.EncodeToString(h.Sum(nil))[:8]
	}
	if err := broker.CheckJobID(jobID); err != nil {
		return "", err
	}
	return jobID, nil
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	out := b.String()
	if len(out) > 40 {
		out = out[:40]
	}
	if out == "" {
		out = "job"
	}
	return out
}

// checkFields returns the *LineError of a record that lacks a field the
// prompt of some action reads from the record (fields[i]: action i's).
// Every record must have every such field, not only those of the first
// action: a record that cannot run its second action is refused before its
// first is paid for. A field a record may lack is given as null or "".
func checkFields(file string, rec Record, wf *workflow.Workflow, fields [][]string) error {
	for i, fs := range fields {
		for _, f := range fs {
			if _, ok := rec.field(f); !ok {
				return missingField(file, rec, wf.Actions[i], f)
			}
		}
	}
	return nil
}

// eachRecord reads the input once and calls fn for every record, with the
// *LineError of a bad one (a malformed line, or a record that lacks a field
// a prompt reads from it). It returns the hash of the file's bytes.
//
// A JSONL record's Raw and fields are views of the reader's buffer (no
// copy, no map: this is every dispatch's hot path, run twice), valid only
// until fn returns: fn copies what it keeps.
//
// After the validation pass (opts.checkedHash, Checked.Apply), a JSONL
// line is read only as far as its id, the bad lines are those the pass
// found, and a file whose content is no longer the one checked is an error
// (what was read before it is handed to fn).
func eachRecord(wf *workflow.Workflow, opts Options, fn func(Record, *LineError) error) (string, error) {
	r, err := Open(opts.Input, opts.Format, opts.IDField)
	if err != nil {
		return "", err
	}
	defer r.Close()
	trusted := opts.checkedHash != ""
	fields := make([][]string, len(wf.Actions))
	for i := range wf.Actions {
		fields[i] = wf.RecordFields(i)
	}
	at := newAttacher(wf, opts) // files.go: nil without images or documents to read
	// Records whose files are read are decoded whole (attach renders their
	// parts from Fields); the others are read in place.
	r.views = at == nil
	r.idOnly = trusted && at == nil
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			if h := r.ContentHash(); trusted && h != opts.checkedHash {
				return "", fmt.Errorf("%s changed while it was being dispatched (what was read of it is published): dispatch it again to finish the job", opts.Input)
			}
			return r.ContentHash(), nil
		}
		switch le := opts.bad[rec.Line]; {
		case le != nil && rec.Line > 0:
			err = le
		case trusted:
		case err == nil:
			err = checkFields(opts.Input, rec, wf, fields)
			if err == nil && at == nil {
				err = checkSize(opts, rec, wf.Actions[0].Name)
			}
		}
		if err == nil && at != nil {
			// The files are read in both passes (sized in the first, carried
			// in the second), and the size is checked with them.
			err = at.attach(opts.Input, &rec)
			if err == nil && !trusted {
				err = checkSize(opts, rec, wf.Actions[0].Name)
			}
		}
		var le *LineError
		if err != nil && !errors.As(err, &le) {
			return "", err
		}
		if le != nil && rec.rows {
			le.rows = true // a Parquet row: "file: row N: reason"
		}
		if err := fn(rec, le); err != nil {
			return "", err
		}
	}
}

// BadInputError lists the refused lines of an input.
type BadInputError struct{ Errs []error }

func (e *BadInputError) Error() string {
	return listErrors(e.Errs, "bad input line", "bad input lines",
		"nothing published (fix them, or pass --skip-bad to dead-letter them as bad_input)")
}

// RefusedError is a dispatch's refusal of its input or its workflow, made
// before any record ran: a bad line, an id used twice, a reference no
// record answers, a file that cannot be read. It wraps the reason
// (*BadInputError, *DuplicateIDsError, *LineError, a workflow error…).
type RefusedError struct{ Err error }

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Dispatch checks the input, creates the job and publishes every record to
// its first action. A second dispatch of the same job publishes nothing.
// An input or workflow it refuses is a *RefusedError.
func (d *Dispatcher) Dispatch(ctx context.Context, wf *workflow.Workflow, opts Options) (*Result, error) {
	if mp := d.B.NC.MaxPayload(); opts.MaxPayload != mp {
		opts.MaxPayload, opts.Checked = mp, false // checked against another limit, or none
	}
	if !opts.Checked {
		// Publish while validating (checking.go); an input that is not
		// found good all through goes the careful way below, which says
		// what is wrong with it.
		res, err := d.dispatchChecking(ctx, wf, opts)
		if !errors.Is(err, errCheckFirst) {
			return res, err
		}
	}
	if !opts.Checked || opts.JobID == "" {
		if err := checkFirst(wf, &opts); err != nil {
			return nil, err
		}
	}
	jobID := opts.JobID
	switch j, rev, err := d.B.GetJob(ctx, jobID); {
	case err == nil && j.Dispatched:
		if j.Status == broker.JobChecking {
			// Its dispatch ended after the pass, before it served the job.
			if j, err = d.serve(ctx, j); err != nil {
				return nil, err
			}
		}
		return &Result{Job: j, Existing: true}, nil
	case err == nil && !j.Lease.IsZero():
		// Leased by a dispatch that published it as it validated it,
		// gone or still at it (checking.go).
		res, err := d.takeOver(ctx, wf, opts, j, rev, "")
		if !errors.Is(err, errCheckFirst) {
			return res, err
		}
		// Taken over and found not good (deleted), or deleted by its
		// owner: a new job.
	case err != nil && !errors.Is(err, broker.ErrJobNotFound):
		return nil, err
	}
	job, fresh, err := d.createJob(ctx, wf, opts)
	if err != nil {
		return nil, err
	}
	// Only a job's first dispatch knows no record of it can have run: a
	// dispatch resumed after a crash (the job exists) makes workers look
	// for results first.
	res, err := d.publish(ctx, wf, job, opts, fresh, nil)
	if err != nil {
		return nil, err
	}
	if _, err := d.B.UpdateJobSpec(ctx, jobID, func(j *broker.Job) bool {
		j.Total += res.Published + res.BadLines
		j.Dispatched = true
		j.InputHash = res.inputHash
		return true
	}); err != nil {
		return nil, err
	}
	job, err = d.B.UpdateJob(ctx, jobID, func(j *broker.Job) bool {
		if j.Status != broker.JobDispatching {
			return false
		}
		j.Status = broker.JobRunning
		return true
	})
	if err != nil {
		return nil, err
	}
	res.Job = job
	d.Log.Info().Str("job", jobID).Int64("published", res.Published).Int64("duplicates", res.Duplicates).
		Int64("bad_input", res.BadLines).Msg("dispatched")
	return res, nil
}

// checkFirst checks the whole input before anything is published and
// refuses it when bad; its bad lines pass with SkipBad.
func checkFirst(wf *workflow.Workflow, opts *Options) error {
	c, err := CheckInput(wf, *opts)
	if err != nil {
		return &RefusedError{Err: err}
	}
	if len(c.DupErrs) > 0 {
		return &RefusedError{Err: &DuplicateIDsError{Errs: c.DupErrs}}
	}
	if len(c.Bad) > 0 && !opts.SkipBad {
		return &RefusedError{Err: &BadInputError{Errs: c.Bad}}
	}
	c.Apply(opts)
	return nil
}

// createJob writes the job's entry (a new one, or the one a crashed
// dispatch left) as dispatching, and makes its consumer and counters.
// fresh: no record of the job can have run.
func (d *Dispatcher) createJob(ctx context.Context, wf *workflow.Workflow, opts Options) (job *broker.Job, fresh bool, err error) {
	jobID := opts.JobID
	enc, actions, err := spec(wf)
	if err != nil {
		return nil, false, err
	}
	// No MaxDeliver: jetpool enforces each record's delivery budget itself
	// (worker/decide.go, retry.LostDeliveriesMax), counting in the record's
	// state what JetStream cannot tell apart (a retry, a wait, a hand-back,
	// a delivery lost with a process). A server-side limit would drop a
	// record out of the work stream into an advisory, which a full store
	// cannot keep, and which nothing then counts.
	maxDeliver := -1
	job, _, err = d.B.GetJob(ctx, jobID)
	var start time.Time // a new job's scheduled start: an existing one keeps its pause, or its resume
	switch {
	case errors.Is(err, broker.ErrJobNotFound):
		start = startAt(opts)
		job = &broker.Job{ID: jobID, Created: time.Now().UTC(), MaxCost: wf.MaxCost, StartAt: start, Priority: cmp.Or(opts.Priority, wf.Priority)}
		// An entry removed by hand must not make old results invisible.
		if fresh, err = d.B.JobUnseen(ctx, jobID); err != nil {
			return nil, false, err
		}
	case err != nil:
		return nil, false, err
	}
	job.Workflow, job.Actions, job.Input, job.MaxDeliver = enc, actions, opts.Input, maxDeliver
	job.Status = broker.JobDispatching
	if err := d.B.PutJob(ctx, job); err != nil {
		return nil, false, fmt.Errorf("job %s: %w", jobID, err)
	}
	d.index(ctx, wf, jobID) // match.go
	if _, err := d.B.EnsureConsumerFrom(ctx, jobID, maxDeliver, start); err != nil {
		return nil, false, err
	}
	if err := d.B.EnsureCounters(ctx, job); err != nil {
		return nil, false, err
	}
	return job, fresh, nil
}

// badID is the record id of a bad line: its id when it has one, else one
// made of its line and text.
func badID(rec Record) string {
	if rec.ID != "" {
		return rec.ID
	}
	sum := sha256.Sum256(rec.Raw)
	return fmt.Sprintf("line%d-%s", rec.Line, hex.EncodeToString(sum[:4]))
}

func (d *Dispatcher) deadLetterBad(ctx context.Context, job, action string, rec Record, le *LineError) error {
	id := badID(rec)
	e := &deadletter.Entry{
		Job: job, Record: id, Action: action, Reason: retry.ReasonBadInput, Class: retry.ClassInvalidRequest,
		Error: "bad input: " + le.Error(), Attempts: 0, Deliveries: 0, FailedAt: time.Now().UTC(),
		Data: rec.Raw,
	}
	if le.tooLarge {
		e.Data = nil // it would not fit in a dead letter either: the line is in the input file
	}
	if err := deadletter.Publish(ctx, d.B, e); err != nil {
		return err
	}
	return d.B.WriteResult(ctx, &broker.Result{
		ID: id, Status: broker.StatusFailed, Reason: string(retry.ReasonBadInput), Action: action, Job: job,
		Error:    &broker.ResultError{Class: string(retry.ClassInvalidRequest), Message: e.Error},
		Finished: e.FailedAt, RecordSum: broker.RecordSum(rec.Raw),
	})
}
