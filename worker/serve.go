package worker

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// A worker serves only the jobs it can run (docs/design.md §9). Before it takes
// a job's records it checks the job's workflow: a format this jetpool
// reads, and for every provider a key and endpoint its operator allows
// (provider.Trust) and the key itself. A job it cannot serve it never pulls
// from, so no attempt is spent and nothing is dead-lettered: other workers
// carry it. It says why once in its log, and for as long as the job runs in
// its stats (`jetpool status`) and /readyz. The check runs again whenever
// the job's entry or state changes; a worker whose environment was fixed
// is restarted.

// serveState is the jobs this pool refused, with why.
type serveState struct {
	mu      sync.Mutex
	refused map[string]string // job → why
}

// set records why job is refused; it reports whether that is news.
func (s *serveState) set(job, why string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refused == nil {
		s.refused = map[string]string{}
	}
	if s.refused[job] == why {
		return false
	}
	s.refused[job] = why
	return true
}

func (s *serveState) clear(job string) {
	s.mu.Lock()
	delete(s.refused, job)
	s.mu.Unlock()
}

func (s *serveState) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.refused) == 0 {
		return nil
	}
	return maps.Clone(s.refused)
}

// Unservable returns the running jobs this pool will not serve, with why
// (nil when there are none).
func (p *Pool) Unservable() map[string]string { return p.serve.snapshot() }

// servable decodes j's workflow and checks that this worker can run it.
// The error says every reason, "; "-separated.
func (p *Pool) servable(j *broker.Job) (*workflow.Workflow, error) {
	return servable(p.cfg.Trust, j)
}

// Servable returns nil when a worker whose operator's policy is trust can
// serve job j: it reads the format of every revision of j's workflow, and
// for every provider of each, trust allows its key and endpoint and its
// key is there. Otherwise the error says every reason. `jetpool retry
// --workflow` asks it of the job with its new revision before it consumes
// any dead letter, with the policy of the pool that will work them.
func Servable(trust *provider.Trust, j *broker.Job) error {
	_, err := servable(trust, j)
	return err
}

// servable is Servable, returning the first revision's workflow (the
// job runner's) when j can be served.
//
// Every revision's keys and endpoints are checked, not the current one's
// alone: records in flight when a revision was added run on under the one
// they started with, and a revision that moves a provider's endpoint moves
// its calls (jobRunner.providerAt), so a worker that serves the job may
// send a key to any of them. The keys themselves must be there for the
// current revision, where replays go; an earlier revision's key that is
// gone fails only its stragglers, as auth errors, which a replay redoes.
// A revision the watch had not shown the pool yet is checked when its first
// record comes (workflowAt).
func servable(trust *provider.Trust, j *broker.Job) (*workflow.Workflow, error) {
	wf, err := workflow.Decode(j.Workflow)
	if err != nil {
		return nil, err
	}
	last := j.Revision()
	why := refusals(trust, wf, last == 1)
	seen := map[string]bool{}
	for _, w := range why {
		seen[w] = true
	}
	for rev := 2; rev <= last; rev++ {
		raw, _ := j.WorkflowOf(rev)
		rw, err := workflow.Decode(raw)
		if err != nil {
			why = append(why, fmt.Sprintf("revision %d of the workflow: %v", rev, err))
			continue
		}
		for _, w := range refusals(trust, rw, rev == last) {
			if !seen[w] { // a provider the revision left as it was: said once
				seen[w] = true
				why = append(why, fmt.Sprintf("revision %d: %s", rev, w))
			}
		}
	}
	if len(why) > 0 {
		return nil, &unservableError{why: strings.Join(why, "; ")}
	}
	return wf, nil
}

// refusals is why a worker under trust cannot run wf's providers, one
// reason a provider; none when it can. keys: each provider's key must be
// there too.
func refusals(trust *provider.Trust, wf *workflow.Workflow, keys bool) []string {
	var why []string
	for _, name := range slices.Sorted(maps.Keys(wf.Providers)) {
		cfg := wf.Providers[name]
		if err := trust.Check(cfg); err != nil {
			why = append(why, err.Error())
			continue
		}
		if !keys || cfg.Kind == provider.KindSim {
			continue // the sim's key is optional: without it its auth faults stay faults
		}
		for _, c := range cfg.Endpoints() { // every deployment's key
			if _, err := c.APIKey(); err != nil {
				why = append(why, err.Error())
			}
		}
	}
	return why
}

// refusals is why this pool cannot run revision rev of jr's job.
func (jr *jobRunner) refusals(wf *workflow.Workflow, rev int) []string {
	return refusals(jr.p.cfg.Trust, wf, rev >= jr.current().Revision())
}

// revisionWhy names revision rev in why.
func revisionWhy(rev int, why []string) string {
	return fmt.Sprintf("revision %d: %s", rev, strings.Join(why, fmt.Sprintf("; revision %d: ", rev)))
}

// recheck is onJob's check of a job the pool serves whose entry changed
// (called with p.mu held): a revision added since may not be servable
// here. Such a job is no longer served (its records in flight finish);
// it reports whether it stopped serving it.
func (p *Pool) recheck(jr *jobRunner, j *broker.Job) bool {
	if j.Revision() == jr.current().Revision() {
		return false
	}
	if _, err := p.servable(j); err != nil {
		p.refuseServed(jr, j, err)
		return true
	}
	return false
}

// refuseServed stops serving a job this pool finds it cannot serve after
// all (called with p.mu held), saying why as admit does.
func (p *Pool) refuseServed(jr *jobRunner, j *broker.Job, err error) {
	if p.jobs[jr.id] != jr {
		return // already
	}
	delete(p.jobs, jr.id)
	p.retire(jr)
	if p.serve.set(j.ID, err.Error()) {
		p.log.Warn().Str("job", j.ID).Str("worker", p.id).Str("why", err.Error()).
			Msg("cannot serve this job any more: not taking its records (other workers may)")
		if p.cfg.OnUnservable != nil {
			p.cfg.OnUnservable(j.ID, err)
		}
	}
}

// cannotServe lets go of a record of a revision this pool cannot serve
// (workflowAt found it first): handed back at once, for a worker that can,
// and the job no longer served here.
func (jr *jobRunner) cannotServe(msg jetstream.Msg, err error) {
	p := jr.p
	p.beats.release(msg)
	_ = msg.Nak()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuseServed(jr, jr.current(), err)
}

type unservableError struct{ why string }

func (e *unservableError) Error() string { return e.why }

// admit is onJob's check (called with p.mu held): j's workflow when this
// worker can serve j; else nil, once it has recorded why and, the first
// time for that reason, logged it and told Config.OnUnservable. A job that
// has ended is dropped from the list unreported.
func (p *Pool) admit(j *broker.Job) *workflow.Workflow {
	wf, err := p.servable(j)
	if err == nil {
		p.serve.clear(j.ID)
		return wf
	}
	if j.Ended() {
		p.serve.clear(j.ID)
		return nil
	}
	if p.serve.set(j.ID, err.Error()) {
		p.log.Warn().Str("job", j.ID).Str("worker", p.id).Str("why", err.Error()).
			Msg("cannot serve this job: not taking its records (other workers may)")
		if p.cfg.OnUnservable != nil {
			p.cfg.OnUnservable(j.ID, err)
		}
	}
	return nil
}
