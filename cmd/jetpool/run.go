package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/export"
	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/internal/profile"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
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
	defer tuneGC(ctx, b)()
	if err := serveLocal(b); err != nil {
		return err
	}
	if err := f.matchJob(ctx, e, b, wf, pos[0], "run"); err != nil { // match.go
		return err
	}
	opts, err := f.prepare(ctx, wf, b)
	if err != nil {
		return err
	}

	start := time.Now()
	d := &dispatcher.Dispatcher{B: b, Log: e.log}
	old, err := checkRunJob(ctx, b, wf, &f, pos[0]) // revise.go
	if err != nil {
		return err
	}
	if old != nil {
		// An input fix: only the records that are new or changed run.
		if err := f.refresh(ctx, e, b, wf, opts, old, pos[0], "run"); err != nil { // match.go
			return err
		}
		return f.work(ctx, e, b, old.ID, start, wf)
	}
	res, err := d.Dispatch(ctx, wf, opts)
	if err != nil {
		return inputError(err)
	}
	job := res.Job
	if err := f.applyMaxCost(ctx, b, job); err != nil {
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
	return f.work(ctx, e, b, job.ID, start, wf)
}

// work works the run's job to its end and reports (workAndReport), keeps
// the embedded store (housekeep) and gives the exit code.
func (f *runFlags) work(ctx context.Context, e *env, b *broker.Broker, job string, start time.Time, wf *workflow.Workflow) error {
	err := workAndReport(ctx, e, b, job, f.concurrency, f.output, !f.noProgress, start, wf)
	if b.Embedded() {
		housekeep(ctx, e, b, job) // job.go: no operator runs `jetpool job purge` here
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
// given, and checks that no provider would send a key the process must
// never send (a JETPOOL_ variable) before preflight calls anything. It
// needs no server. Its failures are configuration errors (exit 2).
func loadWorkflow(path string) (*workflow.Workflow, error) {
	wf, err := workflow.Load(path)
	if err != nil {
		return nil, configErr(err)
	}
	trust, err := runTrust(wf)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(wf.Providers)) {
		if err := trust.Check(wf.Providers[name]); err != nil {
			return nil, configErr(err)
		}
	}
	return wf, nil
}

// runTrust is the policy of a process that works the workflow files it was
// given (run, and its preflight; retry, the revisions of a job on its own
// store): the operator's (provider.LoadTrust) plus exactly the keys and
// endpoints those files name, because they are the user's own workflows on
// the user's own machine; never a JETPOOL_ variable. No (or nil) wf: the
// operator's alone.
func runTrust(wfs ...*workflow.Workflow) (*provider.Trust, error) {
	trust, err := provider.LoadTrust(os.LookupEnv)
	if err != nil {
		return nil, configErr(err)
	}
	for _, wf := range wfs {
		if wf != nil {
			trust = trust.Allowing(wf.Providers)
		}
	}
	return trust, nil
}

// prepare does everything run and dispatch do, once connected, before they
// publish: read the whole input (refusing bad lines unless --skip-bad, and
// records too big for b's server), and check the providers' credentials.
// Every failure is a usage/configuration error (exit 2) and nothing has
// been published. b nil (validate --input): no server, no size check.
//
// A job that does not exist yet is not read here: its dispatch validates
// each record as it publishes it, and serves none until the whole input is
// found good (dispatcher.Dispatch; a bad input is refused as here, nothing
// of it run, and inputError makes it exit 2). f.checked is nil then.
func (f *runFlags) prepare(ctx context.Context, wf *workflow.Workflow, b *broker.Broker) (dispatcher.Options, error) {
	opts := dispatcher.Options{Input: f.input, Format: f.format, IDField: f.idField, JobID: f.job, SkipBad: f.skipBad,
		Duplicates: f.duplicates, Priority: f.priority}
	if b != nil {
		opts.MaxPayload = b.NC.MaxPayload()
	}
	if d := f.duplicates; d != "" && d != dispatcher.DuplicatesError && d != dispatcher.DuplicatesFirst {
		return opts, usageErr("--duplicates %q: want error or first", d)
	}
	if b != nil && f.newJob(ctx, b) {
		if err := f.preflightAndBudget(ctx, wf); err != nil {
			return opts, err
		}
		f.checked = nil
		return opts, nil
	}
	c, err := dispatcher.CheckInput(wf, opts)
	if err != nil {
		return opts, configErr(err)
	}
	if len(c.DupErrs) > 0 {
		return opts, configErr(&dispatcher.DuplicateIDsError{Errs: c.DupErrs})
	}
	if len(c.Bad) > 0 && !f.skipBad {
		return opts, configErr(&dispatcher.BadInputError{Errs: c.Bad})
	}
	if err := f.preflightAndBudget(ctx, wf); err != nil {
		return opts, err
	}
	c.Apply(&opts)
	f.checked = c
	return opts, nil
}

// newJob reports whether the job of f is not there yet: --job names one
// the server does not have, or the id is derived from the input (a job
// dispatched before from the same input is found by the dispatch itself).
func (f *runFlags) newJob(ctx context.Context, b *broker.Broker) bool {
	if f.job == "" {
		return true
	}
	_, _, err := b.GetJob(ctx, f.job)
	return errors.Is(err, broker.ErrJobNotFound)
}

func (f *runFlags) preflightAndBudget(ctx context.Context, wf *workflow.Workflow) error {
	if !f.noPreflight {
		if err := preflight(ctx, wf); err != nil {
			return configErr(err)
		}
	}
	if err := f.budget(wf); err != nil { // cost.go: after the job id, which the flag leaves as it is
		return configErr(err)
	}
	return nil
}

// inputError makes a dispatch's refusal of its input or workflow (a bad
// line, an id used twice, a reference no record answers) a configuration
// error (exit 2), as prepare makes those it finds.
func inputError(err error) error {
	if re := (*dispatcher.RefusedError)(nil); errors.As(err, &re) {
		return configErr(err)
	}
	return err
}

// workAndReport runs a pool and the catcher on the job until it is done,
// then writes results and the summary. Used by run, and by retry on the
// embedded server.
//
// wf is the workflow file the command was given (nil for retry), which the
// pool trusts (runTrust). A pool that cannot serve the job (a key missing
// under --no-preflight, say) ends the command with why: the job stays
// queued for this command run again, or for workers that can.
func workAndReport(ctx context.Context, e *env, b *broker.Broker, jobID string, concurrency int, output string, progress bool, start time.Time,
	wf *workflow.Workflow) error {
	if concurrency <= 0 {
		concurrency = e.cfg.Concurrency
	}
	trusted := []*workflow.Workflow{wf}
	if wf == nil && b.Embedded() {
		// retry on the embedded store works a job this machine's user
		// dispatched from their own workflow files: it trusts them as run
		// did, every revision (revise.go).
		trusted = jobWorkflows(ctx, b, jobID)
	}
	trust, err := runTrust(trusted...)
	if err != nil {
		return err
	}
	wctx, unserved := context.WithCancelCause(ctx)
	defer unserved(nil)
	pool := worker.New(b, worker.Config{Concurrency: concurrency, Log: e.log, Jobs: []string{jobID}, Trust: trust,
		OnUnservable: func(job string, why error) { unserved(&unservableError{job: job, why: why}) }})
	if err := pool.Start(ctx); err != nil {
		return err
	}
	catcher := &deadletter.Catcher{B: b, Log: e.log}
	if err := catcher.Start(ctx); err != nil {
		return err
	}
	job, waitErr := waitJob(wctx, e, b, jobID, progress)
	profile.WriteHeap(os.Getenv("JETPOOL_MEMPROFILE")) // the job's end: what the embedded server keeps of it
	if waitErr == nil {
		pool.JobDone(jobID) // nothing left to pull: the stop need not wait for the idle pull
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := pool.Stop(stopCtx); err != nil {
		e.log.Warn().Err(err).Msg("worker pool stop")
	}
	catcher.Stop()
	if waitErr != nil {
		var ue *unservableError
		if errors.As(context.Cause(wctx), &ue) {
			return configErr(ue)
		}
		if ctx.Err() != nil {
			return &exitError{code: exitInterrupt, err: fmt.Errorf("interrupted: in-flight calls were finished or handed back; run the same command again to resume job %s", jobID)}
		}
		return waitErr
	}
	jsonl := output
	if export.FormatOf(output) != export.JSONL {
		jsonl = "" // written below, in its own format
	}
	sum, err := summarize(ctx, b, job, jsonl)
	if err != nil {
		return err
	}
	if output != jsonl {
		if err := writeResults(ctx, b, job, output); err != nil {
			return err
		}
	}
	sum.providers = limiterLines(pool.Limits())
	sum.print(e, time.Since(start), pool.Calls())
	if output != "" {
		fmt.Fprintf(e.stderr, "results: %s\n", output)
	}
	if err := stoppedErr(job); err != nil {
		return err
	}
	if sum.failed > 0 {
		return &errFailedRecords{job: job.ID, failed: sum.failed}
	}
	return nil
}

// unservableError ends run when its own pool cannot serve the job.
type unservableError struct {
	job string
	why error
}

func (e *unservableError) Error() string {
	return fmt.Sprintf("this process cannot work job %s: %v (its records stay queued: run the same command again once that is fixed, or let a `jetpool worker` that can serve the job work them)", e.job, e.why)
}

// waitJob waits until every record of the job has a final result (or the job
// failed and nothing is left in flight), with a progress bar on a terminal.
func waitJob(ctx context.Context, e *env, b *broker.Broker, jobID string, progress bool) (*broker.Job, error) {
	bar := newProgress(e, progress)
	defer bar.finish()
	var update func(*broker.Job, broker.Progress)
	if bar.bar != nil {
		update = func(j *broker.Job, st broker.Progress) {
			bar.actions(ctx, b, j)
			bar.update(st.Done, j.Total, st)
		}
	}
	return jobstatus.Wait(ctx, b, jobID, 200*time.Millisecond, update, e.log)
}

// preflight checks each provider the workflow uses once, before anything
// is published: each action's model and each of its fallbacks'.
func preflight(ctx context.Context, wf *workflow.Workflow) error {
	seen := map[string]bool{}
	var errs []string
	check := func(a *workflow.Action, prov, model string) {
		key := fmt.Sprint(prov, "\x00", model, "\x00", a.IsEmbed())
		if seen[key] {
			return
		}
		seen[key] = true
		for _, cfg := range wf.Providers[prov].Endpoints() { // each deployment
			pr, err := provider.New(cfg)
			if err != nil {
				errs = append(errs, fmt.Sprintf("provider %s: %v", cfg.Name, err))
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err = provider.PreflightModel(pctx, pr, model, a.IsEmbed())
			cancel()
			if err != nil {
				errs = append(errs, fmt.Sprintf("provider %s (model %s, action %s): %v", cfg.Name, model, a.Name, err))
			}
		}
	}
	for _, a := range wf.Actions {
		check(a, a.Provider, a.Model)
		for _, f := range a.Fallbacks {
			check(a, f.Provider, f.Model)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("preflight failed, nothing was published (--no-preflight skips this check):\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}
