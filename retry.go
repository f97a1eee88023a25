package jetpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// RetryParams select the dead letters Retry replays and how.
type RetryParams struct {
	// Filter selects the dead letters (job, action, reason, class, age,
	// limit); its zero value is every dead letter.
	Filter deadletter.Filter
	// Workflow, when set, replays them under a new revision of their
	// job's workflow (same actions, any definitions): the actions that
	// failed and those after them run it; those that succeeded keep their
	// results and are not paid again. Every matching dead letter must be
	// of one job.
	Workflow *workflow.Workflow
	// DryRun changes nothing: Retry says what it would do.
	DryRun bool
	// Mode "online" runs replayed batch-mode records online.
	Mode string
	// MaxCost, above 0, raises the job's budget first (Filter.Job required).
	MaxCost float64
	// NoPreflight skips the providers' credential check of Workflow.
	NoPreflight bool
	// Each, when set, is told about every dead letter as it is handled
	// (deadletter.ReplayOptions.Each).
	Each func(e *deadletter.Entry, replayed bool, why string)
}

// RetryResult is what Retry did (or, DryRun, would do).
type RetryResult struct {
	*deadletter.ReplayResult
	// Revision is what became of Workflow, when one was given.
	Revision *Revision
	// Warnings are dead letters the replay sends again to fail the same
	// way (a context overflow under a workflow with no overflow: block).
	Warnings []OverflowWarning
	// Unfinished are earlier replays, found not finished, whose jobs are
	// in Jobs too.
	Unfinished []deadletter.UnfinishedReplay
	// Unserved are the jobs of Jobs that no live worker serves, on a
	// store this process does not host (Unserved): nobody runs their
	// replayed records until Work (`jetpool retry` works them) or a
	// worker does. Empty on an embedded store, whose caller works them.
	Unserved []string
}

// Retry replays dead letters into the work stream as a new replay
// generation, after the checks `jetpool retry` makes: a Workflow becomes
// the job's next revision (Revise); without one, it warns of context
// overflows that would fail again (OverflowWarnings); on an embedded store
// it checks that this process could work them (Workable), so that a
// refusal (ErrInvalid) comes before anything changed. The records are
// then worked by whoever serves their jobs: Work or Wait on each of
// RetryResult.Jobs; on a store another process hosts, Work on those of
// RetryResult.Unserved, which no live worker serves.
func (c *Client) Retry(ctx context.Context, p RetryParams) (*RetryResult, error) {
	if err := p.Filter.Check(); err != nil {
		return nil, invalid(err)
	}
	if p.MaxCost > 0 && !p.DryRun {
		if p.Filter.Job == "" {
			return nil, invalid(errors.New("MaxCost sets one job's budget: set Filter.Job"))
		}
		wf := p.Workflow
		if wf == nil {
			if j, _, err := c.b.GetJob(ctx, p.Filter.Job); err == nil {
				wf, _ = CurrentWorkflow(j)
			}
		}
		if _, err := c.RaiseBudget(ctx, p.Filter.Job, p.MaxCost, wf); err != nil {
			return nil, err
		}
	}
	res := &RetryResult{}
	if p.Workflow != nil {
		rev, err := c.Revise(ctx, &p.Filter, p.Workflow, ReviseParams{DryRun: p.DryRun, NoPreflight: p.NoPreflight})
		if err != nil {
			return nil, err
		}
		res.Revision = rev
	} else {
		ws, err := c.OverflowWarnings(ctx, p.Filter)
		if err != nil {
			return nil, err
		}
		res.Warnings = ws
		if err := c.WorkableAll(ctx, p.Filter); err != nil {
			return nil, err
		}
	}
	rr, unfinished, err := c.Replay(ctx, deadletter.ReplayOptions{Filter: p.Filter, DryRun: p.DryRun, Mode: p.Mode, Each: p.Each})
	if err != nil {
		return nil, err
	}
	res.ReplayResult, res.Unfinished = rr, unfinished
	if !c.b.Embedded() && !p.DryRun && len(rr.Jobs) > 0 {
		if res.Unserved, err = c.Unserved(ctx, slices.Sorted(maps.Keys(rr.Jobs))); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Replay republishes the dead letters o selects (deadletter.Replay), and
// adds to the result's Jobs those with a replay an earlier retry left
// unfinished (killed after it republished: its records are in the work
// stream, none in the DLQ), which it returns too.
func (c *Client) Replay(ctx context.Context, o deadletter.ReplayOptions) (*deadletter.ReplayResult, []deadletter.UnfinishedReplay, error) {
	res, err := deadletter.Replay(ctx, c.b, o)
	if err != nil {
		return nil, nil, err
	}
	all, err := deadletter.Unfinished(ctx, c.b, o.Job)
	if err != nil {
		return nil, nil, err
	}
	var unfinished []deadletter.UnfinishedReplay
	for _, u := range all {
		if res.Jobs[u.Job] {
			continue
		}
		unfinished = append(unfinished, u)
		res.Jobs[u.Job] = true
	}
	return res, unfinished, nil
}

// ReviseParams steer Revise.
type ReviseParams struct {
	DryRun      bool   // change nothing
	NoPreflight bool   // skip the providers' credential check
	Path        string // the workflow's file as messages name it ("": its File)
}

// Revision is what Revise did with a job's workflow.
type Revision struct {
	Job *broker.Job
	// Number is the revision the replay runs under; New says it was added
	// now (or would be, DryRun); not New, the workflow was the job's
	// current one already.
	Number int
	New    bool
	Path   string
}

// Revise makes wf the current revision of the job whose dead letters f
// matches (RetryParams.Workflow), unless it is that already, and narrows f
// to that job. Its references are checked against the records being
// replayed, and its providers' credentials (unless NoPreflight) before it
// is added. A nil Revision: no dead letter matches.
func (c *Client) Revise(ctx context.Context, f *deadletter.Filter, wf *workflow.Workflow, p ReviseParams) (*Revision, error) {
	path := cmp.Or(p.Path, wf.File)
	jobs := map[string]bool{}
	fields := map[string]bool{}
	err := deadletter.Each(ctx, c.b, *f, func(en *deadletter.Entry) error {
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
		return nil, err
	}
	switch {
	case len(jobs) == 0:
		return nil, nil // Replay says no dead letter matches
	case len(jobs) > 1:
		names := slices.Sorted(maps.Keys(jobs))
		return nil, invalid(fmt.Errorf("--workflow: dead letters of %d jobs match (%s); pick one with --job", len(jobs), strings.Join(names, ", ")))
	}
	for id := range jobs {
		f.Job = id
	}
	j, _, err := c.b.GetJob(ctx, f.Job)
	if err != nil {
		return nil, err
	}
	if err := sameActions(j, wf, path); err != nil {
		return nil, invalid(err)
	}
	if len(fields) == 0 {
		fields = nil // no record to tell: only what the workflow itself says
	}
	if err := wf.CheckRefs(fields); err != nil {
		return nil, invalid(err)
	}
	cur, err := CurrentWorkflow(j)
	if err != nil {
		return nil, err
	}
	same, err := sameDefinition(cur, wf)
	if err != nil {
		return nil, err
	}
	if same {
		if err := c.Workable(j, nil); err != nil {
			return nil, err
		}
		return &Revision{Job: j, Number: j.Revision(), Path: path}, nil
	}
	if err := c.Workable(j, wf); err != nil { // before the revision, before any dead letter
		return nil, err
	}
	if p.DryRun {
		return &Revision{Job: j, Number: j.Revision() + 1, New: true, Path: path}, nil
	}
	if !p.NoPreflight {
		if err := Preflight(ctx, wf); err != nil {
			return nil, err
		}
	}
	enc, err := wf.Encode()
	if err != nil {
		return nil, err
	}
	if j, err = c.b.AddRevision(ctx, j.ID, enc, path); err != nil {
		return nil, err
	}
	if err := dispatcher.IndexJob(ctx, c.b, wf, j.ID); err != nil {
		// Only a run of an edited input finds jobs by the index.
		c.log.Warn().Str("job", j.ID).Err(err).Msg("revision not indexed")
	}
	return &Revision{Job: j, Number: j.Revision(), New: true, Path: path}, nil
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

// OverflowWarning is a group of dead letters a replay would send again
// after a context overflow under a workflow that fails them the same way:
// the job's current revision gives their action no overflow: block and
// calls the model that overflowed. Each would be a call paid to learn it
// again.
type OverflowWarning struct {
	Job, Action, Model string
	DeadLetters        int
}

func (w OverflowWarning) String() string {
	n := fmt.Sprintf("%d dead letters", w.DeadLetters)
	if w.DeadLetters == 1 {
		n = "1 dead letter"
	}
	return fmt.Sprintf("%s of job %s, action %s, failed with context_overflow: the prompt is longer than model %s's context window. "+
		"Replayed under the job's workflow as it is, they will fail the same way, each a call paid again. "+
		"Give the action an overflow: block (truncate: FIELD to shorten, or fallback_model: a larger model; docs/workflow.md) "+
		"and replay them under it: jetpool retry --job %s --reason context_overflow --workflow FIXED.yaml",
		n, w.Job, w.Action, w.Model, w.Job)
}

// OverflowWarnings are the warnings of a replay of f's dead letters
// without a new revision (a dry run too), by job, action and model.
func (c *Client) OverflowWarnings(ctx context.Context, f deadletter.Filter) ([]OverflowWarning, error) {
	if f.Reason != "" && f.Reason != string(retry.ReasonContextOverflow) ||
		f.Class != "" && f.Class != string(retry.ClassContextOverflow) {
		return nil, nil
	}
	type key struct{ job, action, model string }
	counts := map[key]int{}
	err := deadletter.Each(ctx, c.b, f, func(en *deadletter.Entry) error {
		if en.Reason == retry.ReasonContextOverflow {
			counts[key{en.Job, en.Action, en.Model}]++
		}
		return nil
	})
	if err != nil || len(counts) == 0 {
		return nil, err
	}
	var out []OverflowWarning
	jobs := map[string]*broker.Job{}
	for _, k := range slices.SortedFunc(maps.Keys(counts), func(a, b key) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.action, b.action), cmp.Compare(a.model, b.model))
	}) {
		j, ok := jobs[k.job]
		if !ok {
			if j, _, err = c.b.GetJob(ctx, k.job); err != nil {
				return out, err
			}
			jobs[k.job] = j
		}
		wf, err := CurrentWorkflow(j)
		if err != nil {
			return out, err
		}
		a, _ := wf.Action(k.action)
		if a == nil || a.Overflow != nil || k.model != "" && k.model != a.Model {
			continue // the revision they replay under answers an overflow, or calls another model
		}
		out = append(out, OverflowWarning{Job: k.job, Action: k.action, Model: cmp.Or(a.Model, "(default)"), DeadLetters: counts[k]})
	}
	return out, nil
}

// Workable returns nil when this process can work job j's replayed
// records, with next as the job's new revision (nil: none); otherwise the
// error (ErrInvalid) that says why, with nothing changed. On its own store
// a retry works what it replays with a pool of its own: a replay that pool
// would refuse (a key it may not send where a revision sends it, a key
// that is not set, a JETPOOL_ variable) used to be found only after the
// dead letters were consumed, leaving the records queued for a worker that
// might never come. Workers elsewhere (an external server) own their
// policy: nothing is checked for them here.
func (c *Client) Workable(j *broker.Job, next *workflow.Workflow) error {
	if !c.b.Embedded() {
		return nil
	}
	wfs := Revisions(j) // one that does not decode is Servable's to say
	job := *j
	if next != nil {
		enc, err := next.Encode()
		if err != nil {
			return err
		}
		job.Revisions = append(slices.Clone(j.Revisions), broker.Revision{Workflow: enc, File: next.File})
		wfs = append(wfs, next)
	}
	trust, err := Trust(wfs...) // the pool's (Work)
	if err != nil {
		return err
	}
	if err := worker.Servable(trust, &job); err != nil {
		what := "its replayed records"
		if next != nil {
			what = fmt.Sprintf("its replayed records under %s (its revision %d)", next.File, job.Revision())
		}
		return invalid(fmt.Errorf("job %s: this process could not work %s: %v; nothing was replayed, every dead letter is kept",
			j.ID, what, err))
	}
	return nil
}

// WorkableAll is Workable for every job with a dead letter f matches.
func (c *Client) WorkableAll(ctx context.Context, f deadletter.Filter) error {
	if !c.b.Embedded() {
		return nil
	}
	jobs := map[string]bool{}
	if err := deadletter.Each(ctx, c.b, f, func(en *deadletter.Entry) error {
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
		j, _, err := c.b.GetJob(ctx, id)
		if err != nil {
			continue // a dead letter of a job deleted since: Replay says so
		}
		if err := c.Workable(j, nil); err != nil {
			return err
		}
	}
	return nil
}
