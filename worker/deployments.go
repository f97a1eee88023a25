package worker

import (
	"strconv"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/workflow"
)

// A provider's deployments (provider.Deployment) are where its calls go:
// each has its own limiter (its own limits, learned rate, cooldown and
// circuit, shared across workers in the limiter's KV state, shown by
// `jetpool limits` and the metrics with its provider). Each call goes to a
// deployment with room for it now (ratelimit.Room: not resting, not
// failing, its schedule not booked ahead, a place in its window), by
// smooth weighted round robin among those that have: weighted by the rate
// each is paced at (a learned pace lowers a deployment's share), by rpm
// when some are not paced, alike without. When none has room, the call
// goes to the one free soonest, and its limiter paces it. Chat and
// embeddings calls spread so; batch actions submit each batch to one
// deployment picked so (batchDeployment; package batch keeps it).

// spread is the round robin of one provider's deployments, as one
// revision of the job's workflow defines them.
type spread struct {
	names   []string // the deployments' names: their limiters'
	keys    []string // their adapters' keys (jobRunner.providers)
	cfgs    []provider.Config
	rpm     []float64 // the static weights: rpm, or 1 each
	current []float64
	// ahead is, for a paced deployment, when the calls picked for it here
	// are due at its rate: picks made at once (a window of records
	// answered together) see the same room before any of them books its
	// slot in the limiter, and would all go to the one that had room for
	// the first.
	ahead []time.Time
}

// newSpread is the round of cfg's deployments; suffix, when set, keys
// their adapters apart from another revision's ("@2").
func newSpread(cfg provider.Config, suffix string) *spread {
	eps := cfg.Endpoints()
	s := &spread{cfgs: eps, rpm: make([]float64, len(eps)), current: make([]float64, len(eps)), ahead: make([]time.Time, len(eps))}
	byRPM := false
	for _, e := range eps {
		byRPM = byRPM || e.Limits.RPM > 0
	}
	for i, e := range eps {
		s.names = append(s.names, e.Name)
		s.keys = append(s.keys, e.Name+suffix)
		s.rpm[i] = 1
		if byRPM {
			s.rpm[i] = float64(max(e.Limits.RPM, 1))
		}
	}
	return s
}

// pickedAheadMax bounds how far the spread's own picks run past what a
// deployment's limiter shows: a pick that did not book its slot by then was
// parked (its wait was too long) or never called.
const pickedAheadMax = time.Second

// choose picks the deployment of a call at now from each one's room, the
// picks made here before counted in (ahead).
func (s *spread) choose(rooms []ratelimit.Room, avoid int, now time.Time) int {
	for i := range rooms {
		limit := now.Add(rooms[i].Wait + pickedAheadMax)
		if s.ahead[i].After(limit) {
			s.ahead[i] = limit
		}
		rooms[i].Wait = max(rooms[i].Wait, s.ahead[i].Sub(now))
	}
	i := s.pick(rooms, avoid)
	if r := rooms[i].Rate; r > 0 {
		s.ahead[i] = later(s.ahead[i], now).Add(time.Duration(float64(time.Second) / r))
	}
	return i
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// pick chooses the deployment of the next call from each one's room now;
// avoid is one not to pick while another may be (-1: none). First those
// with room for it at once; else the one whose schedule frees soonest;
// else (every window full) those not resting nor failing; else those not
// resting; else any, and its limiter waits. A paced deployment's full
// window does not count: the calls in it wait for its schedule, whose wait
// says more.
func (s *spread) pick(rooms []ratelimit.Room, avoid int) int {
	open := func(i int) bool {
		r := rooms[i]
		return !r.Resting && !r.Failing && i != avoid && (!r.Full || r.Rate > 0)
	}
	soonest := time.Duration(-1)
	for i := range rooms {
		if open(i) && (soonest < 0 || rooms[i].Wait < soonest) {
			soonest = rooms[i].Wait
		}
	}
	tiers := []func(i int) bool{
		func(i int) bool { return open(i) && rooms[i].Wait == soonest },
		func(i int) bool { return !rooms[i].Resting && !rooms[i].Failing && i != avoid },
		func(i int) bool { return !rooms[i].Resting && i != avoid },
		func(i int) bool { return !rooms[i].Resting },
		func(int) bool { return true },
	}
	for _, ok := range tiers {
		if i := s.next(rooms, ok); i >= 0 {
			return i
		}
	}
	return 0
}

// next is the weighted round among the deployments ok accepts: the one
// furthest ahead, -1 when ok accepts none. The weights are their rates
// when every one of them is paced, else their rpm.
func (s *spread) next(rooms []ratelimit.Room, ok func(i int) bool) int {
	byRate := true
	for i := range s.names {
		if ok(i) && rooms[i].Rate <= 0 {
			byRate = false
		}
	}
	best, total := -1, 0.0
	for i := range s.names {
		if !ok(i) {
			continue
		}
		w := s.rpm[i]
		if byRate {
			w = 60 * rooms[i].Rate // a minute's, as rpm weighs
		}
		s.current[i] += w
		total += w
		if best < 0 || s.current[i] > s.current[best] {
			best = i
		}
	}
	if best >= 0 {
		s.current[best] -= total
	}
	return best
}

// spreadAt is the round of the deployments of the provider called name as
// revision rev of the job's workflow defines it; nil for a provider
// without deployments.
func (jr *jobRunner) spreadAt(rev int, name string) (*spread, error) {
	cfg, key, err := jr.configAt(rev, name) // worker/revision.go
	if err != nil || len(cfg.Deployments) == 0 {
		return nil, err
	}
	jr.mu.Lock()
	defer jr.mu.Unlock()
	s := jr.spreads[key]
	if s == nil {
		suffix := ""
		if key != name {
			suffix = "@" + strconv.Itoa(rev)
		}
		s = newSpread(cfg, suffix)
		if jr.spreads == nil {
			jr.spreads = map[string]*spread{}
		}
		jr.spreads[key] = s
	}
	return s, nil
}

// deployment picks the deployment of the provider called name (as revision
// rev defines it) that the next call goes to, with its adapter; ok is
// false for a provider without deployments. avoid is the deployment of the
// record's call before ("" for none): another is picked while one does not
// rest, so that a retry does not go back to the deployment that just
// failed it (the round robin is the job's, and other records' calls come
// between a record's).
func (jr *jobRunner) deployment(name, avoid string, rev int) (dep string, pr provider.Provider, ok bool, err error) {
	s, i, err := jr.pickDeployment(name, avoid, rev)
	if s == nil || err != nil {
		return "", nil, false, err
	}
	pr, err = jr.providerAs(s.keys[i], s.cfgs[i])
	return s.names[i], pr, true, err
}

// pickDeployment is deployment's pick: the spread and the index in it
// (nil for a provider without deployments).
func (jr *jobRunner) pickDeployment(name, avoid string, rev int) (*spread, int, error) {
	s, err := jr.spreadAt(rev, name)
	if s == nil || err != nil {
		return nil, 0, err
	}
	// Limiters first, outside jr.mu (limiter takes it).
	rooms := make([]ratelimit.Room, len(s.names))
	av := -1
	for i, n := range s.names {
		if l := jr.limiter(n); l != nil {
			rooms[i] = l.Room()
		}
		if n == avoid {
			av = i
		}
	}
	now := jr.p.cfg.Clock.Now()
	jr.mu.Lock()
	i := s.choose(rooms, av, now)
	jr.mu.Unlock()
	return s, i, nil
}

// batchDeployment is the deployment of a's provider that a new batch goes
// to (batch.Config.Deployment): the one an online call would go to now,
// by the same room. "" for a provider without deployments.
func (jr *jobRunner) batchDeployment(a *workflow.Action) string {
	s, i, err := jr.pickDeployment(a.Provider, "", 1) // the batcher runs the job's first workflow
	if s == nil || err != nil {
		return ""
	}
	return s.names[i]
}

// deploymentNames are the names of the deployments of the provider called
// name as revision rev defines it, or name alone for one without.
func (jr *jobRunner) deploymentNames(rev int, name string) []string {
	if s, err := jr.spreadAt(rev, name); err == nil && s != nil {
		return s.names
	}
	return []string{name}
}
