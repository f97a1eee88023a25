package worker

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

// AbsorbMax bounds the 429s one session attempt absorbs (waits out in the
// shared limiter and re-issues) before the 429 is handed to the session as
// a failed attempt.
const AbsorbMax = 10

// LimitMetrics is implemented by a Metrics that also wants the state of each
// provider's limiter (adaptive concurrency, circuit, cooldown); the pool
// reports it after every call.
type LimitMetrics interface {
	Limiter(st ratelimit.Status)
}

// call makes one model call: the single place every provider request goes
// through, so shared limits and circuit breaking wrap it.
//
// Before the call it acquires a permit from the provider's limiter (waiting
// for an open circuit, a shared cooldown, a concurrency slot or a slot in the
// rpm/tpm schedule — heartbeats go on meanwhile); after it, it reports the
// outcome. A 429 is absorbed — the limiter waits out the shared cooldown and
// the call is re-issued, without returning the 429 to the session — when the
// limiter is in control of the pace: the provider has limits configured, or
// the action has retry on. An absorbed 429 is recorded as an attempt with
// Absorbed set (results and diagnostics list it) but does not spend one of
// the session's attempts. With retry off and no limits, the 429 fails the
// attempt as before, and still cools every worker down.
func (jr *jobRunner) call(ctx context.Context, providerName string, pr provider.Provider, req provider.Request) (provider.Response, error) {
	lim := jr.limiter(providerName)
	if lim == nil {
		return jr.callOnce(ctx, providerName, pr, req)
	}
	ab := absorbedFrom(ctx)
	n := ab.nextCall()
	est := ratelimit.Estimate(req)
	for absorbed := 0; ; absorbed++ {
		permit, err := lim.Acquire(ctx, est)
		if err != nil {
			return provider.Response{}, retry.AsError(err)
		}
		resp, err := jr.callOnce(ctx, providerName, pr, req)
		permit.Done(resp.Usage, err)
		if lm, ok := jr.p.cfg.Metrics.(LimitMetrics); ok {
			lm.Limiter(lim.Status())
		}
		if err == nil {
			return resp, nil
		}
		e := retry.AsError(err)
		if e.Class != retry.ClassRateLimit || !ab.allows(lim) || absorbed >= AbsorbMax ||
			e.Wait() > lim.WaitMax() || ctx.Err() != nil {
			return resp, e
		}
		lim.Absorbed()
		ab.add(n, e, jr.p.cfg.Clock.Now())
		jr.p.log.Debug().Str("provider", providerName).Str("record", req.RecordID).Dur("wait", e.Wait()).
			Msg("429 absorbed by the shared limiter; re-issuing after the cooldown")
	}
}

// callOnce is one HTTP call, counted and measured.
func (jr *jobRunner) callOnce(ctx context.Context, providerName string, pr provider.Provider, req provider.Request) (provider.Response, error) {
	start := jr.p.cfg.Clock.Now()
	jr.p.calls.Add(1)
	resp, err := pr.Call(ctx, req)
	if err != nil {
		e := retry.AsError(err)
		jr.p.cfg.Metrics.Call(providerName, req.Model, e.Class, jr.p.cfg.Clock.Now().Sub(start), provider.Usage{})
		return provider.Response{}, e
	}
	jr.p.cfg.Metrics.Call(providerName, req.Model, "", jr.p.cfg.Clock.Now().Sub(start), resp.Usage)
	return resp, nil
}

// limiter is the limiter of the job's provider called name, nil without a
// registry or for an unknown provider (the call then fails on its own).
func (jr *jobRunner) limiter(name string) *ratelimit.Limiter {
	reg := jr.p.limits
	if reg == nil {
		return nil
	}
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if l, ok := jr.limiters[name]; ok {
		return l
	}
	cfg, ok := jr.wf.Providers[name]
	if !ok {
		return nil
	}
	cfg.Name = cmp.Or(cfg.Name, name)
	l := reg.For(cfg)
	if jr.limiters == nil {
		jr.limiters = map[string]*ratelimit.Limiter{}
	}
	jr.limiters[name] = l
	return l
}

// circuitOpen reports whether every provider the job calls has an open
// circuit: then the job's work is not pulled until a probe is due. While
// one provider is open and another is not, records are pulled and those of
// the open provider wait in the limiter.
func (jr *jobRunner) circuitOpen() bool {
	if jr.p.limits == nil || len(jr.wf.Actions) == 0 {
		return false
	}
	for _, a := range jr.wf.Actions {
		l := jr.limiter(a.Provider)
		if l == nil || !l.CircuitOpen() {
			return false
		}
	}
	return true
}

// runLimited runs the delivery's session with a log of the 429s that the
// limiter absorbs, and adds them to the outcome's attempts (Absorbed set),
// each numbered as the session attempt it preceded.
func (jr *jobRunner) runLimited(ctx context.Context, d *delivery) *sessionRun {
	ab := &absorbLog{retry: d.action.Retry.Enabled, prior: len(d.prior), delivery: max(d.n, 1)}
	run := jr.runSession(context.WithValue(ctx, absorbKey{}, ab), d)
	if extra := ab.list(); len(extra) > 0 {
		all := append(extra, run.outcome.Attempts...)
		slices.SortStableFunc(all, func(a, b retry.Attempt) int {
			if a.N != b.N {
				return a.N - b.N
			}
			return a.At.Compare(b.At)
		})
		run.outcome.Attempts = all
	}
	return run
}

type absorbKey struct{}

// absorbLog collects the 429s absorbed during one delivery's session.
type absorbLog struct {
	retry    bool // the action's retry is on
	prior    int  // attempts of earlier deliveries
	delivery int

	mu       sync.Mutex
	calls    int
	attempts []retry.Attempt
}

func absorbedFrom(ctx context.Context) *absorbLog {
	ab, _ := ctx.Value(absorbKey{}).(*absorbLog)
	return ab
}

// nextCall numbers a session attempt (0 without a log).
func (ab *absorbLog) nextCall() int {
	if ab == nil {
		return 0
	}
	ab.mu.Lock()
	defer ab.mu.Unlock()
	ab.calls++
	return ab.prior + ab.calls
}

// allows reports whether a 429 may be absorbed: the limiter is in control
// when limits are configured or the action retries.
func (ab *absorbLog) allows(l *ratelimit.Limiter) bool {
	return l.Limited() || (ab != nil && ab.retry)
}

func (ab *absorbLog) add(n int, e *retry.Error, at time.Time) {
	if ab == nil {
		return
	}
	ab.mu.Lock()
	defer ab.mu.Unlock()
	ab.attempts = append(ab.attempts, retry.Attempt{N: n, Delivery: ab.delivery, Class: e.Class, Error: e.Error(), At: at, Absorbed: true})
}

func (ab *absorbLog) list() []retry.Attempt {
	ab.mu.Lock()
	defer ab.mu.Unlock()
	return append([]retry.Attempt(nil), ab.attempts...)
}
