package worker

import (
	"cmp"
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/tracing"
	"github.com/jetpool/jetpool/workflow"
)

// LimitMetrics is implemented by a Metrics that also wants the state of each
// provider's limiter (adaptive concurrency, circuit, cooldown); the pool
// reports it after every call.
type LimitMetrics interface {
	Limiter(st ratelimit.Status)
}

// DeploymentMetrics is implemented by a Metrics that labels a call to one
// of a provider's deployments with both names: the pool calls CallAt
// instead of Call for those (provider.Deployment).
type DeploymentMetrics interface {
	CallAt(provider, deployment, model string, class retry.Class, d time.Duration, usage provider.Usage)
}

// call makes one model call: the single place every provider request goes
// through, so shared limits and circuit breaking wrap it. It makes exactly
// one HTTP request per invocation, and every request that reached the
// provider, a 429 included, is an attempt of the record: the session layer
// retries a 429 like any transient error, never sooner than its
// Retry-After.
//
// Before the call it acquires a permit from the provider's limiter (waiting
// for an open circuit, a shared cooldown, a concurrency slot or a slot in the
// rpm/tpm schedule, at most the registry's hold limit — heartbeats go on
// meanwhile); after it, the limiter sees the whole response. Every call that
// reached the provider is an attempt, a 429 included. A wait longer than the
// hold limit is the limiter's *ratelimit.WaitError, returned as a
// *retry.NotCalled: no request was made, so it is no attempt, and the record
// is parked until WaitError.Until (worker/wait.go).
//
// gate, when set, runs once the call may go, just before it (after any
// wait for the limiter): a *retry.NotCalled from it stops the call
// (worker/lease.go fence).
func (jr *jobRunner) call(ctx context.Context, providerName string, pr provider.Provider, req provider.Request, gate func() error) (provider.Response, error) {
	lim := jr.limiter(providerName)
	if lim == nil {
		if gate != nil {
			if err := gate(); err != nil {
				return provider.Response{}, err
			}
		}
		// Last, with nothing that can wait between it and the call
		// (worker/steer.go): a cancelled job calls no more.
		made, err := jr.enterCall()
		if err != nil {
			return provider.Response{}, err
		}
		return jr.callOnce(ctx, providerName, "", pr, req, made)
	}
	var span trace.Span
	var asked time.Time
	if tracing.Enabled() {
		span, asked = trace.SpanFromContext(ctx), jr.p.cfg.Clock.Now()
	}
	permit, err := lim.Acquire(ctx, ratelimit.Estimate(req))
	if span != nil {
		tracing.Wait(span, jr.p.cfg.Clock.Now().Sub(asked)) // the call's span shows its wait for the limiter
	}
	if err != nil {
		if errors.Is(err, ratelimit.ErrWait) {
			return provider.Response{}, &retry.NotCalled{Err: err}
		}
		return provider.Response{}, retry.AsError(err)
	}
	if gate != nil {
		if err := gate(); err != nil {
			permit.Done(provider.Response{}, context.Canceled) // no call: no signal to the limiter
			return provider.Response{}, err
		}
	}
	made, err := jr.enterCall()
	if err != nil {
		permit.Done(provider.Response{}, context.Canceled)
		return provider.Response{}, err
	}
	resp, err := jr.callOnce(ctx, providerName, lim.Of(), pr, req, made)
	permit.Done(resp, err)
	if lm, ok := jr.p.cfg.Metrics.(LimitMetrics); ok {
		lm.Limiter(lim.Status())
	}
	if err != nil {
		return resp, retry.AsError(err)
	}
	return resp, nil
}

// callOnce is one HTTP call, counted and measured; made runs once it is
// counted, before the request goes. of is the provider whose deployment
// providerName is ("": none).
func (jr *jobRunner) callOnce(ctx context.Context, providerName, of string, pr provider.Provider, req provider.Request, made func()) (provider.Response, error) {
	start := jr.p.cfg.Clock.Now()
	jr.p.calls.Add(1)
	made()
	resp, err := pr.Call(ctx, req)
	var class retry.Class
	if err != nil {
		e := retry.AsError(err)
		err, class, resp = e, e.Class, provider.Response{}
	}
	d := jr.p.cfg.Clock.Now().Sub(start)
	if dm, ok := jr.p.cfg.Metrics.(DeploymentMetrics); ok && of != "" {
		dm.CallAt(of, providerName, req.Model, class, d, resp.Usage)
	} else {
		jr.p.cfg.Metrics.Call(providerName, req.Model, class, d, resp.Usage)
	}
	return resp, err
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
// circuit whose probe is due within the action's max_wait: then the job's
// work is not pulled until a probe is due (until: the first provider's).
// While one provider is open and another is not, records are pulled and
// those of the open provider wait in the limiter, or move to a fallback
// that takes outages (worker/fallback.go). A circuit open past max_wait
// does not stop the pulls either: the records waiting for it (a retry
// or a park nak'd before it opened, a record not yet delivered) must come
// back to be ended for max_wait (decideWait), not wait at the server
// until the probe.
func (jr *jobRunner) circuitOpen() (until time.Time, open bool) {
	if jr.p.limits == nil || len(jr.wf.Actions) == 0 {
		return time.Time{}, false
	}
	now := jr.p.cfg.Clock.Now()
	for _, a := range jr.wf.Actions {
		targets := []string{a.Provider}
		for _, f := range a.Fallbacks {
			if f.Takes(workflow.FallbackOutage) {
				targets = append(targets, f.Provider)
			}
		}
		var first time.Time // when the action's first target takes calls again
		for _, name := range targets {
			u, open := jr.circuitOpenUntil(1, name)
			if !open {
				return time.Time{}, false
			}
			if first.IsZero() || u.Before(first) {
				first = u
			}
		}
		if first.Sub(now) > a.Retry.WaitLimit() {
			return time.Time{}, false
		}
		if until.IsZero() || first.Before(until) {
			until = first
		}
	}
	return until, true
}

// circuitOpenUntil reports whether the provider called name (as revision
// rev defines it) takes no calls for an open circuit, and until when: for
// a provider with deployments, whether every deployment's circuit is open
// (until: the first probe).
func (jr *jobRunner) circuitOpenUntil(rev int, name string) (until time.Time, open bool) {
	for _, n := range jr.deploymentNames(rev, name) { // worker/deployments.go
		l := jr.limiter(n)
		if l == nil {
			return time.Time{}, false
		}
		u, open := l.CircuitOpenUntil()
		if !open {
			return time.Time{}, false
		}
		if until.IsZero() || u.Before(until) {
			until = u
		}
	}
	return until, true
}

// Limits is the pool's limiter registry (nil before Start): the run
// summary and tests read its limiters' status.
func (p *Pool) Limits() *ratelimit.Registry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limits
}
