package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/workflow"
)

// newJobFlag adds --new-job, shared by run and dispatch.
func (f *runFlags) newJobFlag(fs *flag.FlagSet) {
	fs.BoolVar(&f.fresh, "new-job", false,
		"start a new job even when a job runs this workflow and has records of the input (default: run only the\n"+
			"new and changed records under that job)")
}

// matchJob decides, for a run or dispatch given no --job, which job the
// input goes to (jp.Client.MatchJob, FreshJobID with --new-job), sets
// f.job to it and says so. Several jobs that could take it are refused,
// with the command for each and for a new job.
func (f *runFlags) matchJob(ctx context.Context, e *env, c *jp.Client, wf *workflow.Workflow, path, cmd string) error {
	if f.fresh && f.job != "" {
		return usageErr("--new-job and --job: pick one")
	}
	if f.job != "" {
		return nil
	}
	opts := dispatcher.Options{Input: f.input, Format: f.format, IDField: f.idField}
	if f.fresh {
		id, derived, err := c.FreshJobID(ctx, wf, opts)
		if err != nil || id == "" {
			return err
		}
		f.job = id
		fmt.Fprintf(e.stderr, "--new-job: job %s ran this workflow and input before; this is a new job, %s (resume it with --job %s)\n",
			derived, f.job, f.job)
		return nil
	}
	m, err := c.MatchJob(ctx, wf, opts)
	var amb *jp.AmbiguousJobError
	switch {
	case errors.As(err, &amb):
		return configErr(errors.New(ambiguous(amb.Matches, f.input, path, cmd)))
	case err != nil:
		return err
	case m.IndexErr != nil:
		// An index this process may not read (an older deployment's
		// permissions): the dispatch goes on as it did before the index.
		fmt.Fprintf(e.stderr, "warning: could not look for a job that runs this workflow (%v): a new job; --job ID runs an edited input under an earlier one\n", m.IndexErr)
		return nil
	}
	f.job = m.ID
	if m.Match != nil {
		f.matched = true
		fmt.Fprintf(e.stderr, "job %s (created %s) runs this workflow and %s: running only the new and changed records "+
			"under it (--new-job starts a new job, which pays for every record)\n",
			m.ID, m.Match.Job.Created.Local().Format("2006-01-02 15:04"), match{*m.Match}.has(f.input))
	}
	return nil
}

// ambiguous is the refusal of an input several jobs could take.
func ambiguous(ms []dispatcher.Match, input, path, cmd string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d jobs run %s and have records of %s: nothing was published; say which:\n", len(ms), path, input)
	for _, m := range ms {
		fmt.Fprintf(&b, "  %s (created %s, %d records; %s):  jetpool %s %s --input %s --job %s\n",
			m.Job.ID, m.Job.Created.Local().Format("2006-01-02 15:04"), m.Job.Total, match{m}.has(input), cmd, path, input, m.Job.ID)
	}
	fmt.Fprintf(&b, "  a new job, every record paid for again:  jetpool %s %s --input %s --new-job", cmd, path, input)
	return b.String()
}

// refresh runs an input fix into job old (jp.Client.Refresh) and says
// what it did. A job with records queued or in flight cannot take one: the
// error says what to do instead.
func (f *runFlags) refresh(ctx context.Context, e *env, c *jp.Client, wf *workflow.Workflow, opts dispatcher.Options, old *broker.Job, path, cmd string) error {
	r, err := c.Refresh(ctx, wf, old, opts)
	if err != nil {
		if f.matched {
			return fmt.Errorf("%w\n  or start a new job, every record paid for again: jetpool %s %s --input %s --new-job", err, cmd, path, f.input)
		}
		return err
	}
	fmt.Fprintf(e.stderr, "job %s: the input changed: %d new and %d changed records dispatched, %d unchanged kept",
		old.ID, r.New, r.Changed, r.Unchanged)
	if r.Fixed > 0 {
		fmt.Fprintf(e.stderr, ", %d bad lines of the earlier input gone", r.Fixed)
	}
	if r.BadLines > 0 {
		fmt.Fprintf(e.stderr, ", %d new bad lines dead-lettered", r.BadLines)
	}
	if r.Missing > 0 {
		fmt.Fprintf(e.stderr, "; %s of the job not in %s keep their results", plural(r.Missing, "record"), f.input)
	}
	fmt.Fprintln(e.stderr)
	return nil
}

// match says what a matching job has of the input.
type match struct{ dispatcher.Match }

func (m match) has(input string) string {
	if m.Shared == 0 {
		return "is still at work on " + input
	}
	return fmt.Sprintf("already has records of %s (%d of the %d sampled)", input, m.Shared, m.Sampled)
}
