package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/export"
	"github.com/jetpool/jetpool/internal/profile"
	"github.com/jetpool/jetpool/workflow"
)

type runFlags struct {
	input, output, job, idField, format string
	duplicates                          string
	concurrency                         int
	skipBad, noProgress, noPreflight    bool
	allowFailed                         bool
	maxCost                             float64             // cost.go
	priority                            int                 // a new job's priority (0: the workflow's)
	checked                             *dispatcher.Checked // by prepare
	fresh, matched                      bool                // --new-job; f.job found by matchJob (match.go)
}

// duplicatesFlag adds --duplicates, shared by run and dispatch.
func (f *runFlags) duplicatesFlag(fs *flag.FlagSet) {
	fs.StringVar(&f.duplicates, "duplicates", dispatcher.DuplicatesDefault,
		"a record id used more than once: \"error\" refuses the input (file:line of each), \"first\" keeps the first record of each id")
}

func cmdRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "WORKFLOW --input FILE [--output FILE] [flags]",
		"Dispatch a job, work it, wait until every record has a final result, write the results and print a summary.\n"+
			"Running the same command again does not re-run records that already succeeded. An edited input runs only its\n"+
			"new and changed records, under the job that runs this workflow and has records of the input (it says which;\n"+
			"--new-job starts a new job; several such jobs: refused, with the command for each). With --job of a job that\n"+
			"exists: another workflow is refused (use 'jetpool retry --job ID --workflow FILE'); a changed input runs\n"+
			"only its new and changed records. Exit 0 every record ok, 4 completed with failed records, 1 the job failed\n"+
			"(a raise, or its max_cost reached: the summary says what was spent, how many records were stopped before a\n"+
			"call, and the command that runs them with a larger budget: jetpool retry --job ID --max-cost N).")
	var f runFlags
	fs.StringVar(&f.input, "input", "", "input records: JSONL (one object per line), CSV with a header row, or Parquet (one record a row)")
	fs.StringVar(&f.output, "output", "", "write results here: JSONL, or CSV or Parquet for a .csv or .parquet name (default: none; see 'jetpool results')")
	fs.StringVar(&f.job, "job", "", "job id (default: derived from the workflow and the input, so a rerun resumes, or the job that runs\nthis workflow and has records of the input); an existing job with a changed input runs only the records\nthat are new or changed")
	fs.StringVar(&f.idField, "id-field", "", "record field holding the record id (default: \"id\" when a record has it, else a stable hash of the record)")
	fs.StringVar(&f.format, "format", "", "input format: jsonl, csv or parquet (default: from the file extension)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "concurrent model calls (default $JETPOOL_CONCURRENCY or 64)")
	fs.BoolVar(&f.skipBad, "skip-bad", false, "dead-letter malformed input lines (reason bad_input) instead of refusing the file")
	fs.BoolVar(&f.noProgress, "no-progress", false, "no progress bar")
	fs.BoolVar(&f.noPreflight, "no-preflight", false, "skip the providers' credential check")
	fs.BoolVar(&f.allowFailed, "allow-failed", false, "exit 0 when the job completed with failed records (default: exit 4)")
	f.duplicatesFlag(fs)
	f.newJobFlag(fs)
	f.priorityFlag(fs)
	maxCostFlag(fs, &f.maxCost)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("want exactly one WORKFLOW argument, got %d", len(pos))
	}
	if f.input == "" {
		return usageErr("--input is required")
	}
	if err := checkPriority("--priority", f.priority); err != nil {
		return err
	}
	wf, err := loadWorkflow(pos[0])
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	defer tuneGC(ctx, b, cmp.Or(f.concurrency, e.cfg.Concurrency))()
	if err := serveLocal(b); err != nil {
		return err
	}
	c := e.client(b)
	if err := f.matchJob(ctx, e, c, wf, pos[0], "run"); err != nil { // match.go
		return err
	}
	opts, err := f.prepare(ctx, wf, c)
	if err != nil {
		return err
	}

	start := time.Now()
	d := &dispatcher.Dispatcher{B: b, Log: e.log}
	old, err := c.ExistingJob(ctx, wf, f.job, f.input, f.checked, pos[0])
	if err != nil {
		return err
	}
	if old != nil {
		// An input fix: only the records that are new or changed run.
		if err := f.refresh(ctx, e, c, wf, opts, old, pos[0], "run"); err != nil { // match.go
			return err
		}
		return f.work(ctx, e, c, old.ID, start, wf)
	}
	res, err := d.Dispatch(ctx, wf, opts)
	if err != nil {
		return jp.InputError(err)
	}
	job := res.Job
	if err := c.ApplyMaxCost(ctx, job, f.maxCost); err != nil {
		return err
	}
	if res.Existing {
		fmt.Fprintf(e.stderr, "job %s was dispatched before: resuming it (records that succeeded are not run again)\n", job.ID)
	} else {
		fmt.Fprintf(e.stderr, "job %s: %s dispatched", job.ID, plural(res.Published, "record"))
		if res.Duplicates > 0 {
			fmt.Fprintf(e.stderr, " (%d already published)", res.Duplicates)
		}
		if res.Skipped > 0 {
			fmt.Fprintf(e.stderr, ", %d later uses of ids used before skipped (--duplicates first)", res.Skipped)
		}
		if res.BadLines > 0 {
			fmt.Fprintf(e.stderr, ", %d bad lines dead-lettered", res.BadLines)
		}
		fmt.Fprintln(e.stderr)
	}
	return f.work(ctx, e, c, job.ID, start, wf)
}

// work works the run's job to its end and reports (workAndReport), keeps
// the embedded store (housekeep) and gives the exit code.
func (f *runFlags) work(ctx context.Context, e *env, c *jp.Client, job string, start time.Time, wf *workflow.Workflow) error {
	err := workAndReport(ctx, e, c, job, f.concurrency, f.output, !f.noProgress, start, wf)
	if c.Embedded() {
		housekeep(ctx, e, c.Broker(), job) // job.go: no operator runs `jetpool job purge` here
	}
	return exitOnFailed(err, f.allowFailed)
}

// errFailedRecords is workAndReport's error for a job that completed with
// failed records (exitFailedRecords).
type errFailedRecords struct {
	job    string
	failed int64
}

func (e *errFailedRecords) Error() string {
	return fmt.Sprintf("job %s completed with %s (exit %d; --allow-failed exits 0)", e.job, plural(e.failed, "failed record"), exitFailedRecords)
}

// exitOnFailed turns a job that completed with failed records into exit
// code exitFailedRecords, or into success with allowFailed.
func exitOnFailed(err error, allowFailed bool) error {
	var fr *errFailedRecords
	if !errors.As(err, &fr) {
		return err
	}
	if allowFailed {
		return nil
	}
	return &exitError{code: exitFailedRecords, err: fr}
}

// loadWorkflow loads and validates the workflow run and dispatch were
// given (jp.LoadWorkflow). It needs no server. Its failures are
// configuration errors (exit 2).
func loadWorkflow(path string) (*workflow.Workflow, error) {
	return jp.LoadWorkflow(path)
}

// prepare does everything run and dispatch do, once connected, before they
// publish (jp.Client.CheckInput): every failure is a usage or
// configuration error (exit 2) and nothing has been published. c nil
// (validate --input): no server, no size check. f.checked is nil when the
// job does not exist yet: its dispatch checks the input as it goes.
func (f *runFlags) prepare(ctx context.Context, wf *workflow.Workflow, c *jp.Client) (dispatcher.Options, error) {
	opts := dispatcher.Options{Input: f.input, Format: f.format, IDField: f.idField, JobID: f.job, SkipBad: f.skipBad,
		Duplicates: f.duplicates, Priority: f.priority}
	ch, err := c.CheckInput(ctx, wf, &opts, f.maxCost, f.noPreflight)
	if err != nil {
		return opts, err
	}
	f.checked = ch
	return opts, nil
}

// workAndReport works the job in this process (jp.Client.Work) until
// it is done, then writes results and the summary. Used by run, and by
// retry on the embedded server.
//
// wf is the workflow file the command was given (nil for retry), which the
// pool trusts (jp.Trust; nil on the embedded store: every revision of
// the job). A pool that cannot serve the job (a key missing under
// --no-preflight, say) ends the command with why: the job stays queued for
// this command run again, or for workers that can.
func workAndReport(ctx context.Context, e *env, c *jp.Client, jobID string, concurrency int, output string, progress bool, start time.Time,
	wf *workflow.Workflow) error {
	var trusted []*workflow.Workflow
	if wf != nil {
		trusted = []*workflow.Workflow{wf}
	}
	bar := newProgress(e, progress)
	defer bar.finish()
	w, err := c.Work(ctx, jobID, jp.WorkParams{Concurrency: concurrency, Trusted: trusted, Progress: bar.follow(ctx, c.Broker()),
		Done: func() {
			bar.finish()
			profile.WriteHeap(os.Getenv("JETPOOL_MEMPROFILE")) // the job's end: what the embedded server keeps of it
		}})
	if err != nil {
		if ue := (*jp.UnservableError)(nil); errors.As(err, &ue) {
			return err
		}
		if ctx.Err() != nil {
			return &exitError{code: exitInterrupt, err: fmt.Errorf("interrupted: in-flight calls were finished or handed back; run the same command again to resume job %s", jobID)}
		}
		return err
	}
	job := w.Job
	jsonl := output
	if export.FormatOf(output) != export.JSONL {
		jsonl = "" // written below, in its own format
	}
	sum, err := summarize(ctx, c, job, jsonl)
	if err != nil {
		return err
	}
	if output != jsonl {
		if err := writeResults(ctx, c.Broker(), job, output); err != nil {
			return err
		}
	}
	sum.providers = limiterLines(w.Limits)
	sum.print(e, time.Since(start), w.Calls)
	if output != "" {
		fmt.Fprintf(e.stderr, "results: %s\n", output)
	}
	if err := stoppedErr(job); err != nil {
		return err
	}
	if sum.Failed > 0 {
		return &errFailedRecords{job: job.ID, failed: sum.Failed}
	}
	return nil
}

// waitJob waits until every record of the job has a final result (or the job
// failed and nothing is left in flight), with a progress bar on a terminal.
func waitJob(ctx context.Context, e *env, c *jp.Client, jobID string, progress bool) (*broker.Job, error) {
	bar := newProgress(e, progress)
	defer bar.finish()
	return c.Wait(ctx, jobID, bar.follow(ctx, c.Broker()), 0)
}
