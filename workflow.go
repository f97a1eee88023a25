package jetpool

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// LoadWorkflow loads and validates a workflow file, and checks that no
// provider would send a key the process must never send (a JETPOOL_
// variable) before anything calls it. Its failures are ErrInvalid.
func LoadWorkflow(path string) (*workflow.Workflow, error) {
	wf, err := workflow.Load(path)
	if err != nil {
		return nil, invalid(err)
	}
	trust, err := Trust(wf)
	if err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(wf.Providers)) {
		if err := trust.Check(wf.Providers[name]); err != nil {
			return nil, invalid(err)
		}
	}
	return wf, nil
}

// Trust is the policy of a process that works the workflows it was given
// (Run, and the revisions of a job on its own store): the operator's
// (provider.LoadTrust: JETPOOL_KEY_HOSTS, JETPOOL_KEYLESS_HOSTS) plus
// exactly the keys and endpoints those workflows name, because they are the
// user's own workflows on the user's own machine; never a JETPOOL_
// variable. No (or nil) workflow: the operator's alone.
func Trust(wfs ...*workflow.Workflow) (*provider.Trust, error) {
	trust, err := provider.LoadTrust(os.LookupEnv)
	if err != nil {
		return nil, invalid(err)
	}
	for _, wf := range wfs {
		if wf != nil {
			trust = trust.Allowing(wf.Providers)
		}
	}
	return trust, nil
}

// Preflight checks each provider and model the workflow uses once (its
// credentials, that the model answers), before anything is published: each
// action's model and each of its fallbacks', on each deployment of the
// provider. A failure is ErrInvalid and names every provider that failed.
func Preflight(ctx context.Context, wf *workflow.Workflow) error {
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
		return invalid(fmt.Errorf("preflight failed, nothing was published (--no-preflight skips this check):\n  %s", strings.Join(errs, "\n  ")))
	}
	return nil
}

// CurrentWorkflow decodes the workflow of the job's current revision.
func CurrentWorkflow(j *broker.Job) (*workflow.Workflow, error) {
	raw, _ := j.WorkflowOf(j.Revision())
	return workflow.Decode(raw)
}

// Revisions is every revision of j's workflow that decodes, oldest first.
func Revisions(j *broker.Job) []*workflow.Workflow {
	var wfs []*workflow.Workflow
	for rev := 1; rev <= j.Revision(); rev++ {
		raw, _ := j.WorkflowOf(rev)
		if wf, err := workflow.Decode(raw); err == nil {
			wfs = append(wfs, wf)
		}
	}
	return wfs
}

// jobWorkflows is every revision of the job's workflow that decodes; none
// when the job cannot be read (the pool then says why it cannot serve it).
func (c *Client) jobWorkflows(ctx context.Context, jobID string) []*workflow.Workflow {
	j, _, err := c.b.GetJob(ctx, jobID)
	if err != nil {
		return nil
	}
	return Revisions(j)
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
