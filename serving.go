package jetpool

import (
	"context"
	"fmt"
	"slices"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/worker"
)

// Serving is the live workers that serve job: those that answered on
// jetpool.ctl.stats, are not limited to other jobs (`run`, a `retry`
// working its own replay) and have not refused it (worker.Stats.Serves).
// None answering is no error. It waits longer for late answers than
// Workers: a worker taken for absent would be doubled by the caller.
func (c *Client) Serving(ctx context.Context, job string) ([]WorkerStats, error) {
	stats, err := worker.GatherWithin(c.b, worker.GatherPatient, worker.GatherPatientQuiet)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(stats, func(s WorkerStats) bool { return !s.Serves(job) }), nil
}

// Unserved is the jobs, of jobs, that no live worker serves (Serving):
// records replayed into them would wait for nobody. One gather for all.
func (c *Client) Unserved(ctx context.Context, jobs []string) ([]string, error) {
	stats, err := worker.GatherWithin(c.b, worker.GatherPatient, worker.GatherPatientQuiet)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, j := range jobs {
		if !slices.ContainsFunc(stats, func(s WorkerStats) bool { return s.Serves(j) }) {
			out = append(out, j)
		}
	}
	slices.Sort(out)
	return out, nil
}

// WorkableHere returns nil when this process could work job j's records
// itself with Work; otherwise the error (ErrInvalid) that says why. On
// its own embedded store that is Workable; on a store another process
// hosts, Work runs with the operator's policy only (Trust of no workflow,
// as a `jetpool worker` would), and that is what is asked.
func (c *Client) WorkableHere(j *broker.Job) error {
	if c.b.Embedded() {
		return c.Workable(j, nil)
	}
	trust, err := Trust()
	if err != nil {
		return err
	}
	if err := worker.Servable(trust, j); err != nil {
		return invalid(fmt.Errorf("job %s: no live worker serves it, and this process could not work it either: %v", j.ID, err))
	}
	return nil
}
