package worker

import (
	"context"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// A paused job makes no call. The consumer's pause holds back deliveries
// only; a record delivered before it would go on with its session's
// retries, and one resting off its slot would come back and call. So a
// worker follows the pause itself: the server's pause advisories tell it at
// once (broker.WatchPauses: `jetpool job pause` and `nats consumer pause`
// alike), the consumer's info when it binds the job, and again now and
// then, in case an advisory was missed. Each call checks it just before it
// goes (enterCall, worker/steer.go): a paused job's record hands its
// delivery back with its attempts kept, and the paused consumer delivers it
// again after the resume, to continue where it stopped.

// pauseRecheck is how often a worker reads the pause of each job it serves
// from its consumer's info, besides the advisories.
const pauseRecheck = 10 * time.Second

// pauseVerifyMin spaces the reads a job's paused records ask for: a
// worker that missed a resume reads the consumer's pause again rather than
// hand records back, but not for every record.
const pauseVerifyMin = time.Second

// pauseState is what a worker knows of its job's consumer pause.
type pauseState struct {
	// until is the pause's deadline in unix ns (0: not paused).
	until atomic.Int64
	// mu orders the advisories (each counts in gen) and the reads of the
	// consumer's info: a read that began before an advisory came is stale.
	mu  sync.Mutex
	gen uint64
	// asked: a paused record asked for the pause to be read again, at
	// askedAt (unix ns).
	asked   atomic.Bool
	askedAt atomic.Int64
}

// pausedNow reports whether the job is paused as the worker knows it.
func (jr *jobRunner) pausedNow() bool {
	u := jr.paused.until.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// pauseGen is the count of advisories heard, for readPause.
func (jr *jobRunner) pauseGen() uint64 {
	jr.paused.mu.Lock()
	defer jr.paused.mu.Unlock()
	return jr.paused.gen
}

// heardPause follows an advisory of the job's pause or resume.
func (jr *jobRunner) heardPause(p broker.Pause) {
	jr.paused.mu.Lock()
	jr.paused.gen++
	jr.paused.until.Store(untilOf(p))
	jr.paused.mu.Unlock()
	jr.restate()
}

// sawPause follows the pause a read of the consumer's info found, unless
// an advisory came since the read began (gen: pauseGen before it).
func (jr *jobRunner) sawPause(gen uint64, p broker.Pause) {
	jr.paused.mu.Lock()
	fresh := jr.paused.gen == gen
	if fresh {
		jr.paused.until.Store(untilOf(p))
	}
	jr.paused.mu.Unlock()
	if fresh {
		jr.restate()
	}
}

func untilOf(p broker.Pause) int64 {
	if !p.Paused {
		return 0
	}
	if p.Until.IsZero() || p.Until.After(lastNano) {
		return math.MaxInt64 // broker.PauseForever is past what UnixNano holds
	}
	return p.Until.UnixNano()
}

var lastNano = time.Unix(0, math.MaxInt64)

// readPause reads the job's pause from its consumer's info.
func (jr *jobRunner) readPause(ctx context.Context) {
	gen := jr.pauseGen()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := jr.p.b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(jr.id))
	if err != nil {
		return
	}
	jr.sawPause(gen, broker.PauseOf(c.CachedInfo()))
}

// verifyPause asks, at most once in pauseVerifyMin, for the job's pause to
// be read again (a record found it paused).
func (jr *jobRunner) verifyPause() {
	now := time.Now().UnixNano()
	last := jr.paused.askedAt.Load()
	if now-last < int64(pauseVerifyMin) || !jr.paused.askedAt.CompareAndSwap(last, now) {
		return
	}
	jr.paused.asked.Store(true)
	select {
	case jr.p.pauseKick <- struct{}{}:
	default:
	}
}

// onPause hears the server's advisory of job's pause or resume.
func (p *Pool) onPause(job string, pause broker.Pause) {
	p.mu.Lock()
	jr := p.jobs[job]
	p.mu.Unlock()
	if jr != nil {
		jr.heardPause(pause)
	}
}

// pauseLoop reads the pause of every job the pool serves every
// pauseRecheck, and of those whose records asked (verifyPause) at once.
func (p *Pool) pauseLoop(ctx context.Context) {
	t := time.NewTicker(pauseRecheck)
	defer t.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			all = true
		case <-p.pauseKick:
		}
		p.mu.Lock()
		jobs := slices.Collect(maps.Values(p.jobs))
		p.mu.Unlock()
		for _, jr := range jobs {
			if jr.paused.asked.Swap(false) || all {
				jr.readPause(ctx)
			}
		}
	}
}
