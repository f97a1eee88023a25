package main

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// On its own store `jetpool retry` works what it replays, with a pool of
// its own: a replay that pool would refuse (a key it may not send where a
// revision sends it, a key that is not set, a JETPOOL_ variable) used to be
// found only after the dead letters were consumed, leaving the records
// queued for a worker that might never come. So the job is checked as the
// pool will check it, new revision included, before anything is consumed.

// workable returns nil when this process can work job j's replayed
// records, with next as the job's new revision (nil: none); otherwise the
// configuration error that says why, with nothing changed. Workers
// elsewhere (an external server) own their policy: nothing is checked
// for them here.
func workable(b *broker.Broker, j *broker.Job, next *workflow.Workflow) error {
	if !b.Embedded() {
		return nil
	}
	wfs := revisionsOf(j) // one that does not decode is Servable's to say
	job := *j
	if next != nil {
		enc, err := next.Encode()
		if err != nil {
			return err
		}
		job.Revisions = append(slices.Clone(j.Revisions), broker.Revision{Workflow: enc, File: next.File})
		wfs = append(wfs, next)
	}
	trust, err := runTrust(wfs...) // the pool's (run.go workAndReport)
	if err != nil {
		return err
	}
	if err := worker.Servable(trust, &job); err != nil {
		what := "its replayed records"
		if next != nil {
			what = fmt.Sprintf("its replayed records under %s (its revision %d)", next.File, job.Revision())
		}
		return configErr(fmt.Errorf("job %s: this process could not work %s: %v; nothing was replayed, every dead letter is kept",
			j.ID, what, err))
	}
	return nil
}

// workableAll is workable for every job with a dead letter f matches.
func workableAll(ctx context.Context, b *broker.Broker, f deadletter.Filter) error {
	if !b.Embedded() {
		return nil
	}
	jobs := map[string]bool{}
	if err := deadletter.Each(ctx, b, f, func(en *deadletter.Entry) error {
		jobs[en.Job] = true
		return nil
	}); err != nil {
		return err
	}
	ids := make([]string, 0, len(jobs))
	for id := range jobs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		j, _, err := b.GetJob(ctx, id)
		if err != nil {
			continue // a dead letter of a job deleted since: Replay says so
		}
		if err := workable(b, j, nil); err != nil {
			return err
		}
	}
	return nil
}

// jobWorkflows is every revision of the job's workflow that decodes; none
// when the job cannot be read (the pool then says why it cannot serve it).
func jobWorkflows(ctx context.Context, b *broker.Broker, jobID string) []*workflow.Workflow {
	j, _, err := b.GetJob(ctx, jobID)
	if err != nil {
		return nil
	}
	return revisionsOf(j)
}

// revisionsOf is every revision of j's workflow that decodes.
func revisionsOf(j *broker.Job) []*workflow.Workflow {
	var wfs []*workflow.Workflow
	for rev := 1; rev <= j.Revision(); rev++ {
		raw, _ := j.WorkflowOf(rev)
		if wf, err := workflow.Decode(raw); err == nil {
			wfs = append(wfs, wf)
		}
	}
	return wfs
}
