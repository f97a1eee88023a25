package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
)

// latencyMode is one way a latency run's pool runs.
type latencyMode struct {
	adaptive bool // the shipped adaptive concurrency; false: limits: {adaptive: false}
	child    bool // the pool in a worker process of its own
}

// latencyModes are the three latency runs at each concurrency: with the
// shipped adaptive concurrency (no limits); with `limits: {adaptive:
// false}`, as for a self-hosted endpoint; and adaptive again, with the pool
// in a worker process of its own (`jetpool worker`, as deployed), so that
// the embedded server's state, which grows with every job run, is not in the
// pool's heap.
var latencyModes = []latencyMode{{adaptive: true}, {adaptive: false}, {adaptive: true, child: true}}

// latency measures the efficiency of c slots under 100 ms of simulated
// latency, in each latency mode, Repeat times each.
func (h *harness) latency(ctx context.Context, c int) error {
	n := c * h.o.LatencyRecords
	in := filepath.Join(h.dir, fmt.Sprintf("lat%d.jsonl", c))
	if err := writeRecords(in, n, h.o.Size); err != nil {
		return err
	}
	for _, mode := range latencyModes {
		if err := h.latencyRun(ctx, c, n, in, mode); err != nil {
			return err
		}
	}
	return nil
}

// latencyRun adds the two rows of one latency mode: the sustained rate (20–80
// % of the job) and the whole run's, each against the ideal c ÷ 100 ms.
func (h *harness) latencyRun(ctx context.Context, c, n int, in string, mode latencyMode) error {
	ideal := float64(c) / 0.1
	name, limits, label := fmt.Sprintf("lat%d", c), "", "adaptive ramp and drain included"
	sustained := "sustained"
	switch {
	case !mode.adaptive:
		name, limits, label = name+"-fixed", "adaptive: false", "limits: {adaptive: false}, drain included"
		sustained += ", limits: {adaptive: false}"
	case mode.child:
		name, label = name+"-child", "worker process of its own, its start, ramp and drain included"
		sustained += ", worker process of its own"
	}
	wf, err := writeWorkflow(h.dir, name, "latency: 100ms", limits, "")
	if err != nil {
		return err
	}
	var steady, whole, us, cores []float64
	for r := range h.o.Repeat {
		job := fmt.Sprintf("bench-%s-%d", name, r)
		if _, err := h.emb.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job}); err != nil {
			return err
		}
		var run workRun
		if mode.child {
			run, err = h.childWork(ctx, h.emb, job, c, n)
		} else {
			run, err = h.work(ctx, h.emb, job, c, n)
		}
		if err != nil {
			return err
		}
		steady = append(steady, run.steady)
		whole = append(whole, float64(n)/run.total.Seconds())
		us = append(us, float64(run.cpu.perMsg)/float64(time.Microsecond))
		cores = append(cores, run.cpu.cores)
	}
	ofIdeal := func(v float64) string { return pct(v, ideal) }
	h.add(fmt.Sprintf("100 ms latency, concurrency %d (%d records), %s", c, n, sustained), spread(steady, rate),
		spread(steady, ofIdeal)+" of ideal "+rate(ideal)+" (20–80 % of the job)")
	h.add(fmt.Sprintf("100 ms latency, concurrency %d (%d records), whole run", c, n), spread(whole, rate),
		spread(whole, ofIdeal)+" of ideal, "+label+"; "+cpuText(us, nil, cores, "record"))
	return nil
}

// retryOverhead works RetryRecords records against a sim that fails 10 % of
// its calls with a transient error and adds the extra calls the retries
// took: with p = 0.1 per call, the expected calls per record are 1/(1-p).
func (h *harness) retryOverhead(ctx context.Context) error {
	n := h.o.RetryRecords
	in := filepath.Join(h.dir, "retry.jsonl")
	if err := writeRecords(in, n, 256); err != nil {
		return err
	}
	wf, err := writeWorkflow(h.dir, "retry", "faults: {server: 0.1}", "",
		"    retry: {max_attempts: 3, backoff: 1ms, max_backoff: 5ms, redeliver: {max_deliveries: 3, backoff: 10ms}}\n")
	if err != nil {
		return err
	}
	if _, err := h.emb.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: "bench-retry"}); err != nil {
		return err
	}
	if _, err := h.work(ctx, h.emb, "bench-retry", 64, n); err != nil {
		return err
	}
	j, _, err := h.emb.b.GetJob(ctx, "bench-retry")
	if err != nil {
		return err
	}
	calls, failed, err := callsAndFailed(ctx, h.emb.b, j)
	if err != nil {
		return err
	}
	extra := calls - int64(n)
	h.add("retry: 10% transient faults, extra calls", fmt.Sprintf("%d / %d", extra, n),
		fmt.Sprintf("%.1f%% extra (expected %.1f%%), %d failed", 100*float64(extra)/float64(n), 100*(1/0.9-1), failed))
	return nil
}

// callsAndFailed reads a job's results: the calls its records took (the
// attempts of every result, a redelivery's included) and the records whose
// final result is a failure.
func callsAndFailed(ctx context.Context, b *broker.Broker, j *broker.Job) (calls, failed int64, err error) {
	err = b.EachFinal(ctx, j, func(r *broker.Result, final bool) error {
		calls += int64(r.Recovery.Attempts)
		if final && r.Status != broker.StatusOK {
			failed++
		}
		return nil
	})
	return calls, failed, err
}
