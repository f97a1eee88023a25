package worker

import (
	"github.com/jetpool/jetpool/provider"
)

// A provider's deployments (provider.Deployment) are where its calls go:
// each has its own limiter (its own limits, learned rate, cooldown and
// circuit, shared across workers in the limiter's KV state, shown by
// `jetpool limits` and the metrics under the deployment's name). Calls are
// spread across them by smooth weighted round robin, weighted by each
// one's rpm (alike without), passing over a resting one (open circuit,
// cooldown) while another is not: the limiter of the one picked then
// paces the call.

// spread is the round robin of one provider's deployments.
type spread struct {
	names   []string
	cfgs    []provider.Config
	weights []int
	current []int
}

func newSpread(cfg provider.Config) *spread {
	eps := cfg.Endpoints()
	s := &spread{cfgs: eps, weights: make([]int, len(eps)), current: make([]int, len(eps))}
	byRPM := false
	for _, e := range eps {
		byRPM = byRPM || e.Limits.RPM > 0
	}
	for i, e := range eps {
		s.names = append(s.names, e.Name)
		s.weights[i] = 1
		if byRPM {
			s.weights[i] = max(e.Limits.RPM, 1)
		}
	}
	return s
}

// next picks a deployment among those ok accepts (all of them when it
// accepts none): the one furthest ahead in the weighted round.
func (s *spread) next(ok func(i int) bool) int {
	any := false
	for i := range s.names {
		any = any || ok(i)
	}
	best, total := -1, 0
	for i, w := range s.weights {
		if any && !ok(i) {
			continue
		}
		s.current[i] += w
		total += w
		if best < 0 || s.current[i] > s.current[best] {
			best = i
		}
	}
	s.current[best] -= total
	return best
}

// deployment picks the deployment of the provider called name that the
// next call goes to, with its adapter; ok is false for a provider without
// deployments. avoid is the deployment of the record's call before (""
// for none): another is picked while one does not rest, so that a retry
// does not go back to the deployment that just failed it (the round robin
// is the job's, and other records' calls come between a record's).
func (jr *jobRunner) deployment(name, avoid string) (dep string, pr provider.Provider, ok bool, err error) {
	cfg, found := jr.providerConfig(name)
	if !found || len(cfg.Deployments) == 0 {
		return "", nil, false, nil
	}
	jr.mu.Lock()
	s := jr.spreads[name]
	if s == nil {
		s = newSpread(cfg)
		if jr.spreads == nil {
			jr.spreads = map[string]*spread{}
		}
		jr.spreads[name] = s
	}
	jr.mu.Unlock()
	// Limiters first, outside jr.mu (limiter takes it).
	resting := make([]bool, len(s.names))
	for i, n := range s.names {
		if l := jr.limiter(n); l != nil {
			resting[i] = l.Resting()
		}
	}
	other := func(i int) bool { return !resting[i] && s.names[i] != avoid }
	some := false
	for i := range s.names {
		some = some || other(i)
	}
	if !some {
		other = func(i int) bool { return !resting[i] }
	}
	jr.mu.Lock()
	i := s.next(other)
	jr.mu.Unlock()
	pr, err = jr.providerAs(s.names[i], s.cfgs[i])
	return s.names[i], pr, true, err
}
