package worker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/expect"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// history is a session's message history (retry.History).
type history struct{ msgs []provider.Message }

func (h *history) Len() int       { return len(h.msgs) }
func (h *history) Truncate(n int) { h.msgs = h.msgs[:n] }

// sessionEnd is how one delivery's session ended: the one value decide
// reads (river's JobSnooze / JobCancel, asynq's SkipRetry).
type sessionEnd struct {
	output any    // the answer, checked (ok only)
	text   string // the last answer's text, when the model answered (kept by return_last)
	model  string
	usage  provider.Usage
	// err is the last failure (nil: ok); attempts are this delivery's calls
	// that failed or whose answer failed the expectation.
	err      *retry.Error
	attempts []retry.Attempt
	calls    int // calls made in this delivery
	repairs  int // repair calls made for the record, earlier deliveries included
	handOver bool
	canceled bool
	// paused: the job was paused before a call: the delivery is handed
	// back as at a stop (worker/pause.go).
	paused bool
	// cutRound is the calls of the last round, cutFirst whether it was the
	// delivery's first: what a delivery cut short leaves (worker/resume.go).
	cutRound int
	cutFirst bool
	// wait is set when a call could not go at all (retry.NotCalled): the
	// provider is in a shared cooldown or its circuit is open for longer
	// than a worker holds a slot.
	wait *waitFor
	// reason, when set, is the session ending the record itself
	// (retry.ReasonMaxCalls, a template or configuration error): it is
	// dead-lettered with it, whatever the retry layers would do.
	reason retry.Reason
	// explain, when set, writes the diagnostic from every attempt of the
	// record (earlier deliveries' included).
	explain func(all []retry.Attempt) string

	// The last answer (worker/outcome_finish.go, worker/cost.go): its finish
	// reason and latency, and what this delivery's answers cost (priced: at
	// a known price).
	finish, finishRaw string
	latency           time.Duration
	cost              float64
	priced            bool
	grows             int // max_tokens doublings (on_truncated: grow)
	params            map[string]any
	overflow          *overflowRun // context overflow rounds (worker/overflow.go)
	// nextFallback is the first of the action's fallbacks not yet passed
	// in this delivery, routes the moves made (worker/fallback.go).
	nextFallback int
	routes       []broker.Route
	// deployment is the provider's deployment the last call went to ("":
	// a provider without deployments).
	deployment string
	// fence, when set, ended the session before a call the delivery may
	// not make (worker/lease.go): another delivery holds the record's
	// call now, or its result was stored meanwhile.
	fence *fenceError
}

// failed ends a session before any call, with a permanent error.
func failed(reason retry.Reason, class retry.Class, typeName, msg string) *sessionEnd {
	return &sessionEnd{err: &retry.Error{Class: class, TypeName: typeName, Message: msg}, reason: reason}
}

// OutputMaxLen is the longest a model's last output may be in a
// diagnostic, in runes; longer ones are cut and end in "…".
const OutputMaxLen = 1000

// templateData is what an action's prompt sees: the record's fields, and
// the outputs of earlier actions by action name. With fields set, only those
// top-level record fields are decoded (nil: all of them).
func templateData(d *delivery, fields []string) (map[string]any, error) {
	rec, err := d.env.Fields(fields)
	if err != nil {
		return nil, err
	}
	if len(d.env.Outputs) == 0 && d.env.RawRecord != nil {
		return rec, nil // a map Fields made for this call: the caller's to change
	}
	data := make(map[string]any, len(rec)+len(d.env.Outputs))
	maps.Copy(data, rec)
	maps.Copy(data, d.env.Outputs)
	return data, nil
}

// render renders the action's prompt for the delivery. It decodes only the
// fields the template names; if the template reads one that analysis did not
// see (a computed index, say), it renders again over the whole record.
func render(a *workflow.Action, d *delivery) (string, error) {
	data, err := templateData(d, a.Fields())
	if err != nil {
		return "", err
	}
	prompt, err := a.Render(data)
	if err == nil || !errors.Is(err, workflow.ErrMissingField) {
		return prompt, err
	}
	if data, err = templateData(d, nil); err != nil {
		return "", err
	}
	return a.Render(data)
}

// runSession runs one delivery of a record's action: the conversation with
// the model, with the session retry layer around every model request and,
// when the action has an expect: block, the repair loop around that.
//
// The repair loop. An output that fails the expectation is not a
// transport error and no retry layer sees it: the invalid assistant turn
// stays in the history, a user message naming what is wrong follows it, and
// the model is asked again, up to expect.repair.max_attempts times in a
// delivery. Each request (the first and every repair) is its own
// retry.Session, so a transport error during a repair is retried as usual
// and its failed assistant turn is popped, while the invalid output and its
// correction, which the repair needs, are kept. A delivery that the exec
// layer redelivers starts a new conversation; attempts, repairs and
// max_calls count across deliveries.
//
// Every call, retried or repair, counts against the action's max_calls:
// each round's retry budget is shrunk to the calls left, and a record that
// reaches the cap while a layer would still have gone on ends with reason
// max_calls.
func (jr *jobRunner) runSession(ctx context.Context, d *delivery) *sessionEnd {
	c, end := jr.converse(d)
	if end != nil {
		return end
	}
	for c.round(ctx) {
	}
	return c.run
}

// conversation is one delivery's session under way: the history with the
// model, and what the rounds have spent.
type conversation struct {
	jr *jobRunner
	d  *delivery
	a  *workflow.Action
	// base is the delivery's action before any fallback (its fallbacks
	// are walked from it).
	base *workflow.Action
	pr   provider.Provider
	chk  *expect.Checker // nil without expect: format json
	h    *history
	run  *sessionEnd
	// prior is the attempts of earlier deliveries (every one a call billed
	// against max_calls: the attempts are numbered after them); repairs is
	// this delivery's; rounds the rounds begun.
	prior, repairs, rounds int
}

// conversationBlock holds what converse makes for a delivery, in the
// delivery (delivery.conv).
type conversationBlock struct {
	c    conversation
	run  sessionEnd
	h    history
	msgs [2]provider.Message
}

// converse readies a delivery's conversation: the prompt rendered, its
// parts, the provider and the checker, the caps checked before any call,
// and a prompt known not to fit moved or cut unpaid. A session that ends
// before any call is returned as end.
func (jr *jobRunner) converse(d *delivery) (c *conversation, end *sessionEnd) {
	a := d.action
	prompt, err := render(a, d)
	if err != nil {
		return nil, renderFailure(err) // worker/bounds.go: bad_input past the bounds
	}
	parts, err := partsFor(a, d) // worker/parts.go: images and documents
	if err != nil {
		return nil, renderFailure(err)
	}
	pr, err := jr.providerAt(d.revision, a.Provider) // worker/revision.go
	if err != nil {
		return nil, failed(retry.ReasonProgrammingError, retry.ClassProgramming, "ProviderError", err.Error())
	}
	chk, err := checkerFor(a.Expect)
	if err != nil {
		// The workflow was validated before dispatch: a schema that does
		// not compile here is a bug, not the model's fault.
		return nil, failed(retry.ReasonProgrammingError, retry.ClassProgramming, "SchemaError", err.Error())
	}
	// The delivery's own (no allocation): the conversation, its end, its
	// history and room for the prompt and the answer.
	b := &d.conv
	*b = conversationBlock{run: sessionEnd{model: a.Model, repairs: repairsOf(d.prior(), false)}}
	run := &b.run
	seedRun(run, d) // worker/ledger.go: what earlier deliveries spent
	if end := jr.beforeCalls(d, run); end != nil {
		return nil, end
	}
	b.msgs[0] = provider.Message{Role: "user", Content: prompt, Parts: parts}
	b.h.msgs = b.msgs[:1]
	b.c = conversation{jr: jr, d: d, a: a, base: a, pr: pr, chk: chk, run: run, prior: len(d.prior()), h: &b.h}
	c = &b.c
	c.pr = jr.estimateOverflow(d, run, c.h, pr) // worker/overflow.go
	return c, nil
}

// round makes one model request under the session retry layer and reads
// what came back; it reports whether another round follows (an overflow
// compacted, a truncated answer asked again larger, a repair).
func (c *conversation) round(ctx context.Context) bool {
	run := c.run
	c.skipOpen() // worker/fallback.go
	s := &retry.Session{
		Policy:        c.policy(),
		Clock:         c.d.clock(c.jr.p),
		History:       c.h,
		Delivery:      c.d.delivery(),
		PriorAttempts: c.prior + run.calls,
	}
	var resp provider.Response
	before, first := run.calls, c.rounds == 0
	c.rounds++
	o := s.Run(ctx, func(ctx context.Context, attempt int) error {
		var err error
		resp, err = c.jr.ask(ctx, c.d, c.pr, c.h, run, c.chk != nil)
		return err
	})
	run.cutRound, run.cutFirst = run.calls-before, first
	run.attempts = append(run.attempts, o.Attempts...)
	if fe := asFence(o.NotCalled); fe != nil {
		run.fence = fe
		if o.Err != nil {
			run.err = o.Err
		}
		return false
	}
	if o.NotCalled != nil && ctx.Err() != nil {
		// Stopping while the store did not answer a fence: handed back.
		run.canceled = true
		return false
	}
	if o.NotCalled != nil {
		if budgetEnded(run, o) || cancelEnded(run, o) || pauseEnded(run, o) { // worker/budget.go, worker/steer.go
			return false
		}
		if c.fallBack(outage, c.lastAttempt(before)) { // worker/fallback.go
			return true
		}
		run.wait = asWait(o.NotCalled, c.a.Provider)
		if o.Err != nil {
			run.err = o.Err
		}
		return false
	}
	run.err, run.handOver, run.canceled = o.Err, o.HandOver, o.Canceled
	if o.Err != nil && o.Err.Class == retry.ClassContextOverflow && !c.deliverySpent() {
		if next := c.jr.compact(c.d, run, c.h, o.Err, c.pr); next != nil { // worker/overflow.go: a round of its own
			c.pr = next
			return true
		}
	}
	if o.Err != nil && !o.Canceled && ctx.Err() == nil && c.fallBack(errTriggers(o.Err), c.lastAttempt(before)) {
		return true
	}
	if o.Err != nil || o.Canceled {
		// A transport error: the retry layers decide, unless the cap is
		// what stopped them.
		if c.capped() && !o.Canceled && stoppedByCap(c.a.Retry, o, c.d.delivery()) {
			run.reason = retry.ReasonMaxCalls
			run.explain = maxCallsDiag(c.a.MaxCalls, c.d.delivery(), "")
		}
		return false
	}
	run.text = answerText(c.a, resp)               // worker/parts.go: with tools, {text, tool_calls}
	if ferr := finishErr(c.a, resp); ferr != nil { // worker/outcome_finish.go
		return c.unfinished(ferr)
	}
	if c.chk == nil {
		run.output = answerOutput(c.a, resp)
		return false
	}
	return c.check(resp)
}

// policy is the action's retry policy for the next round, its attempts cut
// to the calls max_calls leaves, and a delivery cut short by a wait left
// (worker/resume.go).
func (c *conversation) policy() retry.Policy {
	pol := c.a.Retry
	if left := c.callsLeft(); pol.Attempts() > left {
		pol.MaxAttempts = left
	}
	return pol
}

// capped reports whether the record has made all the calls max_calls allows.
func (c *conversation) capped() bool {
	return c.a.MaxCalls > 0 && c.prior+c.run.calls >= c.a.MaxCalls
}

// attempt records a step of the session that was not a transport error.
func (c *conversation) attempt(class retry.Class, msg string) {
	c.run.attempts = append(c.run.attempts, retry.Attempt{N: c.prior + c.run.calls, Delivery: c.d.delivery(),
		Class: class, Error: msg, At: c.jr.p.cfg.Clock.Now()})
}

// explainWith ends the session's diagnosis with the last output.
func (c *conversation) explainWith(final *retry.Error) {
	text, n := c.run.text, c.d.delivery()
	c.run.explain = func(all []retry.Attempt) string {
		return retry.Diagnose(final, all, n) + "; last output: " + clipOutput(text)
	}
}

// unfinished handles an answer the provider did not finish (truncated,
// filtered): with on_truncated: grow and calls left, asked again with a
// larger max_tokens; otherwise the session's error.
func (c *conversation) unfinished(ferr *retry.Error) bool {
	run := c.run
	if ferr.Class == retry.ClassTruncated && c.a.OnTruncated == workflow.OnTruncatedGrow && !c.capped() && !c.deliverySpent() {
		if params, ok := grown(run.paramsFor(c.a), run.grows); ok {
			c.attempt(ferr.Class, ferr.Error()+"; asking again with a larger max_tokens")
			run.params, run.grows = params, run.grows+1
			c.h.msgs = c.h.msgs[:len(c.h.msgs)-1] // ask afresh, without the cut answer
			return true
		}
	}
	run.err = ferr
	c.attempt(ferr.Class, ferr.Error())
	if c.fallBack([]string{string(ferr.Class)}, c.lastAttempt(-1)) { // worker/fallback.go
		return true
	}
	c.explainWith(ferr)
	return false
}

// check holds the answer to the action's expect: block: a valid one is
// the output; an invalid one stays in the history with a correction after
// it and is asked again, while repairs and calls are left.
func (c *conversation) check(resp provider.Response) bool {
	run := c.run
	v, err := c.chk.Check(run.text, resp.FinishReason)
	if err == nil {
		run.output = v
		return false
	}
	viol := asViolation(err, run.text)
	final := schemaViolation(c.a, viol, run.model)
	run.err = final
	c.attempt(retry.ClassSchemaViolation, final.Error())
	if c.repairs >= c.a.Expect.RepairAttempts || c.deliverySpent() {
		c.explainWith(final)
		return false
	}
	if c.capped() {
		run.reason = retry.ReasonMaxCalls
		run.explain = maxCallsDiag(c.a.MaxCalls, c.d.delivery(), run.text)
		return false
	}
	c.h.msgs = append(c.h.msgs, provider.Message{Role: "user", Content: viol.Correction()})
	c.repairs++
	run.repairs++
	return true
}

// beforeCalls ends a session before any call when the record may make
// none: its max_calls spent by earlier deliveries, or the job's max_cost
// reached. It returns nil when the calls may go.
func (jr *jobRunner) beforeCalls(d *delivery, run *sessionEnd) *sessionEnd {
	a := d.action
	if a.MaxCalls > 0 && len(d.prior()) >= a.MaxCalls {
		// A redelivery after a crash gets here (the cap was spent by
		// deliveries that saved their attempts but did not finish), and a
		// batch straggler sent online whose rounds spent it.
		last := d.prior()[len(d.prior())-1]
		run.err = &retry.Error{Class: last.Class, TypeName: "MaxCallsError",
			Message: fmt.Sprintf("max_calls %d spent by earlier deliveries", a.MaxCalls)}
		run.reason = retry.ReasonMaxCalls
		run.explain = maxCallsDiag(a.MaxCalls, d.delivery(), "")
		return run
	}
	if j := jr.current(); j.Status == broker.JobFailed && j.OverBudget() { // worker/budget.go: the job's max_cost
		run.err, run.reason = budgetError(j), retry.ReasonBudget
		return run
	}
	if j := jr.current(); j.Status == broker.JobCancelled {
		run.err, run.reason = cancelError(j), retry.ReasonCancelled
		return run
	}
	if jr.pausedNow() { // worker/pause.go: handed back before any call
		jr.verifyPause()
		run.paused = true
		return run
	}
	return nil
}

// ask makes one model request with the history as it stands and, when it
// succeeds, appends the assistant's turn to it. A streamed answer grows in
// the history as it arrives; if the stream breaks, the session pops it.
func (jr *jobRunner) ask(ctx context.Context, d *delivery, pr provider.Provider, h *history, run *sessionEnd, checked bool) (provider.Response, error) {
	a := d.action
	req := provider.Request{
		Model: a.Model, System: a.System, Messages: h.msgs, Params: run.paramsFor(a), JSON: a.JSON,
		Stream: a.Stream, RecordID: d.env.ID,
	}
	if checked {
		req.JSON, req.Schema = jsonMode(a, h.msgs), a.Expect.Schema
	}
	withTools(a, &req) // worker/parts.go: tools, tool_choice, cache marks
	if req.Stream {
		var partial strings.Builder
		h.msgs = append(h.msgs, provider.Message{Role: "assistant"})
		idx := len(h.msgs) - 1
		req.Messages = h.msgs[:idx]
		req.OnDelta = func(t string) {
			partial.WriteString(t)
			h.msgs[idx].Content = partial.String()
		}
	}
	// The call's worst case is set aside in the job's budget before it
	// goes (worker/budget.go); a call that cannot be is not made.
	res, err := jr.reserveCall(ctx, a, req, false)
	if err != nil {
		return provider.Response{}, &retry.NotCalled{Err: err}
	}
	// The call is recorded in the delivery's claim before it is made, and
	// a delivery paused meanwhile checks it still holds the record's call
	// (worker/lease.go), once it may go.
	target := a.Provider
	if dep, dpr, ok, derr := jr.deployment(a.Provider, run.deployment, d.revision); derr != nil { // worker/deployments.go
		res.settle(0)
		return provider.Response{}, retry.AsError(derr)
	} else if ok {
		target, pr, run.deployment = dep, dpr, dep
	}
	callCtx, span := jr.startCall(ctx, d, run, &req, "chat") // worker/trace.go
	resp, err := jr.call(callCtx, target, pr, req, func() error { return jr.fence(ctx, d, run.calls) })
	if retry.AsNotCalled(err) == nil {
		run.calls++
	}
	if err != nil {
		endCall(span, resp, err, 0, false)
		res.settle(0) // no answer: nothing billed
		return resp, err
	}
	run.usage.Add(resp.Usage)
	run.finish, run.finishRaw, run.latency = resp.FinishReason, resp.FinishReasonRaw, resp.Latency
	spent := run.cost
	jr.spend(a, resp, run, false, res) // worker/cost.go
	endCall(span, resp, nil, run.cost-spent, run.priced)
	if resp.Model != "" {
		run.model = resp.Model
	}
	if req.Stream {
		h.msgs[len(h.msgs)-1].Content = resp.Text
		h.msgs[len(h.msgs)-1].ToolCalls = resp.ToolCalls
	} else {
		h.msgs = append(h.msgs, provider.Message{Role: "assistant", Content: resp.Text, ToolCalls: resp.ToolCalls})
	}
	return resp, nil
}
