package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strings"

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
// input goes to (docs/decisions.md, "An edited input runs under its job"):
//
//   - the job its id derives from (the same workflow file and input, or
//     that input last refreshed into another job): as --job;
//   - else the one job whose current workflow is this one and that has
//     records of the input (dispatcher.Matching): as --job, so that only
//     the new and changed records are paid for, and said so;
//   - several such jobs: refused, with the command for each and for a new
//     job (which of them holds the results the user means is theirs to say);
//   - none, or --new-job: a new job, as before.
//
// It sets f.job to the job chosen; the --job path does the rest
// (checkRunJob, dispatcher.Refresh).
func (f *runFlags) matchJob(ctx context.Context, e *env, b *broker.Broker, wf *workflow.Workflow, path, cmd string) error {
	if f.fresh && f.job != "" {
		return usageErr("--new-job and --job: pick one")
	}
	if f.job != "" {
		return nil
	}
	opts := dispatcher.Options{Input: f.input, Format: f.format, IDField: f.idField}
	if f.fresh {
		return f.freshJob(ctx, e, b, wf, opts)
	}
	key, err := dispatcher.DefinitionKey(wf)
	if err != nil {
		return err
	}
	ids, err := b.IndexedJobs(ctx, key)
	if err != nil {
		// An index this process may not read (an older deployment's
		// permissions): the dispatch goes on as it did before the index.
		fmt.Fprintf(e.stderr, "warning: could not look for a job that runs this workflow (%v): a new job; --job ID runs an edited input under an earlier one\n", err)
		return nil
	}
	if len(ids) == 0 {
		return nil // no job runs this workflow: nothing to read the input for
	}
	derived, err := dispatcher.DerivedJobID(wf, opts)
	if err != nil {
		return configErr(err)
	}
	if j, _, err := b.GetJob(ctx, derived); err == nil {
		if cur, err := currentWorkflow(j); err == nil {
			if same, _ := dispatcher.SameDefinition(cur, wf); same {
				// This very input and workflow ran before: a resume, or, if
				// the job's input was refreshed since, a refresh back.
				f.job = derived
			}
		}
		return nil
	} else if !errors.Is(err, broker.ErrJobNotFound) {
		return err
	}
	ms, err := dispatcher.Matching(ctx, b, wf, opts)
	if err != nil {
		return err
	}
	switch len(ms) {
	case 0:
		return nil
	case 1:
		m := ms[0]
		f.job, f.matched = m.Job.ID, true
		fmt.Fprintf(e.stderr, "job %s (created %s) runs this workflow and %s: running only the new and changed records "+
			"under it (--new-job starts a new job, which pays for every record)\n",
			m.Job.ID, m.Job.Created.Local().Format("2006-01-02 15:04"), match{m}.has(f.input))
		return nil
	}
	var b2 strings.Builder
	fmt.Fprintf(&b2, "%d jobs run %s and have records of %s: nothing was published; say which:\n", len(ms), path, f.input)
	for _, m := range ms {
		fmt.Fprintf(&b2, "  %s (created %s, %d records; %s):  jetpool %s %s --input %s --job %s\n",
			m.Job.ID, m.Job.Created.Local().Format("2006-01-02 15:04"), m.Job.Total, match{m}.has(f.input), cmd, path, f.input, m.Job.ID)
	}
	fmt.Fprintf(&b2, "  a new job, every record paid for again:  jetpool %s %s --input %s --new-job", cmd, path, f.input)
	return configErr(errors.New(b2.String()))
}

// refresh runs an input fix into job old (dispatcher.Refresh) and says what
// it did. A job with records queued or in flight cannot take one: the
// error says what to do instead.
func (f *runFlags) refresh(ctx context.Context, e *env, b *broker.Broker, wf *workflow.Workflow, opts dispatcher.Options, old *broker.Job, path, cmd string) error {
	d := &dispatcher.Dispatcher{B: b, Log: e.log}
	r, err := d.Refresh(ctx, wf, old, opts)
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
	if err := dispatcher.IndexJob(ctx, b, wf, old.ID); err != nil {
		// A job of a jetpool before the index: found by the next edit once
		// indexed here.
		e.log.Warn().Str("job", old.ID).Err(err).Msg("job not indexed")
	}
	if wf.MaxCost > 0 && wf.MaxCost != old.MaxCost {
		// The workflow's (or --max-cost's) budget, as a dispatch applies it.
		if _, err := setMaxCost(ctx, b, old.ID, wf.MaxCost); err != nil {
			return err
		}
	}
	return nil
}

// freshJob is --new-job: the job id derived from the workflow and the
// input, or, when that job exists, the same with a random suffix: a new
// job, every record run again.
func (f *runFlags) freshJob(ctx context.Context, e *env, b *broker.Broker, wf *workflow.Workflow, opts dispatcher.Options) error {
	derived, err := dispatcher.DerivedJobID(wf, opts)
	if err != nil {
		return configErr(err)
	}
	_, _, err = b.GetJob(ctx, derived)
	if errors.Is(err, broker.ErrJobNotFound) {
		return nil // the derived id is new already
	}
	if err != nil {
		return err
	}
	var r [3]byte
	_, _ = rand.Read(r[:])
	f.job = derived + "-" + hex.EncodeToString(r[:])
	fmt.Fprintf(e.stderr, "--new-job: job %s ran this workflow and input before; this is a new job, %s (resume it with --job %s)\n",
		derived, f.job, f.job)
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
