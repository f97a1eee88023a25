// Package worker runs a pool of bounded concurrency that pulls records from
// the jobs' durable consumers, runs each action's session (the session-level
// retry), and acks, naks with delay (the exec-level retry) or dead-letters.
package worker

import (
	"encoding/json"
	"slices"

	"github.com/nats-io/nats.go"
)

// Stats is what a worker answers on jetpool.ctl.stats.
type Stats struct {
	Worker   string           `json:"worker"`
	InFlight map[string]int64 `json:"in_flight"` // by job
	// Storing is the records called whose results are being stored
	// (their slots handed on; the committer acks them), by job.
	Storing map[string]int64 `json:"storing,omitempty"`
	// ReadAhead is the records pulled beyond the free slots, not started
	// yet (worker/ahead.go), by job.
	ReadAhead map[string]int64 `json:"read_ahead,omitempty"`
	Calls     int64            `json:"calls"`
	Handled   int64            `json:"handled"`
	// Held is the records whose writes the store refused, held and tried
	// again; Faults says which writes fail and why.
	Held int `json:"held,omitempty"`
	// Elections is the leader elections of the work stream or its
	// consumers this worker heard of that could deliver a record twice
	// (worker/faults.go elected).
	Elections int64          `json:"elections,omitempty"`
	Faults    []StorageFault `json:"storage_faults,omitempty"`
	// Unservable is the running jobs this worker will not serve, with why
	// (worker/serve.go).
	Unservable map[string]string `json:"unservable,omitempty"`
	// Calling is the jobs this worker serves and may start calls for: a
	// job it has seen cancelled or paused is not listed (worker/steer.go).
	Calling []string `json:"calling,omitempty"`
	// Paused is the jobs this worker serves and sees paused (worker/pause.go).
	Paused []string `json:"paused,omitempty"`
	// Holding is the deliveries this worker holds, by job: in a slot,
	// resting off it between retries, or being stored. A paused job's
	// records are handed back as they reach their next call: none is
	// held once they all have.
	Holding map[string]int64 `json:"holding,omitempty"`
	// Only is the jobs this worker is limited to (Config.Jobs: `run`,
	// `retry` and the dashboard work one job each); empty, it serves every
	// running job it can.
	Only []string `json:"only,omitempty"`
}

// Serves reports whether the worker that answered s serves job: it is not
// limited to other jobs and has not refused this one.
func (s *Stats) Serves(job string) bool {
	if len(s.Only) > 0 && !slices.Contains(s.Only, job) {
		return false
	}
	_, refused := s.Unservable[job]
	return !refused
}

// Snapshot returns the pool's stats.
func (p *Pool) Snapshot() Stats {
	s := Stats{Worker: p.id, InFlight: map[string]int64{}, Calls: p.calls.Load(), Handled: p.handled.Load(),
		Storing: map[string]int64{}, ReadAhead: p.ahead.counts(), Held: p.done.heldCount(), Elections: p.elections.Load(), Faults: p.done.faults.list(),
		Unservable: p.serve.snapshot(), Holding: map[string]int64{}, Only: p.cfg.Jobs}
	p.mu.Lock()
	for id, jr := range p.jobs {
		if n := jr.inFlight.Load(); n > 0 {
			s.InFlight[id] = n
		}
		if n := jr.storing.Load(); n > 0 {
			s.Storing[id] = n
		}
		if !jr.quiet.Load() || !jr.stopped() {
			s.Calling = append(s.Calling, id)
		}
		if n := jr.held.size(); n > 0 {
			s.Holding[id] = int64(n)
		}
		if jr.pausedNow() {
			s.Paused = append(s.Paused, id)
		}
	}
	p.mu.Unlock()
	return s
}

func (p *Pool) answerStats(m *nats.Msg) {
	data, _ := json.Marshal(p.Snapshot())
	_ = m.Respond(data)
}

// Faults is the kinds of write the store refuses now (none: empty).
func (p *Pool) Faults() []StorageFault { return p.done.faults.list() }
