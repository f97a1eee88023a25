package jetpool

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/workflow"
)

// DispatchParams say what Dispatch (and Run) publish and how.
type DispatchParams struct {
	// Input is the input file: JSONL, CSV with a header row, or Parquet.
	// Records, when set instead, are the records, each a value that
	// encodes to a JSON object (a map or a struct); they are written to a
	// temporary JSONL file that lives as long as the call.
	Input   string
	Records iter.Seq[any]
	// Format is the input's: "jsonl", "csv" or "parquet" ("": from
	// Input's extension).
	Format string
	// IDField is the record field holding its id (default: "id" when a
	// record has it, else a stable hash of the record).
	IDField string
	// JobID is the job's id (default: derived from the workflow and the
	// input, so that the same call again resumes the job, or the one job
	// that runs this workflow and has records of the input: MatchJob). A
	// job that exists with a changed input gets only the records that are
	// new or changed.
	JobID string
	// NewJob starts a new job even when one runs this workflow and has
	// records of the input.
	NewJob bool
	// SkipBad dead-letters malformed input lines (reason bad_input)
	// instead of refusing the input.
	SkipBad bool
	// Duplicates is how a record id used twice is treated:
	// dispatcher.DuplicatesError (the default) or DuplicatesFirst.
	Duplicates string
	// MaxCost is the job's budget in dollars (default: the workflow's
	// defaults: max_cost; 0 is none).
	MaxCost float64
	// NoPreflight skips the providers' credential check.
	NoPreflight bool
	// Priority, above 0, is a new job's priority in place of the
	// workflow's priority: (broker.Job.Priority).
	Priority int
}

// options is p as the dispatcher takes it, for the input file in.
func (p *DispatchParams) options(in string) dispatcher.Options {
	return dispatcher.Options{Input: in, Format: p.Format, IDField: p.IDField, JobID: p.JobID, SkipBad: p.SkipBad,
		Duplicates: p.Duplicates, Priority: p.Priority}
}

// DispatchResult is what Dispatch did.
type DispatchResult struct {
	Job *broker.Job
	// Published, Duplicates (already published before: a resume),
	// BadLines (dead-lettered) and Skipped (later uses of an id) count the
	// records of a new dispatch; Existing says the job was dispatched
	// whole before and nothing was published.
	Published, Duplicates, BadLines, Skipped int64
	Existing                                 bool
	// Refreshed, set when the input changed under an existing job, counts
	// what its records became (only the new and changed ones run).
	Refreshed *dispatcher.Refreshed
	// Match is the job the input was matched to, when no JobID was given
	// and one job runs this workflow and has records of the input.
	Match *dispatcher.Match
}

// Dispatch publishes a job of wf's actions over the records of p: one
// message per record to the work stream, read by workers (Work, Run, or
// `jetpool worker` processes). It returns once every record is published;
// a call that fails half way can be made again and publishes the rest.
//
// Before it publishes it reads the whole input (a bad line is ErrInvalid,
// naming file, line and field, unless SkipBad) and checks the providers'
// credentials (unless NoPreflight).
func (c *Client) Dispatch(ctx context.Context, wf *workflow.Workflow, p DispatchParams) (*DispatchResult, error) {
	in, done, err := p.inputFile()
	if err != nil {
		return nil, err
	}
	defer done()
	opts := p.options(in)
	res := &DispatchResult{}
	switch {
	case p.JobID != "" && p.NewJob:
		return nil, invalid(errors.New("NewJob and JobID: pick one"))
	case p.NewJob:
		if opts.JobID, _, err = c.FreshJobID(ctx, wf, opts); err != nil {
			return nil, err
		}
	case p.JobID == "":
		m, err := c.MatchJob(ctx, wf, opts)
		if err != nil {
			return nil, err
		}
		opts.JobID, res.Match = m.ID, m.Match
	}
	checked, err := c.CheckInput(ctx, wf, &opts, p.MaxCost, p.NoPreflight)
	if err != nil {
		return nil, err
	}
	old, err := c.ExistingJob(ctx, wf, opts.JobID, in, checked, "")
	if err != nil {
		return nil, err
	}
	if old != nil {
		r, err := c.Refresh(ctx, wf, old, opts)
		if err != nil {
			return nil, err
		}
		res.Job, res.Refreshed = r.Job, r
		return res, nil
	}
	d := &dispatcher.Dispatcher{B: c.b, Log: c.log}
	r, err := d.Dispatch(ctx, wf, opts)
	if err != nil {
		return nil, InputError(err)
	}
	if err := c.ApplyMaxCost(ctx, r.Job, p.MaxCost); err != nil {
		return nil, err
	}
	res.Job, res.Published, res.Duplicates, res.BadLines, res.Skipped, res.Existing =
		r.Job, r.Published, r.Duplicates, r.BadLines, r.Skipped, r.Existing
	return res, nil
}

// inputFile is p's input file, written from p.Records when it has them;
// done removes what it wrote.
func (p *DispatchParams) inputFile() (path string, done func(), err error) {
	if p.Records == nil {
		if p.Input == "" {
			return "", nil, invalid(errors.New("no input: set DispatchParams.Input or Records"))
		}
		return p.Input, func() {}, nil
	}
	if p.Input != "" {
		return "", nil, invalid(errors.New("DispatchParams: Input and Records: pick one"))
	}
	dir, err := os.MkdirTemp("", "jetpool-records-")
	if err != nil {
		return "", nil, err
	}
	done = func() { os.RemoveAll(dir) }
	path = filepath.Join(dir, "records.jsonl")
	if err := writeRecords(path, p.Records); err != nil {
		done()
		return "", nil, err
	}
	p.Format = "jsonl"
	return path, done, nil
}

func writeRecords(path string, recs iter.Seq[any]) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	n := 0
	for r := range recs {
		n++
		if err := enc.Encode(r); err != nil {
			return invalid(fmt.Errorf("record %d: %w", n, err))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// CheckInput is what a dispatch does before it publishes: read the whole
// input (refusing bad lines unless opts.SkipBad, ids used twice, records
// too big for the server), check the providers' credentials (unless
// noPreflight), and apply maxCost to wf (above 0). Every failure is
// ErrInvalid and nothing has been published.
//
// A job that does not exist yet is not read here: its dispatch validates
// each record as it publishes it, and serves none until the whole input is
// found good. The result is nil then.
func (c *Client) CheckInput(ctx context.Context, wf *workflow.Workflow, opts *dispatcher.Options, maxCost float64, noPreflight bool) (*dispatcher.Checked, error) {
	if c != nil {
		opts.MaxPayload = c.b.NC.MaxPayload()
	}
	if d := opts.Duplicates; d != "" && d != dispatcher.DuplicatesError && d != dispatcher.DuplicatesFirst {
		return nil, invalid(fmt.Errorf("--duplicates %q: want error or first", d))
	}
	if c != nil && c.newJob(ctx, opts.JobID) {
		return nil, preflightAndBudget(ctx, wf, maxCost, noPreflight)
	}
	ch, err := dispatcher.CheckInput(wf, *opts)
	if err != nil {
		return nil, invalid(err)
	}
	if len(ch.DupErrs) > 0 {
		return nil, invalid(&dispatcher.DuplicateIDsError{Errs: ch.DupErrs})
	}
	if len(ch.Bad) > 0 && !opts.SkipBad {
		return nil, invalid(&dispatcher.BadInputError{Errs: ch.Bad})
	}
	if err := preflightAndBudget(ctx, wf, maxCost, noPreflight); err != nil {
		return nil, err
	}
	ch.Apply(opts)
	return ch, nil
}

// newJob reports whether job is not there yet: an id the server does not
// have, or "" (derived from the input: a job dispatched before from the
// same input is found by the dispatch itself).
func (c *Client) newJob(ctx context.Context, job string) bool {
	if job == "" {
		return true
	}
	_, _, err := c.b.GetJob(ctx, job)
	return errors.Is(err, broker.ErrJobNotFound)
}

func preflightAndBudget(ctx context.Context, wf *workflow.Workflow, maxCost float64, noPreflight bool) error {
	if !noPreflight {
		if err := Preflight(ctx, wf); err != nil {
			return err
		}
	}
	// After the job id is derived: a budget is not part of a job's
	// identity, so a rerun with a larger one resumes the same job.
	return invalid(SetBudget(wf, maxCost))
}

// SetBudget makes maxCost (above 0) wf's budget. Every action must have a
// price for it to count, and a max_tokens for it to reserve each call's
// worst case (workflow.CheckBudget).
func SetBudget(wf *workflow.Workflow, maxCost float64) error {
	if maxCost <= 0 {
		return nil
	}
	wf.MaxCost = maxCost
	if err := wf.CheckBudget(); err != nil {
		return fmt.Errorf("--max-cost: %w", err)
	}
	return nil
}

// InputError makes a dispatch's refusal of its input or workflow (a bad
// line, an id used twice, a reference no record answers) ErrInvalid, as
// CheckInput makes those it finds.
func InputError(err error) error {
	if re := (*dispatcher.RefusedError)(nil); errors.As(err, &re) {
		return invalid(err)
	}
	return err
}

// ExistingJob is what a dispatch to job id does with a job that exists: a
// workflow that differs from the job's current revision is refused with
// the command to use (never silently run the old one); an input that
// differs from the one last dispatched is to be refreshed (the job is
// returned, for Refresh). Nil job: dispatch as usual. path is the workflow
// file the refusal names ("": wf.File).
func (c *Client) ExistingJob(ctx context.Context, wf *workflow.Workflow, id, input string, checked *dispatcher.Checked, path string) (*broker.Job, error) {
	if id == "" {
		return nil, nil // the job id is derived from the workflow and the input
	}
	if path == "" {
		path = wf.File
	}
	j, _, err := c.b.GetJob(ctx, id)
	if errors.Is(err, broker.ErrJobNotFound) {
		return nil, nil
	}
	if err != nil || !j.Dispatched {
		return nil, err
	}
	cur, err := CurrentWorkflow(j)
	if err != nil {
		return nil, err
	}
	same, err := dispatcher.SameDefinition(cur, wf) // a budget is not part of a job's identity
	if err != nil {
		return nil, err
	}
	if !same {
		return nil, invalid(fmt.Errorf("job %s runs revision %d of its workflow, and %s differs from it: nothing was published\n"+
			"  to replay its failed records under %s (a new revision; what succeeded is kept): jetpool retry --job %s --workflow %s\n"+
			"  to run every record under it: jetpool run %s --input %s --new-job",
			j.ID, j.Revision(), path, path, j.ID, path, path, input))
	}
	if j.InputHash == "" || checked == nil || j.InputHash == checked.ContentHash {
		// The same input: a resume. (A job dispatched before jobs kept
		// their input's hash cannot tell: resumed, as it always was.)
		return nil, nil
	}
	return j, nil
}

// JobMatch is the job MatchJob chose for an input: ID "" is a new job.
type JobMatch struct {
	ID string
	// Match is set when the job was found by its records (not by the id
	// the workflow and the input derive).
	Match *dispatcher.Match
	// IndexErr is why jobs could not be looked up (an index this process
	// may not read): the dispatch goes to a new job.
	IndexErr error
}

// AmbiguousJobError is MatchJob's refusal when several jobs run the
// workflow and have records of the input: which of them holds the results
// the user means is theirs to say. It is ErrInvalid.
type AmbiguousJobError struct{ Matches []dispatcher.Match }

func (e *AmbiguousJobError) Error() string {
	return fmt.Sprintf("%d jobs run this workflow and have records of the input: name one", len(e.Matches))
}

// Is makes it ErrInvalid.
func (e *AmbiguousJobError) Is(target error) bool { return target == ErrInvalid }

// MatchJob decides, for a dispatch given no job id, which job the input
// goes to (docs/decisions.md, "An edited input runs under its job"):
//
//   - the job its id derives from (the same workflow file and input, or
//     that input last refreshed into another job);
//   - else the one job whose current workflow is this one and that has
//     records of the input (dispatcher.Matching), so that only the new and
//     changed records are paid for;
//   - several such jobs: *AmbiguousJobError;
//   - none: a new job (ID "").
func (c *Client) MatchJob(ctx context.Context, wf *workflow.Workflow, opts dispatcher.Options) (*JobMatch, error) {
	key, err := dispatcher.DefinitionKey(wf)
	if err != nil {
		return nil, err
	}
	ids, err := c.b.IndexedJobs(ctx, key)
	if err != nil {
		return &JobMatch{IndexErr: err}, nil
	}
	if len(ids) == 0 {
		return &JobMatch{}, nil // no job runs this workflow: nothing to read the input for
	}
	derived, err := dispatcher.DerivedJobID(wf, opts)
	if err != nil {
		return nil, invalid(err)
	}
	if j, _, err := c.b.GetJob(ctx, derived); err == nil {
		if cur, err := CurrentWorkflow(j); err == nil {
			if same, _ := dispatcher.SameDefinition(cur, wf); same {
				// This very input and workflow ran before: a resume, or, if
				// the job's input was refreshed since, a refresh back.
				return &JobMatch{ID: derived}, nil
			}
		}
		return &JobMatch{}, nil
	} else if !errors.Is(err, broker.ErrJobNotFound) {
		return nil, err
	}
	ms, err := dispatcher.Matching(ctx, c.b, wf, opts)
	if err != nil {
		return nil, err
	}
	switch len(ms) {
	case 0:
		return &JobMatch{}, nil
	case 1:
		return &JobMatch{ID: ms[0].Job.ID, Match: &ms[0]}, nil
	}
	return nil, &AmbiguousJobError{Matches: ms}
}

// FreshJobID is the id of a new job (DispatchParams.NewJob): the one
// derived from the workflow and the input, or, when that job exists
// (derived, then), the same with a random suffix. id "" is the derived id,
// still free.
func (c *Client) FreshJobID(ctx context.Context, wf *workflow.Workflow, opts dispatcher.Options) (id, derived string, err error) {
	derived, err = dispatcher.DerivedJobID(wf, opts)
	if err != nil {
		return "", "", invalid(err)
	}
	_, _, err = c.b.GetJob(ctx, derived)
	if errors.Is(err, broker.ErrJobNotFound) {
		return "", "", nil // the derived id is new already
	}
	if err != nil {
		return "", "", err
	}
	var r [3]byte
	_, _ = rand.Read(r[:])
	return derived + "-" + hex.EncodeToString(r[:]), derived, nil
}

// Refresh runs an input fix into job old (dispatcher.Refresh): only the
// records that are new or changed are dispatched. A job with records
// queued or in flight cannot take one: the error says what to do instead.
func (c *Client) Refresh(ctx context.Context, wf *workflow.Workflow, old *broker.Job, opts dispatcher.Options) (*dispatcher.Refreshed, error) {
	d := &dispatcher.Dispatcher{B: c.b, Log: c.log}
	r, err := d.Refresh(ctx, wf, old, opts)
	if err != nil {
		return nil, err
	}
	if err := dispatcher.IndexJob(ctx, c.b, wf, old.ID); err != nil {
		// A job of a jetpool before the index: found by the next edit once
		// indexed here.
		c.log.Warn().Str("job", old.ID).Err(err).Msg("job not indexed")
	}
	if wf.MaxCost > 0 && wf.MaxCost != old.MaxCost {
		// The workflow's (or MaxCost's) budget, as a dispatch applies it.
		if _, err := c.SetMaxCost(ctx, old.ID, wf.MaxCost); err != nil {
			return nil, err
		}
	}
	if r.Job == nil {
		r.Job = old
	}
	return r, nil
}
