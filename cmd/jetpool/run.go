package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

type runFlags struct {
	input, output, job, idField, format string
	concurrency                         int
	skipBad, noProgress, noPreflight    bool
}

func cmdRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "WORKFLOW --input FILE [--output FILE] [flags]",
		"Dispatch a job, work it, wait until every record has a final result, write the results and print a summary.\n"+
			"Running the same command again does not re-run records that already succeeded.")
	var f runFlags
	fs.StringVar(&f.input, "input", "", "input records: JSONL (one object per line) or CSV with a header row")
	fs.StringVar(&f.output, "output", "", "write results JSONL here (default: none; see 'jetpool results')")
	fs.StringVar(&f.job, "job", "", "job id (default: derived from the workflow and the input, so a rerun resumes)")
	fs.StringVar(&f.idField, "id-field", "", "record field holding the record id (default: \"id\" when a record has it, else a stable hash of the record)")
	fs.StringVar(&f.format, "format", "", "input format: jsonl or csv (default: from the file extension)")
	fs.IntVar(&f.concurrency, "concurrency", 0, "concurrent model calls (default $JETPOOL_CONCURRENCY or 64)")
	fs.BoolVar(&f.skipBad, "skip-bad", false, "dead-letter malformed input lines (reason bad_input) instead of refusing the file")
	fs.BoolVar(&f.noProgress, "no-progress", false, "no progress bar")
	fs.BoolVar(&f.noPreflight, "no-preflight", false, "skip the providers' credential check")
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
	wf, opts, err := f.prepare(ctx, pos[0])
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	tuneGC(b)

	start := time.Now()
	d := &dispatcher.Dispatcher{B: b, Log: e.log}
	res, err := d.Dispatch(ctx, wf, opts)
	if err != nil {
		var bie *dispatcher.BadInputError
		var le *dispatcher.LineError
		if errors.As(err, &bie) || errors.As(err, &le) {
			return configErr(err)
		}
		return err
	}
	job := res.Job
	if res.Existing {
		fmt.Fprintf(e.stderr, "job %s was dispatched before: resuming it (records that succeeded are not run again)\n", job.ID)
	} else {
		fmt.Fprintf(e.stderr, "job %s: %s dispatched", job.ID, plural(res.Published, "record"))
		if res.Duplicates > 0 {
			fmt.Fprintf(e.stderr, " (%d already published)", res.Duplicates)
		}
		if res.BadLines > 0 {
			fmt.Fprintf(e.stderr, ", %d bad lines dead-lettered", res.BadLines)
		}
		fmt.Fprintln(e.stderr)
	}
	return workAndReport(ctx, e, b, job.ID, f.concurrency, f.output, !f.noProgress, start)
}

// prepare does everything run and dispatch do before they publish: load
// and validate the workflow, read the whole input (refusing bad lines unless
// --skip-bad), and check the providers' credentials. Every failure is a
// usage/configuration error (exit 2) and nothing has been published.
func (f *runFlags) prepare(ctx context.Context, path string) (*workflow.Workflow, dispatcher.Options, error) {
	opts := dispatcher.Options{Input: f.input, Format: f.format, IDField: f.idField, JobID: f.job, SkipBad: f.skipBad}
	wf, err := workflow.Load(path)
	if err != nil {
		return nil, opts, configErr(err)
	}
	jobID, _, bad, err := dispatcher.Check(wf, opts)
	if err != nil {
		return nil, opts, configErr(err)
	}
	if len(bad) > 0 && !f.skipBad {
		return nil, opts, configErr(&dispatcher.BadInputError{Errs: bad})
	}
	if !f.noPreflight {
		if err := preflight(ctx, wf); err != nil {
			return nil, opts, configErr(err)
		}
	}
	opts.JobID, opts.Checked = jobID, true
	return wf, opts, nil
}

// workAndReport runs a pool and the catcher on the job until it is done,
// then writes results and the summary. Used by run, and by retry on the
// embedded server.
func workAndReport(ctx context.Context, e *env, b *broker.Broker, jobID string, concurrency int, output string, progress bool, start time.Time) error {
	if concurrency <= 0 {
		concurrency = e.cfg.Concurrency
	}
	pool := worker.New(b, worker.Config{Concurrency: concurrency, Log: e.log, Jobs: []string{jobID}})
	if err := pool.Start(ctx); err != nil {
		return err
	}
	catcher := &deadletter.Catcher{B: b, Log: e.log}
	if err := catcher.Start(ctx); err != nil {
		return err
	}
	job, waitErr := waitJob(ctx, e, b, jobID, progress)
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
		if ctx.Err() != nil {
			return &exitError{code: exitInterrupt, err: fmt.Errorf("interrupted: in-flight calls were finished or handed back; run the same command again to resume job %s", jobID)}
		}
		return waitErr
	}
	sum, err := summarize(ctx, b, job, output)
	if err != nil {
		return err
	}
	sum.providers = limiterLines(pool.Limits())
	sum.print(e, time.Since(start), pool.Calls())
	if output != "" {
		fmt.Fprintf(e.stderr, "results: %s\n", output)
	}
	if job.Status == broker.JobFailed {
		return &exitError{code: exitJobFailed, err: fmt.Errorf("job %s failed: %s", job.ID, job.Reason)}
	}
	return nil
}

// waitJob waits until every record of the job has a final result (or the job
// failed and nothing is left in flight).
func waitJob(ctx context.Context, e *env, b *broker.Broker, jobID string, progress bool) (*broker.Job, error) {
	return waitJobEvery(ctx, e, b, jobID, progress, 200*time.Millisecond)
}

// waitJobEvery is waitJob polling at the given interval (the bench polls
// often so that its timings are not rounded up to a UI tick).
func waitJobEvery(ctx context.Context, e *env, b *broker.Broker, jobID string, progress bool, every time.Duration) (*broker.Job, error) {
	bar := newProgress(e, progress)
	defer bar.finish()
	tick := time.NewTicker(every)
	defer tick.Stop()
	var counted time.Time
	var counts broker.Counts
	for {
		job, _, err := b.GetJob(ctx, jobID)
		if err != nil {
			return nil, err
		}
		// The backlog is one cheap request; result counts are computed by
		// the server over every result subject, so they are read only when
		// the backlog is drained (to decide) or every 2s (for the bar).
		st, err := b.Backlog(ctx, jobID)
		if err != nil {
			return nil, err
		}
		if st.Drained() || (bar.bar != nil && time.Since(counted) > 2*time.Second) {
			if counts, err = b.JobCounts(ctx, job, false); err != nil {
				return nil, err
			}
			counted = time.Now()
		}
		st.Counts = counts
		bar.update(st.Done, job.Total, st)
		if st.Drained() && st.Finished(job) {
			if job.Status != broker.JobFailed && job.Status != broker.JobCompleted {
				job, _ = b.UpdateJob(ctx, jobID, func(j *broker.Job) bool {
					if j.Status == broker.JobFailed || j.Status == broker.JobCompleted {
						return false
					}
					j.Status = broker.JobCompleted
					return true
				})
			}
			return job, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// preflight checks each provider the workflow uses once, before anything is published.
func preflight(ctx context.Context, wf *workflow.Workflow) error {
	seen := map[string]bool{}
	var errs []string
	for _, a := range wf.Actions {
		key := a.Provider + "\x00" + a.Model
		if seen[key] {
			continue
		}
		seen[key] = true
		cfg := wf.Providers[a.Provider]
		pr, err := provider.New(cfg)
		if err != nil {
			errs = append(errs, fmt.Sprintf("provider %s: %v", a.Provider, err))
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = pr.Preflight(pctx, a.Model)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Sprintf("provider %s (model %s, action %s): %v", a.Provider, a.Model, a.Name, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("preflight failed, nothing was published (--no-preflight skips this check):\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}
