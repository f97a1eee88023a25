package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/workflow"
)

// jobRunner serves one job in a pool: its fetch loop (fetch.go), the
// handling of its records (handle.go), its providers and limiters.
type jobRunner struct {
	p          *Pool
	id         string
	wf         *workflow.Workflow
	revs       revisions // the workflow's later revisions (revision.go)
	workPrefix string    // "jetpool.work.<job>."

	mu        sync.Mutex
	job       *broker.Job
	providers map[string]provider.Provider
	limiters  map[string]*ratelimit.Limiter // by provider name (call.go)
	spreads   map[string]*spread            // by provider name, of one with deployments (deployments.go)
	heartbeat atomic.Int64                  // InProgress interval: the consumer's AckWait / BeatsPerAckWait
	ackWait   atomic.Int64                  // the consumer's AckWait (0: not read yet): claims stand twice that (lease.go)
	held      heldSet                       // the work messages handled here, by sequence (lease.go hold)
	inFlight  atomic.Int64
	storing   atomic.Int64 // records the completer took over: their writes are landing
	// replicated: the job's consumer has followers (a cluster, R3). A
	// delivery count is then no proof of a first delivery: deliveries the
	// leader made just before it was lost may not have reached the new
	// leader, which delivers those messages again as first deliveries. So
	// every delivery looks its result up (no Jetpool-First-Run skip).
	replicated atomic.Bool
	// keepsAcked: the work stream keeps acked messages until they are
	// purged (purge.go): a consumer made again delivers them as first
	// deliveries, so every delivery looks its result up too.
	keepsAcked atomic.Bool
	purging    sync.Mutex // one purge at a time
	purged     uint64     // the ack floor purged to (purging)
	// nonce is the job's Nonce when its consumer was found (bind): a work
	// message of the dispatcher's that carries another is dropped (before).
	nonce   atomic.Pointer[string]
	batcher *batch.Batcher // worker/batch.go; nil unless the workflow has batch-mode actions
	costs   *budget        // worker/budget.go; made on first use

	// embeds are the embed actions' batchers (worker/embed.go), by action
	// (of any revision), made on first use.
	embeds map[*workflow.Action]*embedBatcher
	// done ends when the pool's caller says the job has nothing left to
	// deliver (JobDone): its pulls end then, not at their expiry.
	done   context.Context
	endJob context.CancelFunc

	// steer is held (read) by a call from its check of the job's state
	// until it is counted as made, and taken once by a worker that sees
	// the job cancelled; quiet is set then (worker/steer.go).
	steer sync.RWMutex
	quiet atomic.Bool
	// restating orders the changes of quiet (restate); paused is the
	// job's consumer pause as this worker knows it (worker/pause.go).
	restating sync.Mutex
	paused    pauseState
	// wants is set while the job's fetch loop waits for a slot: its
	// weight counts in the division of the slots (worker/share.go).
	wants    atomic.Bool
	wantedAt atomic.Int64 // when its loop last asked for slots (unix ns)
	// returning is the job's records back from a backoff waited off their
	// slot that wait for one again (worker/slot.go reclaim); hasWork is
	// set while the job's last pull brought records (worker/share.go).
	returning atomic.Int64
	hasWork   atomic.Bool
}

func newJobRunner(p *Pool, j *broker.Job, wf *workflow.Workflow) *jobRunner {
	jr := &jobRunner{p: p, id: j.ID, wf: wf, workPrefix: broker.WorkSubject(j.ID, ""), providers: map[string]provider.Provider{}}
	jr.done, jr.endJob = context.WithCancel(context.Background())
	jr.setJob(j)
	return jr
}

// readJob reads the job's entry from the jobs bucket (on its leader), for
// a delivery that finds the watch's copy behind.
func (jr *jobRunner) readJob(ctx context.Context) (*broker.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, _, err := jr.p.b.GetJob(ctx, jr.id)
	return j, err
}

// reread reads the job's entry (readJob) and holds it instead of seen,
// unless the watch replaced seen meanwhile; it returns the entry held
// (seen when the read fails).
func (jr *jobRunner) reread(ctx context.Context, seen *broker.Job) *broker.Job {
	j, err := jr.readJob(ctx)
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if err == nil && jr.job == seen {
		jr.job = j
	}
	return jr.job
}

func (jr *jobRunner) setJob(j *broker.Job) {
	jr.mu.Lock()
	jr.job = j
	b := jr.costs
	jr.mu.Unlock()
	jr.restate() // worker/steer.go: a cancel
	if b != nil {
		b.seen(j) // worker/budget.go: a change of the job's ledger
	}
}

// mergeState holds the job with the state entry st a write of its ledger
// returned (broker.UpdateState).
func (jr *jobRunner) mergeState(st *broker.Job) {
	jr.mu.Lock()
	jr.job = jr.job.WithState(st)
	jr.mu.Unlock()
}

func (jr *jobRunner) current() *broker.Job {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	return jr.job
}

func (jr *jobRunner) provider(name string) (provider.Provider, error) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if pr, ok := jr.providers[name]; ok {
		return pr, nil
	}
	cfg, ok := jr.providerConfig(name)
	if !ok {
		return nil, fmt.Errorf("unknown provider %q", name)
	}
	pr, err := jr.p.cfg.NewProvider(cfg)
	if err != nil {
		return nil, err
	}
	jr.providers[name] = pr
	return pr, nil
}

// providerAs is the adapter kept under key, made from cfg if there is none
// yet (worker/revision.go providerAt).
func (jr *jobRunner) providerAs(key string, cfg provider.Config) (provider.Provider, error) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if pr, ok := jr.providers[key]; ok {
		return pr, nil
	}
	pr, err := jr.p.cfg.NewProvider(cfg)
	if err != nil {
		return nil, err
	}
	jr.providers[key] = pr
	return pr, nil
}

// heartbeatEvery is the InProgress interval for this job's deliveries.
func (jr *jobRunner) heartbeatEvery() time.Duration {
	if hb := time.Duration(jr.heartbeat.Load()); hb > 0 {
		return hb
	}
	return jr.p.cfg.Heartbeat
}
