package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// hasBatchActions reports whether any action of wf runs in batch mode.
func hasBatchActions(wf *workflow.Workflow) bool {
	for _, a := range wf.Actions {
		if a.Mode == workflow.ModeBatch {
			return true
		}
	}
	return false
}

// startBatcher starts the job's batcher when the workflow has batch
// actions: at once, so that batches this process left behind are resumed
// even when no work message arrives any more.
func (jr *jobRunner) startBatcher(ctx context.Context) {
	if !hasBatchActions(jr.wf) {
		return
	}
	p := jr.p
	bt := batch.New(batch.Config{
		Broker: p.b, Job: jr.id, Workflow: jr.wf, Owner: p.id, Handler: batchHandler{jr}, Deployment: jr.batchDeployment,
		Log: p.log, Heartbeat: p.cfg.Heartbeat,
	})
	if err := bt.Start(ctx); err != nil {
		p.log.Error().Str("job", jr.id).Err(err).Msg("batcher not started; batch-mode records wait")
		return
	}
	jr.mu.Lock()
	jr.batcher = bt
	jr.mu.Unlock()
}

func (jr *jobRunner) stopBatcher() {
	jr.mu.Lock()
	bt := jr.batcher
	jr.mu.Unlock()
	if bt != nil {
		bt.Stop()
	}
}

// enqueueBatch hands a batch-mode delivery to the job's batcher, which acks
// it once its batch is recorded durably (and keeps it alive until then).
func (jr *jobRunner) enqueueBatch(ctx context.Context, d *delivery, release func()) {
	jr.mu.Lock()
	bt := jr.batcher
	jr.mu.Unlock()
	later := func() {
		// Back in a second, spending nothing of the record's budget.
		jr.conclude(ctx, d, verdict{kind: verdictBatchLater}, release)
	}
	if bt == nil {
		later()
		return
	}
	req, rerr := batchRequest(d)
	if rerr != nil {
		jr.conclude(ctx, d, verdict{kind: verdictUnbatchable, final: rerr}, release)
		return
	}
	// The record's worst case at the batch rates is set aside until its
	// batch answers (worker/budget.go).
	res, err := jr.reserveCall(ctx, d.action, req, true)
	if err != nil {
		if s := asBudgetStop(err); s != nil {
			jr.conclude(ctx, d, verdict{kind: verdictOverBudget, final: s.err}, release)
			return
		}
		later() // stopping
		return
	}
	key := batchKey(d.action.Name, d.env.ID, d.replays)
	if res != nil {
		jr.budget().hold(key, res)
	}
	var embed *provider.EmbedRequest
	if d.action.IsEmbed() { // worker/embed.go: one input per line, OpenAI Batch's /v1/embeddings
		embed = &provider.EmbedRequest{Model: req.Model, Inputs: []string{req.Messages[0].Content}, Params: req.Params, RecordIDs: []string{d.env.ID}}
	}
	jr.p.beats.release(d.msg) // the batcher keeps it alive now
	err = bt.Add(ctx, batch.Pending{Msg: d.msg, Action: d.action, Request: req, Embed: embed,
		Item: batch.Item{ID: d.env.ID, Data: d.msg.Data(), Replays: d.replays, Deliveries: d.n}})
	if err != nil {
		jr.budget().release(key).settle(0) // not in a batch: nothing will be billed
	}
	switch {
	case errors.Is(err, batch.ErrNoClient):
		jr.p.beats.hold(d.msg, jr.heartbeatEvery(), time.Now())
		jr.conclude(ctx, d, verdict{kind: verdictUnbatchable, final: &retry.Error{Class: retry.ClassProgramming, TypeName: "BatchModeError",
			Message: err.Error(), Provider: d.action.Provider, Model: d.action.Model}}, release)
	case err != nil:
		jr.p.log.Warn().Str("job", d.job).Str("record", d.env.ID).Err(err).Msg("batcher refused the record; handing it back")
		jr.p.beats.hold(d.msg, jr.heartbeatEvery(), time.Now())
		later()
	}
}

// batchRequest is the provider request of a delivery, built as runSession
// builds an online call's first attempt.
func batchRequest(d *delivery) (provider.Request, *retry.Error) {
	a := d.action
	prompt, err := render(a, d)
	if err != nil {
		return provider.Request{}, &retry.Error{Class: retry.ClassProgramming, TypeName: "TemplateError", Message: err.Error()}
	}
	parts, err := partsFor(a, d) // worker/parts.go
	if err != nil {
		return provider.Request{}, retry.AsError(err)
	}
	req := provider.Request{Model: a.Model, System: a.System, Messages: []provider.Message{{Role: "user", Content: prompt, Parts: parts}},
		Params: a.Params, JSON: a.JSON, RecordID: d.env.ID}
	if a.Expect != nil {
		req.JSON, req.Schema = true, a.Expect.Schema
	}
	withTools(a, &req)
	return req, nil
}

// batchHandler writes a batch's outcomes as the online path does.
type batchHandler struct{ jr *jobRunner }

// delivery rebuilds what handle would have had for the item (no message).
func (h batchHandler) delivery(a *workflow.Action, it *batch.Item) (*delivery, error) {
	var env broker.Envelope
	if err := json.Unmarshal(it.Data, &env); err != nil {
		return nil, fmt.Errorf("batch item %s: %w", it.ID, err)
	}
	_, idx := h.jr.wf.Action(a.Name)
	d := &delivery{job: h.jr.id, action: a, index: idx, env: &env, replays: it.Replays, n: max(it.Deliveries, 1)}
	if idx+1 < len(h.jr.wf.Actions) {
		d.next = h.jr.wf.Actions[idx+1].Name
	}
	return d, nil
}

func (h batchHandler) Succeed(ctx context.Context, a *workflow.Action, it *batch.Item, resp provider.Response) error {
	jr := h.jr
	d, err := h.delivery(a, it)
	if err != nil {
		return err
	}
	// The answer is billed whatever becomes of it: a cut or failed answer
	// costs what a good one does (worker/cost.go, at the batch rates).
	bill(jr, a, d, resp)
	if a.IsEmbed() {
		return h.succeed(ctx, a, it, d, resp, vectorOutput(a, resp.Embedding)) // worker/embed.go
	}
	if ferr := finishErr(a, resp); ferr != nil { // worker/outcome_finish.go
		// A cut or filtered answer (a refusal) was paid for (billed above):
		// its text is kept in the failed result as online.
		text := answerText(a, resp)
		reason := a.Retry.Decide(retry.Outcome{Err: ferr}, d.n).Reason
		return h.fail(ctx, a, it, d, ferr, reason, retry.Diagnose(ferr, nil, d.n)+"; last output: "+clipOutput(text), text)
	}
	output := answerOutput(a, resp) // worker/parts.go: the text, or {text, tool_calls}
	if a.Expect != nil {
		// The batch's answer meets the expectation as an online one must.
		// A repair is a conversation, which a batch cannot hold: an answer
		// that fails goes online, where the repair loop runs (the batch's
		// answer is dropped; the online session asks afresh). With no
		// repairs allowed it fails as an exhausted online repair does.
		chk, err := checkerFor(a.Expect)
		if err != nil {
			e := &retry.Error{Class: retry.ClassProgramming, TypeName: "SchemaError", Message: err.Error()}
			return h.fail(ctx, a, it, d, e, retry.ReasonProgrammingError, retry.Diagnose(e, nil, d.n), "")
		}
		text := answerText(a, resp)
		v, err := chk.Check(text, resp.FinishReason)
		if err != nil {
			viol := asViolation(err, text)
			if a.Expect.RepairAttempts > 0 {
				jr.p.log.Debug().Str("job", d.job).Str("action", a.Name).Str("record", d.env.ID).Str("violation", viol.Error()).
					Msg("batch answer failed the expectation; repairing online")
				// The batch's answer was a call: it counts against max_calls,
				// and what it cost goes with the record.
				it.FailRound(retry.ClassSchemaViolation, viol.Error())
				return h.online(ctx, a, it, d)
			}
			final := schemaViolation(a, viol, cmp.Or(resp.Model, a.Model))
			return h.fail(ctx, a, it, d, final, retry.ReasonSchemaViolation,
				retry.Diagnose(final, nil, d.n)+"; last output: "+clipOutput(text), "")
		}
		output = v
	}
	return h.succeed(ctx, a, it, d, resp, output)
}

// bill bills a batch's answer at the batch rates (worker/cost.go).
func bill(jr *jobRunner, a *workflow.Action, d *delivery, resp provider.Response) {
	d.run = &sessionEnd{usage: resp.Usage, finish: resp.FinishReason, finishRaw: resp.FinishReasonRaw}
	jr.spend(a, resp, d.run, true, jr.budget().release(batchKey(a.Name, d.env.ID, d.replays)))
}

// succeed writes the record's ok result and hands it to the next action.
func (h batchHandler) succeed(ctx context.Context, a *workflow.Action, it *batch.Item, d *delivery, resp provider.Response, output any) error {
	jr := h.jr
	res := &broker.Result{
		ID: d.env.ID, Status: broker.StatusOK, Output: output, Action: a.Name, Job: d.job,
		Outputs: d.env.Outputs, Provider: a.Provider, Model: cmp.Or(resp.Model, a.Model), Deployment: it.Deployment,
		Replays: d.replays, Recovery: recovery(it.Attempts, max(it.Round, 1), d.n, 0), Finished: time.Now().UTC(),
	}
	answered(res, d, d.run, jr.wf.Carry) // worker/cost.go: this action's usage, cost, finish
	account(res, d, it.Attempts, res.Finished)
	if d.next != "" {
		f, err := brokerStore{jr.p}.forward(d, output)
		if err == nil {
			err = f.wait(ctx)
		}
		if err != nil {
			return err
		}
	}
	if err := jr.p.b.WriteResult(ctx, res); err != nil {
		return err
	}
	jr.p.cfg.Metrics.Record(d.job, a.Name, broker.StatusOK, "")
	return nil
}

// Fail dead-letters a record its batch did not answer (an error, or a
// batch that ended without it): nothing was billed for it.
func (h batchHandler) Fail(ctx context.Context, a *workflow.Action, it *batch.Item, final *retry.Error, reason retry.Reason, diag string) error {
	d, err := h.delivery(a, it)
	if err != nil {
		return err
	}
	h.jr.budget().release(batchKey(a.Name, d.env.ID, d.replays)).settle(0)
	return h.fail(ctx, a, it, d, final, reason, diag, "")
}

// fail dead-letters d's record and writes its failed result, with what
// its answer cost when it had one (d.run); an answer the batch returned
// (text) stays in the result as its output.
func (h batchHandler) fail(ctx context.Context, a *workflow.Action, it *batch.Item, d *delivery, final *retry.Error, reason retry.Reason, diag, text string) error {
	jr := h.jr
	e := &deadletter.Entry{
		Job: d.job, Record: d.env.ID, Action: a.Name, Reason: reason, Class: final.Class, Error: diag,
		Attempts: max(it.Round, 1), Deliveries: d.n, Provider: a.Provider, Model: cmp.Or(final.Model, a.Model),
		Replays: d.replays, Data: it.Data, FailedAt: time.Now().UTC(),
	}
	if err := deadletter.Publish(ctx, jr.p.b, e); err != nil {
		return err
	}
	res := &broker.Result{
		ID: d.env.ID, Status: failedStatus(reason), Reason: string(reason), Action: a.Name, Job: d.job,
		Error:   &broker.ResultError{Class: string(final.Class), Retryable: retryable(reason, final.Class), Message: diag},
		Outputs: d.env.Outputs, Provider: a.Provider, Model: e.Model, Deployment: it.Deployment, Replays: d.replays,
		Recovery: recovery(it.Attempts, max(it.Round, 1), d.n, 0), Finished: e.FailedAt,
	}
	run := d.run
	if run == nil {
		run = d.priorRun() // worker/ledger.go
	}
	answered(res, d, run, jr.wf.Carry) // worker/cost.go: usage and cost of a billed answer
	if text != "" {
		res.Output = text
	}
	account(res, d, it.Attempts, res.Finished)
	if err := jr.p.b.WriteResult(ctx, res); err != nil {
		return err
	}
	jr.p.cfg.Metrics.Record(d.job, a.Name, string(reason), final.Class)
	jr.p.log.Info().Str("job", d.job).Str("action", a.Name).Str("record", d.env.ID).Str("reason", string(reason)).Msg(logDiag(diag))
	if reason != retry.ReasonJobFailed && reason != retry.ReasonCancelled && exhaustedPolicy(a, reason, final) == retry.Raise {
		if err := (brokerStore{jr.p}).failJob(ctx, d, diag); err != nil {
			jr.p.log.Error().Err(err).Str("job", d.job).Msg("could not mark the job failed")
		}
	}
	return nil
}

// Online republishes the record to its action with Jetpool-Mode: online,
// under its own Nats-Msg-Id (the original id would be deduplicated away).
func (h batchHandler) Online(ctx context.Context, a *workflow.Action, it *batch.Item) error {
	d, err := h.delivery(a, it)
	if err != nil {
		return err
	}
	h.jr.budget().release(batchKey(a.Name, d.env.ID, d.replays)).settle(0)
	return h.online(ctx, a, it, d)
}

// online sends d's record online, with what its batch answer cost when it
// had one (d.run).
func (h batchHandler) online(ctx context.Context, a *workflow.Action, it *batch.Item, d *delivery) error {
	jr := h.jr
	m, err := broker.NewWorkMsg(d.job, a.Name, d.env, d.replays)
	if err != nil {
		return err
	}
	traceOn(d, m.Header)
	m.Data = it.Data
	// The rounds the record spent in batches are its first calls: the online
	// session counts them against max_calls, numbers its attempts after
	// them and lists them in a diagnostic.
	if len(it.Attempts) > 0 || d.run != nil {
		st := &broker.RecordState{Replays: d.replays, Attempts: it.Attempts}
		keepSpend(st, d.run) // worker/ledger.go
		if err := jr.p.b.SaveState(ctx, d.job, a.Name, d.env.ID, st); err != nil {
			return err
		}
	}
	m.Header.Set(broker.HeaderMsgID, broker.WorkMsgID(d.job, a.Name, d.env.ID, d.replays)+".online")
	m.Header.Set(broker.HeaderMode, workflow.ModeOnline)
	if _, err := jr.p.b.JS.PublishMsg(ctx, m); err != nil {
		return err
	}
	jr.p.log.Debug().Str("job", d.job).Str("action", a.Name).Str("record", d.env.ID).Msg("batch straggler sent online")
	return nil
}
