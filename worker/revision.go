package worker

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"sync"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// revisions are the later revisions of a job's workflow (broker.Job.Revisions),
// decoded on first use: a record runs under the revision its work message
// names (broker.HeaderRevision), so a revision added while records are in
// flight does not switch them mid-way.
type revisions struct {
	mu  sync.Mutex
	wfs map[int]*workflow.Workflow
	// keys are the adapter keys of the providers of later revisions, by
	// "rev/name" (providerAt).
	keys map[string]string
}

// workflowAt returns the workflow of revision rev of the job (jr.wf for
// revision 1). A revision the job entry the runner holds does not have yet
// (the watch is behind `jetpool retry`, which adds it before it publishes)
// is read from the jobs bucket.
func (jr *jobRunner) workflowAt(rev int) (*workflow.Workflow, error) {
	if rev <= 1 {
		return jr.wf, nil
	}
	jr.revs.mu.Lock()
	wf, ok := jr.revs.wfs[rev]
	jr.revs.mu.Unlock()
	if ok {
		return wf, nil
	}
	// Not under revs.mu: jr.mu is taken before it elsewhere (limiter).
	raw, ok := jr.current().WorkflowOf(rev)
	if !ok {
		j, err := jr.readJob(context.Background())
		if err != nil {
			return nil, fmt.Errorf("revision %d of the workflow: %w", rev, err)
		}
		if raw, ok = j.WorkflowOf(rev); !ok {
			return nil, fmt.Errorf("the job has no revision %d of its workflow (it has %d)", rev, j.Revision())
		}
	}
	wf, err := workflow.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("revision %d of the workflow: %w", rev, err)
	}
	if why := jr.refusals(wf, rev); len(why) > 0 { // worker/serve.go
		// Not called, not dead-lettered: another worker may serve it
		// (worker/serve.go).
		return nil, &unservableError{why: revisionWhy(rev, why)}
	}
	jr.revs.mu.Lock()
	defer jr.revs.mu.Unlock()
	if first, ok := jr.revs.wfs[rev]; ok {
		return first, nil // decoded meanwhile by another delivery
	}
	if jr.revs.wfs == nil {
		jr.revs.wfs = map[int]*workflow.Workflow{}
	}
	jr.revs.wfs[rev] = wf
	return wf, nil
}

// providerConfig is the configuration of the provider (or deployment)
// called name in the job's first workflow or, for one a later revision
// brought, in that one.
func (jr *jobRunner) providerConfig(name string) (provider.Config, bool) {
	if cfg, ok := jr.wf.Providers[name]; ok {
		return cfg, true
	}
	if cfg, ok := deploymentConfig(jr.wf, name); ok {
		return cfg, true
	}
	jr.revs.mu.Lock()
	defer jr.revs.mu.Unlock()
	for _, rev := range slices.Sorted(maps.Keys(jr.revs.wfs)) {
		wf := jr.revs.wfs[rev]
		if cfg, ok := wf.Providers[name]; ok {
			return cfg, true
		}
		if cfg, ok := deploymentConfig(wf, name); ok {
			return cfg, true
		}
	}
	return provider.Config{}, false
}

// deploymentConfig is the configuration of the deployment called name of
// one of wf's providers.
func deploymentConfig(wf *workflow.Workflow, name string) (provider.Config, bool) {
	for _, cfg := range wf.Providers {
		if len(cfg.Deployments) == 0 {
			continue
		}
		for _, d := range cfg.Endpoints() {
			if d.Name == name {
				return d, true
			}
		}
	}
	return provider.Config{}, false
}

// providerAt is the adapter of the provider called name as revision rev of
// the job's workflow defines it: a revision may move a provider's endpoint,
// change its timeout or headers, and its records call it so.
func (jr *jobRunner) providerAt(rev int, name string) (provider.Provider, error) {
	if rev <= 1 {
		return jr.provider(name)
	}
	cfg, key, err := jr.configAt(rev, name)
	if err != nil {
		return nil, err
	}
	if key == name {
		return jr.provider(name)
	}
	return jr.providerAs(key, cfg)
}

// configAt is the configuration of the provider called name as revision
// rev of the job's workflow defines it, and the key its adapter is kept
// under: the provider's name while the revision defines it as the first
// workflow does (or not at all), name@rev where the revision changed it.
// A provider's deployments are the revision's too (worker/deployments.go).
func (jr *jobRunner) configAt(rev int, name string) (provider.Config, string, error) {
	if rev <= 1 {
		cfg, _ := jr.providerConfig(name)
		return cfg, name, nil
	}
	wf, err := jr.workflowAt(rev)
	if err != nil {
		return provider.Config{}, "", err
	}
	cfg, defined := wf.Providers[name]
	if !defined {
		cfg, _ := jr.providerConfig(name)
		return cfg, name, nil
	}
	k := strconv.Itoa(rev) + "/" + name
	jr.revs.mu.Lock()
	key, ok := jr.revs.keys[k]
	jr.revs.mu.Unlock()
	if !ok {
		key = name
		if first, ok := jr.wf.Providers[name]; !ok || !reflect.DeepEqual(first, cfg) {
			key = name + "@" + strconv.Itoa(rev)
		}
		jr.revs.mu.Lock()
		if jr.revs.keys == nil {
			jr.revs.keys = map[string]string{}
		}
		jr.revs.keys[k] = key
		jr.revs.mu.Unlock()
	}
	return cfg, key, nil
}

// revisionOf is the revision a work message names (1 when none).
func revisionOf(h interface{ Get(string) string }) int {
	return max(headerInt(h.Get(broker.HeaderRevision)), 1)
}

// headerInt is a header's number, 0 when it is absent (as it is on nearly
// every message: strconv.Atoi("") makes an error, and that error's
// allocations showed in the worker's profile) or not a number.
func headerInt(s string) int {
	if s == "" {
		return 0
	}
	n, _ := strconv.Atoi(s)
	return n
}
