package worker

import (
	"maps"
	"slices"
	"strings"
	"sync"

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
	wf, err := workflow.Decode(j.Workflow)
	if err != nil {
		return nil, err
	}
	var why []string
	for _, name := range slices.Sorted(maps.Keys(wf.Providers)) {
		cfg := wf.Providers[name]
		if err := p.cfg.Trust.Check(cfg); err != nil {
			why = append(why, err.Error())
			continue
		}
		if cfg.Kind == provider.KindSim {
			continue // the sim's key is optional: without it its auth faults stay faults
		}
		if _, err := cfg.APIKey(); err != nil {
			why = append(why, err.Error())
		}
	}
	if len(why) > 0 {
		return nil, &unservableError{why: strings.Join(why, "; ")}
	}
	return wf, nil
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
	if j.Status == broker.JobCompleted || j.Status == broker.JobFailed {
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
