package bench

import (
	"context"
	"fmt"
	"github.com/rs/zerolog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/worker"
)

// workRun is the timing of one pool run.
type workRun struct {
	total time.Duration // pool start to the job finished
	// steady is the rate between 20 % and 80 % of the records handled: the
	// pool's sustained rate, without the adaptive window's ramp at the
	// start and the drain at the end (0 when the run was too short to see).
	steady float64
	cpu    cpuUse // over total
}

// window finds a run's sustained rate: the records done between 20 % and
// 80 % of the job, over the time between (see workRun.steady).
type window struct {
	records  int64
	t20, t80 time.Time
	n20, n80 int64
}

// see takes a sample: done records at now. It reports whether the 80 %
// mark is passed (no further sample is needed).
func (w *window) see(now time.Time, done int64) bool {
	if w.t20.IsZero() && done >= w.records/5 {
		w.t20, w.n20 = now, done
	}
	if w.t80.IsZero() && done >= w.records*4/5 {
		w.t80, w.n80 = now, done
	}
	return !w.t80.IsZero()
}

// rate is the sustained rate, 0 when the run was too short to see it.
func (w *window) rate() float64 {
	if w.t20.IsZero() || w.t80.IsZero() || !w.t80.After(w.t20) {
		return 0
	}
	return float64(w.n80-w.n20) / w.t80.Sub(w.t20).Seconds()
}

// startPool starts a pool on s serving only job; stop stops it (10 s to
// drain).
func (h *harness) startPool(ctx context.Context, s *server, job string, conc int) (*worker.Pool, func(), error) {
	pool := worker.New(s.b, worker.Config{Concurrency: conc, Log: h.log, Jobs: []string{job}})
	if err := pool.Start(ctx); err != nil {
		return nil, nil, err
	}
	return pool, func() {
		pool.JobDone(job) // called once the job is done (or the bench failed)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = pool.Stop(sctx)
	}, nil
}

// waitJob waits until job is finished on s, polling often so that the
// timings are not rounded up to a progress bar's tick.
func (h *harness) waitJob(ctx context.Context, s *server, job string) error {
	_, err := jobstatus.Wait(ctx, s.b, job, 20*time.Millisecond, nil, zerolog.Nop())
	return err
}

// waitHandled waits for job to finish as `jetpool run` does, its status
// read every runPoll, until near is closed (every record handled: only the
// last records' writes and acks are left), and from then on every
// endPoll, so that the run's end is seen within milliseconds. Read often
// all along, the polls (the job's entry, its consumer's info and its
// counts, far more often than a run reads them) took a share of the run's
// CPU and still saw the end late.
func (h *harness) waitHandled(ctx context.Context, s *server, job string, near <-chan struct{}) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := jobstatus.Wait(wctx, s.b, job, runPoll, nil, zerolog.Nop())
		first <- err
	}()
	select {
	case err := <-first:
		return err // finished (or failed) before the sampler saw it
	case <-near:
		cancel()
		<-first
	}
	_, err := jobstatus.Wait(ctx, s.b, job, endPoll, nil, zerolog.Nop())
	return err
}

// runPoll is how often `jetpool run` reads its job's status; endPoll how
// often the bench reads it once every record is handled.
const (
	runPoll = 200 * time.Millisecond
	endPoll = 2 * time.Millisecond
)

// work runs a pool on job (on s) until it is finished and returns the times.
func (h *harness) work(ctx context.Context, s *server, job string, conc, records int) (workRun, error) {
	start, cpu := time.Now(), s.meter()
	pool, stopPool, err := h.startPool(ctx, s, job, conc)
	if err != nil {
		return workRun{}, err
	}
	defer stopPool()
	// Sample the records the pool has finished (handled, no longer in
	// flight): two counters, not a Snapshot, whose maps and locks every
	// few milliseconds were a share of the run's CPU. Every record handled closes near
	// (waitHandled).
	win := window{records: int64(records)}
	stop := make(chan struct{})
	sampled, near := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				done := pool.Handled() - pool.InFlightCount()
				if win.see(now, done) && done >= int64(records) {
					close(near)
					return
				}
			}
		}
	}()
	err = h.waitHandled(ctx, s, job, near)
	total, used := time.Since(start), cpu(records)
	close(stop)
	<-sampled
	if err != nil {
		return workRun{}, err
	}
	return workRun{total: total, cpu: used, steady: win.rate()}, nil
}

// childWork runs job on a worker process of its own (`jetpool worker
// --job`, connected to the server as a deployed worker is) until the job is
// finished. The rates are read from the job's counts (two consumer-info
// requests every 10 ms); the CPU counts the worker process and this one
// (the server).
func (h *harness) childWork(ctx context.Context, s *server, job string, conc, records int) (workRun, error) {
	j, _, err := s.b.GetJob(ctx, job)
	if err != nil {
		return workRun{}, err
	}
	start, cpu := time.Now(), s.meter()
	wk := h.selfCommand(ctx, s, "worker", "--concurrency", strconv.Itoa(conc), "--job", job)
	if err := wk.Start(); err != nil {
		return workRun{}, fmt.Errorf("worker child: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- wk.Wait() }()
	stop := func() {
		_ = wk.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	win := window{records: int64(records)}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := s.b.JobCounts(ctx, j, false)
		if err != nil {
			stop()
			return workRun{}, err
		}
		win.see(time.Now(), c.Done)
		if c.Done >= int64(records) {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			return workRun{}, ctx.Err()
		case err := <-exited:
			return workRun{}, fmt.Errorf("worker child exited with job %s at %d of %d records: %v", job, c.Done, records, err)
		case <-tick.C:
		}
	}
	total := time.Since(start)
	stop() // its CPU is counted once it has been waited for
	used := cpu(records)
	used.cores = (used.perMsg * time.Duration(records)).Seconds() / total.Seconds() // not the stop's wait
	return workRun{total: total, cpu: used, steady: win.rate()}, nil
}

// selfCommand is the jetpool binary (Options.Self) run as a child on s:
// quiet, and not profiling; its stderr is the bench's progress.
func (h *harness) selfCommand(ctx context.Context, s *server, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, h.o.Self, args...)
	c.Env = append(os.Environ(), "JETPOOL_NATS_URL="+s.url, "JETPOOL_LOG_LEVEL=error", "JETPOOL_CPUPROFILE=")
	c.Stderr = h.out
	return c
}
