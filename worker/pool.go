// Package worker runs a pool of bounded concurrency that pulls records from
// the jobs' durable consumers, runs each action's session (the session-level
// retry), and acks, naks with delay (the exec-level retry) or dead-letters.
package worker

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/pause"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

// Defaults of Config.
const (
	// ConcurrencyDefault suits I/O-bound model calls: most of a call is waiting.
	ConcurrencyDefault = 64
	// FetchBatchMax bounds one pull request.
	FetchBatchMax = 256
	// FetchGather is how many free slots a busy pool gathers (at most
	// FetchGatherWait) before it pulls.
	FetchGather     = 32
	FetchGatherWait = 2 * time.Millisecond
	// IdlePollMax is how long a pull of an idle job waits for a record.
	IdlePollMax = time.Second
)

// Config configures a Pool. Zero fields take their defaults.
type Config struct {
	Concurrency int // ConcurrencyDefault
	// Resting bounds the records that wait out a session backoff off their
	// call slot at once (worker/slot.go); 0: RestingMax(Concurrency).
	Resting int
	Log     zerolog.Logger
	Clock   retry.Clock // retry.SystemClock
	// Jobs limits the pool to these jobs; empty serves every running job.
	Jobs []string
	// Heartbeat is the InProgress interval for long calls (AckWait/BeatsPerAckWait).
	Heartbeat time.Duration
	// NewProvider builds provider adapters (provider.New); tests wrap it.
	NewProvider func(provider.Config) (provider.Provider, error)
	// Metrics, when set, receives every outcome.
	Metrics Metrics
	// Limits keeps every provider call inside its shared limits, cooldowns
	// and circuit (ratelimit). Nil: Start makes one over the broker's
	// JETPOOL_LIMITS bucket, closed by Stop.
	Limits *ratelimit.Registry
	// LimitsConfig configures the registry Start makes when Limits is nil
	// (its Log, Clock and AdaptiveMax default to the pool's).
	LimitsConfig ratelimit.Config

	// ReadAhead is how many records a busy pool may pull beyond its free
	// slots (worker/ahead.go): 0 sizes it from the pool's rate and a
	// pull's round trip, at most Concurrency/4; a negative value turns it
	// off; a positive one fixes it (tests).
	ReadAhead int

	// IdlePoll is how long a pull of an idle job waits for a record
	// (IdlePollMax). Stop waits for such a pull to end; JobDone ends it.
	IdlePoll time.Duration

	// DieOn, for tests and chaos drills, makes the worker abandon a record
	// as a crashed process would: no ack, no nak, no result.
	DieOn func(job, action, record string) bool
	// DieAfterWrites, likewise, abandons a record once its outcome's writes
	// have landed, before its ack or nak: a process killed between the two.
	DieAfterWrites func(job, action, record string) bool

	// Pauses is the watch of the times the process did not run (stopped,
	// suspended): a delivery paused checks its claim before it calls
	// again (worker/lease.go). Nil: the process's (pause.Process); tests
	// drive one of their own.
	Pauses *pause.Watch
	// Frozen, for tests and drills, stops the pool's heartbeats and claim
	// renewals while it returns true, as a stopped process sends none.
	Frozen func() bool

	// Trust is the operator's policy for the keys and endpoints a job's
	// workflow may use (provider.DefaultTrust); a job it refuses is not
	// served (worker/serve.go).
	Trust *provider.Trust
	// OnUnservable, when set, is told once per reason of a running job this
	// pool will not serve (with the pool's lock held: it must not call the
	// pool).
	OnUnservable func(job string, why error)
}

// Metrics receives the pool's events (Prometheus in cmd/jetpool).
type Metrics interface {
	Record(job, action, outcome string, class retry.Class)
	Call(provider, model string, class retry.Class, d time.Duration, usage provider.Usage)
	Delivery(job string)
	InFlight(delta int)
}

type nopMetrics struct{}

func (nopMetrics) Record(string, string, string, retry.Class)                      {}
func (nopMetrics) Call(string, string, retry.Class, time.Duration, provider.Usage) {}
func (nopMetrics) Delivery(string)                                                 {}
func (nopMetrics) InFlight(int)                                                    {}

// Pool is a worker pool. Start it, then Stop it; both are safe to call twice.
type Pool struct {
	b *broker.Broker
	// pulls is a connection of its own for pulling and acking records, so
	// a pull is not queued behind the results being written (by a burst of
	// calls ending together) on the connection the server reads in order.
	pulls      *broker.Broker
	mainClosed chan nats.Status // b's connection closed: pulls goes too
	cfg        Config
	log        zerolog.Logger
	sem        chan struct{}
	// back hands a slot from a record that is done to one back from its
	// backoff (slot.go); resting bounds the records waiting off their slot.
	back    chan struct{}
	resting chan struct{}
	id      string
	suspect chan struct{} // the one place for a record that runs alone (poison.go)

	mu      sync.Mutex
	started bool
	stopped bool
	jobs    map[string]*jobRunner
	runCtx  context.Context    // fetch loops
	stopRun context.CancelFunc // stops fetching
	hctx    context.Context    // handlers: cancelled when Stop's deadline passes
	stopH   context.CancelFunc
	loops   sync.WaitGroup // fetch loops and the watcher
	pulled  sync.WaitGroup // messages pulled and not yet let go (started or read ahead): Stop waits for them
	ctlSub  *nats.Subscription
	// unwatchElections ends the watch of the work stream's leader
	// elections (worker/faults.go elected).
	unwatchElections func()
	// unwatchPauses ends the watch of the jobs' pause advisories;
	// pauseKick asks pauseLoop to read the pauses asked for (pause.go).
	unwatchPauses func()
	pauseKick     chan struct{}
	elections     atomic.Int64 // Stats.Elections
	claimWarned   atomic.Int64 // when a refused claim was last logged (unix ns): warnClaim
	purgeWarned   atomic.Int64 // when a failed purge was last logged (unix ns): purge.go

	// pauses sees the process stopped (lease.go), held while the pool
	// runs (unpause lets go of it); pauseLogged is the pause watch's
	// reading last logged.
	pauses      *pause.Watch
	unpause     func()
	pauseLogged atomic.Int64

	// results stores results in group commits where every write is synced
	// (broker.ResultBatcher); nil elsewhere.
	results *broker.ResultBatcher
	serve   serveState // jobs this worker cannot serve (serve.go)
	tenant  tenantCap  // the tenant's budget (tenant.go)
	limits  *ratelimit.Registry
	ownLim  bool // limits made by Start, closed by Stop

	calls    atomic.Int64
	handled  atomic.Int64
	inFlight atomic.Int64

	// done owns every record's outcome after its session (complete.go);
	// beats keeps every message the pool holds alive (heartbeat.go).
	done  *completer
	beats *beats

	// ahead holds records pulled beyond the free slots (worker/ahead.go);
	// finishedCount counts the slots handed on, for its rate.
	ahead         *readAhead
	finishedCount atomic.Int64

	// Handlers: long-lived goroutines fed by tasks (see run).
	tasks    chan task
	idle     idleHandlers
	handlers sync.WaitGroup
	quit     chan struct{} // closed by Stop: idle handlers exit
}

// New makes a pool over b.
func New(b *broker.Broker, cfg Config) *Pool {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = ConcurrencyDefault
	}
	if cfg.Clock == nil {
		cfg.Clock = retry.SystemClock{}
	}
	if cfg.NewProvider == nil {
		cfg.NewProvider = provider.New
	}
	if cfg.Metrics == nil {
		cfg.Metrics = nopMetrics{}
	}
	if cfg.IdlePoll <= 0 {
		cfg.IdlePoll = IdlePollMax
	}
	if cfg.Trust == nil {
		cfg.Trust = provider.DefaultTrust()
	}
	if cfg.Pauses == nil {
		cfg.Pauses = pause.Process()
	}
	if cfg.Heartbeat <= 0 {
		aw := b.Cfg.AckWait
		if aw <= 0 {
			aw = broker.AckWaitDefault
		}
		cfg.Heartbeat = aw / BeatsPerAckWait
	}
	host, _ := os.Hostname()
	p := &Pool{
		b: b, cfg: cfg, log: cfg.Log, sem: make(chan struct{}, cfg.Concurrency),
		back: make(chan struct{}), resting: make(chan struct{}, cmp.Or(cfg.Resting, RestingMax(cfg.Concurrency))), suspect: make(chan struct{}, 1),
		jobs: map[string]*jobRunner{}, id: cmp.Or(b.Cfg.WorkerName, fmt.Sprintf("%s-%d", host, os.Getpid())),
		tasks: make(chan task), quit: make(chan struct{}), ahead: newReadAhead(), beats: newBeats(cfg.Heartbeat),
		pauses: cfg.Pauses, unpause: func() {}, pauseKick: make(chan struct{}, 1),
	}
	p.beats.renew, p.beats.frozen = p.renewLease, cfg.Frozen
	p.done = newCompleter(brokerStore{p}, p.beats, cfg.Log, cfg.Metrics, p.commitRoom())
	// A third of AckWait: parked well before a redelivery could look.
	p.done.parkAfter = cmp.Or(b.Cfg.AckWait, broker.AckWaitDefault) / 3
	if cfg.DieAfterWrites != nil {
		p.done.dieAfterWrites = func(d *delivery) bool { return cfg.DieAfterWrites(d.job, d.action.Name, d.env.ID) }
	}
	return p
}

// Calls is the number of model calls this pool has made.
func (p *Pool) Calls() int64 { return p.calls.Load() }

// Handled is the number of deliveries this pool has handled (Stats.Handled),
// read without the rest of a Snapshot.
func (p *Pool) Handled() int64 { return p.handled.Load() }

// commitRoom is how many records the completer may hold once their slots
// went on: CommitRoom of the pool's concurrency.
func (p *Pool) commitRoom() int { return CommitRoom(p.cfg.Concurrency, p.b.Cfg.Batched()) }

// CommitRoom is how many records a pool of concurrency slots holds once their
// slots went on (being stored, or held after a failed write): its
// concurrency; where results go in group commits (batched), four times that
// up to a batch's worth (broker.AtomicBatchMax), since the results waiting
// while a batch is stored make the next one — with 64 slots and room for 64,
// a 20,000-record `jetpool run` synced on every write took 3.2 s, with room
// for 256 1.95 s. The answers a SIGKILLed worker had paid for and not stored
// are at most its concurrency (calls answered, not yet handed over) plus
// this (docs/durability.md): CommitRoom bounds what a crash can cost, so it
// grows with the pool, not with the batch.
func CommitRoom(concurrency int, batched bool) int {
	if batched {
		return max(concurrency, min(4*concurrency, broker.AtomicBatchMax))
	}
	return concurrency
}

// ResultBatches is how many group commits of results the pool stored (0
// where writes are not synced each: broker.ResultBatcher).
func (p *Pool) ResultBatches() int64 {
	if p.results == nil {
		return 0
	}
	return p.results.Batches()
}

// InFlightCount is the number of records being worked now.
func (p *Pool) InFlightCount() int64 { return p.inFlight.Load() }

// Start watches the jobs bucket and serves every running job (or cfg.Jobs).
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started {
		return nil
	}
	var err error
	p.limits = p.cfg.Limits
	if p.limits == nil {
		store, err := ratelimit.NewKVStore(ctx, p.b)
		if err != nil {
			return err
		}
		lc := p.cfg.LimitsConfig
		lc.Log = p.log
		if lc.Clock == nil {
			lc.Clock = p.cfg.Clock
		}
		if lc.AdaptiveMax <= 0 {
			lc.AdaptiveMax = p.cfg.Concurrency
		}
		p.limits, err = ratelimit.NewRegistry(ctx, store, lc)
		if err != nil {
			return err
		}
		p.ownLim = true
	}
	if p.pulls, err = p.b.Dup(ctx, "jetpool pulls"); err != nil {
		if p.ownLim {
			p.limits.Close()
		}
		return fmt.Errorf("connect for pulls: %w", err)
	}
	// The main connection closed for good leaves this pool unable to store
	// a result: its pulls connection goes too, so its records' heartbeats
	// stop and they are redelivered after AckWait, as a dead process's.
	p.mainClosed = p.b.NC.StatusChanged(nats.CLOSED)
	go func(closed chan nats.Status, pulls *nats.Conn) {
		if _, ok := <-closed; ok {
			pulls.Close()
		}
	}(p.mainClosed, p.pulls.NC)
	if p.b.NC.IsClosed() {
		p.pulls.NC.Close()
	}
	// Back from a lost connection, every held record is kept alive at
	// once: the beats sent since its server went silent may be lost.
	go func(back chan nats.Status) {
		for s := range back {
			if s == nats.CLOSED {
				return
			}
			p.beats.soon()
		}
	}(p.pulls.NC.StatusChanged(nats.CONNECTED, nats.CLOSED))
	p.runCtx, p.stopRun = context.WithCancel(context.WithoutCancel(ctx))
	p.hctx, p.stopH = context.WithCancel(context.WithoutCancel(ctx))
	w, err := p.b.WatchJobs(p.runCtx)
	if err != nil {
		p.stopRun()
		p.stopH()
		p.b.NC.RemoveStatusListener(p.mainClosed)
		p.pulls.Close()
		if p.ownLim {
			p.limits.Close()
		}
		return fmt.Errorf("watch jobs: %w", err)
	}
	p.started = true
	p.unpause = p.pauses.Hold()
	p.pauseLogged.Store(int64(p.pauses.Lost()))
	if p.b.Cfg.Batched() {
		p.results = p.b.NewResultBatcher(p.commitRoom() + 1)
	}
	p.handlers.Add(6)
	go func() { defer p.handlers.Done(); p.pauseLoop(p.hctx) }()
	go func() { defer p.handlers.Done(); p.retireIdle(handlerIdle) }()
	go func() { defer p.handlers.Done(); p.purgeLoop(p.hctx) }()
	go func() { defer p.handlers.Done(); p.done.commitLoop(p.quit) }()
	go func() { defer p.handlers.Done(); p.done.heldLoop(p.hctx) }()
	go func() { defer p.handlers.Done(); p.beats.run(p.hctx) }()
	p.listen()
	p.loadTenant(ctx)
	p.loops.Add(2)
	go func() { defer p.loops.Done(); p.watchTenant(p.runCtx) }()
	go func() {
		defer p.loops.Done()
		defer w.Stop()
		w.Each(p.runCtx, p.onJob)
	}()
	return nil
}

func (p *Pool) wants(job string) bool {
	if len(p.cfg.Jobs) == 0 {
		return true
	}
	for _, j := range p.cfg.Jobs {
		if j == job {
			return true
		}
	}
	return false
}

func (p *Pool) onJob(j *broker.Job) {
	if !p.wants(j.ID) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if jr, ok := p.jobs[j.ID]; ok {
		if j.Deleted || j.Status == broker.JobCompleted {
			// Deleted, or every record has its final result: stop pulling
			// it (its consumer may go: broker.Sweep); a replay that reopens
			// it starts it again.
			delete(p.jobs, j.ID)
			p.retire(jr)
			// Its last acks, even if the pool stops now (`jetpool run`
			// stops it as soon as the job is done).
			p.loops.Add(1)
			go func() { defer p.loops.Done(); jr.purgeAcked(context.WithoutCancel(p.runCtx)) }()
			return
		}
		if p.recheck(jr, j) { // worker/serve.go: a revision it cannot serve
			return
		}
		jr.setJob(j)
		return
	}
	if j.Deleted || j.Status == broker.JobCompleted {
		p.serve.clear(j.ID) // no longer a job anyone must serve
		return
	}
	wf := p.admit(j) // worker/serve.go: nil when this worker cannot serve the job
	if wf == nil {
		return
	}
	jr := newJobRunner(p, j, wf)
	p.jobs[j.ID] = jr
	jr.startBatcher(p.runCtx) // worker/batch.go
	p.loops.Add(1)
	go func() {
		defer p.loops.Done()
		// The loop ends with the pool or with JobDone.
		ctx, cancel := context.WithCancel(p.runCtx)
		defer cancel()
		defer context.AfterFunc(jr.done, cancel)()
		jr.fetchLoop(ctx)
	}()
	p.log.Info().Str("job", j.ID).Msg("serving job")
}

// retire stops serving a job: its pulls end at once (as with JobDone), its
// batcher hands back what it did not record, its spend is flushed. Records
// in flight finish as before.
func (p *Pool) retire(jr *jobRunner) {
	jr.endJob()
	jr.stopBatcher()
	jr.budget().Close(context.Background())
	p.log.Info().Str("job", jr.id).Msg("job finished or deleted: no longer serving it")
}

// JobDone tells the pool that job id has nothing left to deliver (every
// record has its final result, as `jetpool run` waits for): the pool stops
// pulling for it at once. A pull waiting for a record is ended, where Stop
// waits for it to expire (up to Config.IdlePoll): a pull ended early can
// still be handed a record stored in that instant, which then waits out its
// AckWait, so only a job that is done may be cut short.
func (p *Pool) JobDone(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if jr, ok := p.jobs[id]; ok {
		jr.endJob()
	}
}

// Stop stops pulling, lets in-flight records finish until ctx is done, then
// hands the rest back (Nak, no delay) so no record waits for a full AckWait.
// A pull waiting on an idle job is let expire (Config.IdlePoll), so that a
// record stored meanwhile is handled or handed back, not delivered to a pull
// that is gone; JobDone ends it sooner.
func (p *Pool) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.started || p.stopped {
		p.stopped = true
		p.mu.Unlock()
		return nil
	}
	p.stopped = true
	p.mu.Unlock()
	if p.unwatchElections != nil {
		p.unwatchElections()
	}
	if p.unwatchPauses != nil {
		p.unwatchPauses()
	}
	if p.ctlSub != nil {
		_ = p.ctlSub.Unsubscribe()
	}
	p.stopRun()
	// Records read ahead were never started: back to the stream at once,
	// for other workers (a pull still running hands its own back).
	for _, t := range p.ahead.close() {
		p.handBackUnstarted(t)
	}
	p.loops.Wait()
	done := make(chan struct{})
	go func() { p.pulled.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("stop: %d records still in flight at the deadline were handed back", p.inFlight.Load())
		p.stopH()
		<-done
	}
	p.mu.Lock()
	for _, jr := range p.jobs {
		jr.stopBatcher() // worker/batch.go: hands back records not yet in a recorded batch
		// worker/budget.go: the job's last spend goes into its entry,
		// and its lease goes back.
		jr.budget().Close(context.WithoutCancel(ctx))
		jr.endJob()
	}
	p.mu.Unlock()
	p.stopH() // the heartbeats and the held writes' retries end
	close(p.quit)
	p.handlers.Wait()
	p.b.NC.RemoveStatusListener(p.mainClosed)
	p.pulls.Close() // drains the last acks
	if p.results != nil {
		p.results.Close()
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), purgeOnStopFor)
	p.mu.Lock()
	for _, jr := range p.jobs {
		jr.purgeAcked(pctx) // what was acked last
	}
	p.mu.Unlock()
	cancel()
	if p.ownLim {
		p.limits.Close()
	}
	p.unpause()
	return err
}

// start gives t a slot the caller has taken.
func (p *Pool) start(t task) {
	p.inFlight.Add(1)
	t.jr.inFlight.Add(1)
	p.cfg.Metrics.InFlight(1)
	p.run(t)
}

// aheadTarget is how many records the pool keeps read ahead now.
func (p *Pool) aheadTarget() int {
	switch {
	case p.cfg.ReadAhead < 0:
		return 0
	case p.cfg.ReadAhead > 0:
		return p.cfg.ReadAhead
	}
	return p.ahead.target(aheadMax(p.cfg.Concurrency))
}

// handBackUnstarted returns a record pulled but never started (read ahead
// when the pool stops) at once, its state counting the delivery as handed
// back, so that it is not taken for one lost with a process.
func (p *Pool) handBackUnstarted(t task) {
	defer p.pulled.Done()
	defer p.beats.release(t.msg)
	if d, err := t.jr.parse(t.msg); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), parkOnStopFor)
		var lerr error
		if d.n > 1 {
			d.state, lerr = p.b.LoadState(ctx, d.job, d.action.Name, d.env.ID, d.replays)
		}
		if lerr == nil {
			st := d.nextState(nil)
			st.HandBacks++
			_ = p.b.SaveState(ctx, d.job, d.action.Name, d.env.ID, st)
		}
		cancel()
	}
	_ = t.msg.Nak()
}
