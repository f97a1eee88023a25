package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/workflow"
)

// currentWorkflow decodes the workflow of the job's current revision.
func currentWorkflow(j *broker.Job) (*workflow.Workflow, error) {
	raw, _ := j.WorkflowOf(j.Revision())
	return workflow.Decode(raw)
}

// sameDefinition reports whether two workflows run the same way.
func sameDefinition(a, b *workflow.Workflow) (bool, error) {
	da, err := a.Definition()
	if err != nil {
		return false, err
	}
	db, err := b.Definition()
	if err != nil {
		return false, err
	}
	return bytes.Equal(da, db), nil
}

// sameActions refuses a revision that changes the job's list of actions:
// results, counts and dead letters are kept by action name, and a record
// replayed at an action goes on to the next one by position.
func sameActions(j *broker.Job, wf *workflow.Workflow, path string) error {
	names := make([]string, len(wf.Actions))
	for i, a := range wf.Actions {
		names[i] = a.Name
	}
	if slices.Equal(names, j.Actions) {
		return nil
	}
	return fmt.Errorf("%s has actions %s, job %s has %s: a revision may change every action's definition, not the list of actions; for another pipeline, start a new job (jetpool run %s --input FILE, without --job)",
		path, strings.Join(names, ", "), j.ID, strings.Join(j.Actions, ", "), path)
}

// reviseForRetry makes the workflow at path the current revision of the
// job whose dead letters f matches (retry --workflow), unless it is that
// already, and narrows f to that job. Its references are checked against
// the records being replayed, and its providers' credentials (unless
// noPreflight) before it is added. dry changes nothing.
func reviseForRetry(ctx context.Context, e *env, b *broker.Broker, f *deadletter.Filter, path string, dry, noPreflight bool) error {
	wf, err := loadWorkflow(path) // run.go: parsed, and no key a process must never send
	if err != nil {
		return err
	}
	jobs := map[string]bool{}
	fields := map[string]bool{}
	err = deadletter.Each(ctx, b, *f, func(en *deadletter.Entry) error {
		jobs[en.Job] = true
		if env, err := en.Envelope(); err == nil {
			rec, err := env.Fields(nil)
			if err == nil {
				for k := range rec {
					fields[k] = true
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch {
	case len(jobs) == 0:
		return nil // Replay says no dead letter matches
	case len(jobs) > 1:
		names := make([]string, 0, len(jobs))
		for j := range jobs {
			names = append(names, j)
		}
		sort.Strings(names)
		return usageErr("--workflow: dead letters of %d jobs match (%s); pick one with --job", len(jobs), strings.Join(names, ", "))
	}
	for id := range jobs {
		f.Job = id
	}
	j, _, err := b.GetJob(ctx, f.Job)
	if err != nil {
		return err
	}
	if err := sameActions(j, wf, path); err != nil {
		return configErr(err)
	}
	if len(fields) == 0 {
		fields = nil // no record to tell: only what the workflow itself says
	}
	if err := wf.CheckRefs(fields); err != nil {
		return configErr(err)
	}
	cur, err := currentWorkflow(j)
	if err != nil {
		return err
	}
	same, err := sameDefinition(cur, wf)
	if err != nil {
		return err
	}
	if same {
		if err := workable(b, j, nil); err != nil { // retry_check.go
			return err
		}
		fmt.Fprintf(e.stderr, "job %s: %s is its current workflow (revision %d): replaying under it\n", j.ID, path, j.Revision())
		return nil
	}
	if err := workable(b, j, wf); err != nil { // retry_check.go: before the revision, before any dead letter
		return err
	}
	if dry {
		fmt.Fprintf(e.stderr, "job %s: %s would become revision %d of its workflow\n", j.ID, path, j.Revision()+1)
		return nil
	}
	if !noPreflight {
		if err := preflight(ctx, wf); err != nil {
			return configErr(err)
		}
	}
	enc, err := wf.Encode()
	if err != nil {
		return err
	}
	if j, err = b.AddRevision(ctx, j.ID, enc, path); err != nil {
		return err
	}
	if err := dispatcher.IndexJob(ctx, b, wf, j.ID); err != nil {
		// Only a run of an edited input finds jobs by the index.
		e.log.Warn().Str("job", j.ID).Err(err).Msg("revision not indexed")
	}
	fmt.Fprintf(e.stderr, "job %s: revision %d of its workflow is %s; its failed records are replayed under it: "+
		"the actions that failed and those after them run the new definition, the actions that succeeded keep their results\n",
		j.ID, j.Revision(), path)
	return nil
}

// checkRunJob is what `run WORKFLOW --job OLD` does with a job that exists:
// a workflow that differs from the job's current revision is refused with
// the command to use (never silently run the old one); an input that
// differs from the one last dispatched is refreshed (refresh: the job, to
// pass to Dispatcher.Refresh). Nil job: dispatch as usual.
func checkRunJob(ctx context.Context, b *broker.Broker, wf *workflow.Workflow, f *runFlags, path string) (refresh *broker.Job, err error) {
	if f.job == "" {
		return nil, nil // the job id is derived from the workflow and the input
	}
	j, _, err := b.GetJob(ctx, f.job)
	if errors.Is(err, broker.ErrJobNotFound) {
		return nil, nil
	}
	if err != nil || !j.Dispatched {
		return nil, err
	}
	cur, err := currentWorkflow(j)
	if err != nil {
		return nil, err
	}
	same, err := dispatcher.SameDefinition(cur, wf) // a budget is not part of a job's identity
	if err != nil {
		return nil, err
	}
	if !same {
		return nil, configErr(fmt.Errorf("job %s runs revision %d of its workflow, and %s differs from it: nothing was published\n"+
			"  to replay its failed records under %s (a new revision; what succeeded is kept): jetpool retry --job %s --workflow %s\n"+
			"  to run every record under it: jetpool run %s --input %s --new-job",
			j.ID, j.Revision(), path, path, j.ID, path, path, f.input))
	}
	if j.InputHash == "" || f.checked == nil || j.InputHash == f.checked.ContentHash {
		// The same input: a resume. (A job dispatched before jobs kept
		// their input's hash cannot tell: resumed, as it always was.)
		return nil, nil
	}
	return j, nil
}
