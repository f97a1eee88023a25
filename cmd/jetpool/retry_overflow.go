package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
)

// warnOverflow warns, before a replay without --workflow (and in a dry run
// too), of the dead letters it would send again after a context overflow
// under a workflow that would fail them the same way: the job's current
// revision gives their action no overflow: block and calls the model that
// overflowed. Each would be a call paid to learn it again.
func warnOverflow(ctx context.Context, e *env, b *broker.Broker, f deadletter.Filter) error {
	if f.Reason != "" && f.Reason != string(retry.ReasonContextOverflow) ||
		f.Class != "" && f.Class != string(retry.ClassContextOverflow) {
		return nil
	}
	type key struct{ job, action, model string }
	counts := map[key]int{}
	err := deadletter.Each(ctx, b, f, func(en *deadletter.Entry) error {
		if en.Reason == retry.ReasonContextOverflow {
			counts[key{en.Job, en.Action, en.Model}]++
		}
		return nil
	})
	if err != nil || len(counts) == 0 {
		return err
	}
	jobs := map[string]*broker.Job{}
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.action, b.action), cmp.Compare(a.model, b.model))
	}) {
		j, ok := jobs[k.job]
		if !ok {
			if j, _, err = b.GetJob(ctx, k.job); err != nil {
				return err
			}
			jobs[k.job] = j
		}
		wf, err := currentWorkflow(j)
		if err != nil {
			return err
		}
		a, _ := wf.Action(k.action)
		if a == nil || a.Overflow != nil || k.model != "" && k.model != a.Model {
			continue // the revision they replay under answers an overflow, or calls another model
		}
		fmt.Fprintf(e.stderr, "warning: %s of job %s, action %s, failed with context_overflow: the prompt is longer than model %s's context window. "+
			"Replayed under the job's workflow as it is, they will fail the same way, each a call paid again. "+
			"Give the action an overflow: block (truncate: FIELD to shorten, or fallback_model: a larger model; docs/workflow.md) "+
			"and replay them under it: jetpool retry --job %s --reason context_overflow --workflow FIXED.yaml\n",
			plural(int64(counts[k]), "dead letter"), k.job, k.action, cmp.Or(a.Model, "(default)"), k.job)
	}
	return nil
}
