package worker

import (
	"cmp"
	"context"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

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
// outcome. Every call that reached the provider is an attempt, a 429
// included; when the limiter will not let a call go for longer than a
// worker holds a slot, no call is made and the error is a *retry.NotCalled:
// the record waits without spending an attempt.
func (jr *jobRunner) call(ctx context.Context, providerName string, pr provider.Provider, req provider.Request) (provider.Response, error) {
	lim := jr.limiter(providerName)
	if lim == nil {
		return jr.callOnce(ctx, providerName, pr, req)
	}
	permit, err := lim.Acquire(ctx, ratelimit.Estimate(req))
	if err != nil {
		if isWait(err) {
			return provider.Response{}, &retry.NotCalled{Err: err}
		}
		return provider.Response{}, retry.AsError(err)
	}
	resp, err := jr.callOnce(ctx, providerName, pr, req)
	permit.Done(resp.Usage, err)
	if lm, ok := jr.p.cfg.Metrics.(LimitMetrics); ok {
		lm.Limiter(lim.Status())
	}
	if err != nil {
		return resp, retry.AsError(err)
	}
	return resp, nil
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
	cfg, ok := jr.providerConfig(name)
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
