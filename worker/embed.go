package worker

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// Embed actions (kind: embed). Each record still runs its own session, with
// the same retry layers, result and dead letter as a chat action; only the
// HTTP request is shared. A record's attempt hands its input to the
// action's embedBatcher and waits for its vector: the first input of a
// request waits up to embed.max_wait for others, and the request goes once
// it has embed.batch_size. So:
//
//   - a request that fails transiently (a 429, a 503) fails that attempt
//     of each of its records, whose sessions back off and retry, each on
//     its own budget, joining whatever request is being filled then;
//   - a request that fails permanently (an input too long, say) does not
//     condemn its other records: each input is sent again alone, and only
//     the record at fault is dead-lettered. Those records made two calls;
//   - a wait (a shared cooldown, an open circuit) parks every record of the
//     request, as it parks a chat record, spending nothing.
//
// A request goes through jr.call like every model call (shared limits,
// metrics), the limiter seeing one request for the batch.

// embedSplitConcurrency bounds the inputs sent again one by one at once,
// after a request that failed permanently.
const embedSplitConcurrency = 8

// embedBatcher gathers one embed action's inputs into requests.
type embedBatcher struct {
	jr   *jobRunner
	a    *workflow.Action
	rev  int // of the job's workflow: the revision's deployments
	pr   provider.Provider
	e    provider.Embedder
	size int
	wait time.Duration

	mu   sync.Mutex
	open *embedBatch // the request being filled; nil when none
}

// embedBatch is one request's inputs; full is closed when it has size.
type embedBatch struct {
	items []*embedItem
	full  chan struct{}
}

type embedItem struct {
	input, record string
	done          chan embedResult // buffered: the sender never waits
}

// embedResult is what one record's attempt got.
type embedResult struct {
	vector []float32
	usage  provider.Usage // the record's share of its request's
	model  string
	// deployment is the provider's deployment that answered ("": a
	// provider without deployments).
	deployment string
	latency    time.Duration
	calls      int // requests its input was sent in (0: none could go)
	err        error
}

// embedderFor is the batcher of an embed action, made on first use.
func (jr *jobRunner) embedderFor(a *workflow.Action, rev int) (*embedBatcher, error) {
	pr, err := jr.providerAt(rev, a.Provider)
	if err != nil {
		return nil, err
	}
	e, ok := pr.(provider.Embedder)
	if !ok {
		return nil, fmt.Errorf("provider %s (kind %s) has no embeddings API", a.Provider, pr.Kind())
	}
	jr.mu.Lock()
	defer jr.mu.Unlock()
	if b, ok := jr.embeds[a]; ok {
		return b, nil
	}
	if jr.embeds == nil {
		jr.embeds = map[*workflow.Action]*embedBatcher{}
	}
	b := &embedBatcher{jr: jr, a: a, rev: rev, pr: pr, e: e, size: max(a.Embed.BatchSize, 1),
		wait: cmp.Or(a.Embed.MaxWait, workflow.EmbedMaxWaitDefault)}
	jr.embeds[a] = b
	return b, nil
}

// do embeds one record's input, in a request shared with others'.
func (b *embedBatcher) do(ctx context.Context, input, record string) embedResult {
	it := &embedItem{input: input, record: record, done: make(chan embedResult, 1)}
	b.mu.Lock()
	bt := b.open
	leader := bt == nil
	if leader {
		bt = &embedBatch{full: make(chan struct{})}
		b.open = bt
	}
	bt.items = append(bt.items, it)
	if len(bt.items) >= b.size {
		b.open = nil
		close(bt.full)
	}
	b.mu.Unlock()
	if leader {
		// The first input's slot sends the request: no goroutine of its own.
		t := time.NewTimer(b.wait)
		select {
		case <-bt.full:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		b.mu.Lock()
		if b.open == bt {
			b.open = nil
		}
		items := bt.items
		b.mu.Unlock()
		b.send(ctx, items)
	}
	select {
	case r := <-it.done:
		return r
	case <-ctx.Done():
		return embedResult{err: &retry.Error{Class: retry.ClassNetwork, TypeName: "APIConnectionError",
			Message: ctx.Err().Error(), Provider: b.a.Provider, Model: b.a.Model, Err: ctx.Err()}}
	}
}

// send makes the request of items and gives each its result.
func (b *embedBatcher) send(ctx context.Context, items []*embedItem) {
	resp, dep, err := b.request(ctx, items)
	if err != nil && len(items) > 1 && retry.AsNotCalled(err) == nil && retry.AsError(err).Class.Permanent() {
		// One input may be at fault: each alone finds which.
		sem := make(chan struct{}, embedSplitConcurrency)
		var wg sync.WaitGroup
		for _, it := range items {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				resp, dep, err := b.request(ctx, []*embedItem{it})
				r := b.results(resp, dep, err, 1)[0]
				r.calls++ // the shared request, then its own
				it.done <- r
			}()
		}
		wg.Wait()
		return
	}
	for i, r := range b.results(resp, dep, err, len(items)) {
		if err == nil {
			r.usage = provider.Usage{InputTokens: share(resp.Usage.InputTokens, items, i)}
		}
		items[i].done <- r
	}
}

// results are the items' results of one request's outcome.
func (b *embedBatcher) results(resp provider.EmbedResponse, dep string, err error, n int) []embedResult {
	calls := 1
	if retry.AsNotCalled(err) != nil {
		calls = 0
	}
	out := make([]embedResult, n)
	for i := range out {
		out[i] = embedResult{err: err, calls: calls, model: cmp.Or(resp.Model, b.a.Model), deployment: dep,
			latency: resp.Latency, usage: resp.Usage}
		if err == nil {
			out[i].vector = resp.Vectors[i]
		}
	}
	return out
}

// request is one embeddings call through jr.call, the one door of every
// model call: the provider's shared limits and metrics see it. A provider
// with deployments spreads its requests as it does chat calls; dep names
// the one this went to.
func (b *embedBatcher) request(ctx context.Context, items []*embedItem) (_ provider.EmbedResponse, dep string, _ error) {
	target, pr, e := b.a.Provider, b.pr, b.e
	if d, dpr, ok, err := b.jr.deployment(b.a.Provider, "", b.rev); err != nil { // worker/deployments.go
		return provider.EmbedResponse{}, "", retry.AsError(err)
	} else if ok {
		de, isEmbedder := dpr.(provider.Embedder)
		if !isEmbedder {
			return provider.EmbedResponse{}, "", &retry.Error{Class: retry.ClassProgramming, TypeName: "ProviderError",
				Message: fmt.Sprintf("deployment %s (kind %s) has no embeddings API", d, dpr.Kind()), Provider: b.a.Provider}
		}
		target, pr, e, dep = d, dpr, de, d
	}
	req := provider.EmbedRequest{Model: b.a.Model, Params: b.a.Params}
	msgs := make([]provider.Message, len(items))
	for i, it := range items {
		req.Inputs = append(req.Inputs, it.input)
		req.RecordIDs = append(req.RecordIDs, it.record)
		msgs[i] = provider.Message{Role: "user", Content: it.input}
	}
	call := &embedCall{Provider: pr, e: e, req: req}
	// What the limiter estimates: the inputs, and one token out.
	est := provider.Request{Model: b.a.Model, Messages: msgs, Params: map[string]any{"max_tokens": 1}, RecordID: items[0].record}
	// The request's worst case is set aside in the job's budget before it
	// goes, and settled once for all its records (worker/budget.go); each
	// record's result carries its share (runEmbed).
	res, err := b.jr.reserveCall(ctx, b.a, est, false)
	if err != nil {
		return provider.EmbedResponse{}, dep, &retry.NotCalled{Err: err}
	}
	if _, err := b.jr.call(ctx, target, call, est, nil); err != nil {
		res.settle(0)
		return provider.EmbedResponse{}, dep, err
	}
	var c float64
	if p := costOf(b.a, call.out.Usage, false); p != nil {
		c = *p
	}
	if res == nil {
		b.jr.budget().settle(0, c)
	} else {
		res.settle(c)
	}
	return call.out, dep, nil
}

// embedCall is an embeddings request in the shape of a model call, for
// jr.call: its answer carries the request's usage, its vectors stay here.
type embedCall struct {
	provider.Provider
	e   provider.Embedder
	req provider.EmbedRequest
	out provider.EmbedResponse
}

func (c *embedCall) Call(ctx context.Context, _ provider.Request) (provider.Response, error) {
	out, err := c.e.Embed(ctx, c.req)
	if err != nil {
		return provider.Response{}, err
	}
	c.out = out
	return provider.Response{Usage: out.Usage, Model: out.Model, Latency: out.Latency}, nil
}

// share is item i's part of a request's tokens, in proportion to the length
// of its input (the last takes what rounding leaves, so that they add up).
func share(total int, items []*embedItem, i int) int {
	chars := 0
	for _, it := range items {
		chars += len(it.input) + 1
	}
	before := 0
	for _, it := range items[:i] {
		before += (len(it.input) + 1) * total / chars
	}
	if i == len(items)-1 {
		return total - before
	}
	return (len(items[i].input) + 1) * total / chars
}

// runEmbed is runSession for an embed action: one round of the session
// retry layer around the record's share of a request, its output the
// vector (vectorOutput).
func (jr *jobRunner) runEmbed(ctx context.Context, d *delivery) *sessionEnd {
	a := d.action
	input, err := render(a, d)
	if err != nil {
		return renderFailure(err)
	}
	b, err := jr.embedderFor(a, d.revision)
	if err != nil {
		return failed(retry.ReasonProgrammingError, retry.ClassProgramming, "ProviderError", err.Error())
	}
	run := &sessionEnd{model: a.Model}
	seedRun(run, d) // worker/ledger.go: what earlier deliveries spent
	if end := jr.beforeCalls(d, run); end != nil {
		return end
	}
	prior := len(d.prior())
	pol := a.Retry
	if left := a.MaxCalls - prior; a.MaxCalls > 0 && pol.Attempts() > left {
		pol.MaxAttempts = left
	}
	s := &retry.Session{Policy: pol, Clock: d.clock(jr.p), History: &history{}, Delivery: d.delivery(), PriorAttempts: prior}
	var res embedResult
	o := s.Run(ctx, func(ctx context.Context, attempt int) error {
		res = b.do(ctx, input, d.env.ID)
		run.calls += res.calls
		run.deployment = cmp.Or(res.deployment, run.deployment)
		return res.err
	})
	run.attempts = o.Attempts
	if o.NotCalled != nil {
		if budgetEnded(run, o) || cancelEnded(run, o) || pauseEnded(run, o) { // worker/budget.go, worker/steer.go
			return run
		}
		run.wait = asWait(o.NotCalled, a.Provider)
		if o.Err != nil {
			run.err = o.Err
		}
		return run
	}
	run.err, run.handOver, run.canceled = o.Err, o.HandOver, o.Canceled
	if o.Err != nil || o.Canceled {
		if a.MaxCalls > 0 && prior+run.calls >= a.MaxCalls && !o.Canceled && stoppedByCap(a.Retry, o, d.delivery()) {
			run.reason = retry.ReasonMaxCalls
			run.explain = maxCallsDiag(a.MaxCalls, d.delivery(), "")
		}
		return run
	}
	run.output = vectorOutput(a, res.vector)
	run.model, run.latency = cmp.Or(res.model, a.Model), res.latency
	run.usage.Add(res.usage)
	jr.charge(a, res.usage, run, false) // worker/cost.go: the record's share; its request settled the budget
	return run
}

// vectorOutput is a vector as an embed action's output: a list of numbers
// (float32, as short as they round-trip), or base64 of little-endian float32.
func vectorOutput(a *workflow.Action, v []float32) any {
	if a.Embed.Format != workflow.EmbedFormatBase64 {
		return v
	}
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return base64.StdEncoding.EncodeToString(b)
}
