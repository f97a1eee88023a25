package worker

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/tracing"
)

// Tracing (package tracing, docs/tracing.md): a delivery's span starts in
// handle and ends here with its outcome; each model call is a span under
// it (ask). All of it is skipped while tracing is off: d.span is nil then.

// outcomeNames are the outcomes as a span's jetpool.outcome says them.
var outcomeNames = [...]string{"stored", "settled", "retry", "park", "hand_back", "dead_letter", "abandon", "yield"}

// endSpan ends d's delivery span with its outcome.
func endSpan(d *delivery, o outcome) {
	span := d.span
	if !span.IsRecording() {
		return
	}
	to := tracing.Outcome{Kind: outcomeNames[o.kind], Delivery: d.delivery()}
	if run := d.run; run != nil {
		to.Calls, to.Cost, to.Priced = run.calls, run.cost, run.priced
		if run.err != nil && o.kind != outcomeDone && o.kind != outcomeSettled {
			to.ErrType, to.ErrClass = run.err.TypeName, string(run.err.Class)
		}
		if run.wait != nil && o.kind == outcomePark {
			to.WaitUntil = run.wait.until
		}
	}
	if o.entry != nil {
		to.Reason = string(o.entry.Reason)
		if to.ErrClass == "" {
			to.ErrClass = string(o.entry.Class)
		}
	}
	if o.kind == outcomePark && to.WaitUntil.IsZero() && o.delay > 0 {
		to.WaitUntil = time.Now().Add(o.delay)
	}
	tracing.EndDelivery(span, to)
}

// traceOn writes into h, a message d sends on, the context of d's span,
// or, while this worker does not trace, the one d's message came with.
func traceOn(d *delivery, h nats.Header) {
	if d.span != nil {
		tracing.InjectSpan(d.span, h)
		return
	}
	if d.msg != nil {
		tracing.CopyTrace(d.msg.Headers(), h)
	}
}

// startCall starts the span of one model call of d's session.
func (jr *jobRunner) startCall(ctx context.Context, d *delivery, run *sessionEnd, req *provider.Request, op string) (context.Context, trace.Span) {
	if d.span == nil {
		return ctx, nil
	}
	c := tracing.Call{
		Record:    tracing.Record{Job: d.job, Action: d.action.Name, ID: d.env.ID},
		Operation: op, Provider: d.action.Provider, Kind: jr.providerKind(d.action.Provider), Model: req.Model,
		Attempt: len(d.prior()) + run.calls + 1, Repair: d.conv.c.repairs,
	}
	if run.overflow != nil {
		c.Overflow = run.overflow.rounds
	}
	ctx, span := tracing.StartCall(trace.ContextWithSpan(ctx, d.span), c)
	if tracing.Content() {
		msgs := make([]tracing.Message, len(req.Messages))
		for i, m := range req.Messages {
			msgs[i] = tracing.Message{Role: m.Role, Content: m.Content}
		}
		tracing.SetInput(span, req.System, msgs)
	}
	return ctx, span
}

// endCall ends a model call's span with its answer or error; cost is what
// the answer cost (priced: at a known price).
func endCall(span trace.Span, resp provider.Response, err error, cost float64, priced bool) {
	if span == nil {
		return
	}
	if err != nil {
		if nc := retry.AsNotCalled(err); nc != nil {
			// No request was made: a wait or a fence, not a call.
			span.AddEvent("not_called", trace.WithAttributes(tracing.KeyReason.String(nc.Error())))
			tracing.EndCall(span, tracing.Answer{}, "NotCalled", "not_called")
			return
		}
		e := retry.AsError(err)
		tracing.EndCall(span, tracing.Answer{}, e.TypeName, string(e.Class))
		return
	}
	tracing.EndCall(span, tracing.Answer{Model: resp.Model, FinishReason: finishReason(resp),
		Input: resp.Usage.InputTokens, Output: resp.Usage.OutputTokens, Cost: cost, Priced: priced, Text: resp.Text}, "", "")
}

// finishReason is the provider's own finish reason, as the conventions
// want it, else jetpool's.
func finishReason(resp provider.Response) string {
	if resp.FinishReasonRaw != "" {
		return strings.ToLower(resp.FinishReasonRaw)
	}
	return resp.FinishReason
}

// providerKind is the adapter kind of the job's provider called name.
func (jr *jobRunner) providerKind(name string) string {
	if cfg, ok := jr.wf.Providers[name]; ok {
		return cfg.Kind
	}
	if cfg, ok := provider.Preset(name); ok {
		return cfg.Kind
	}
	return ""
}
