package tracing

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys. The gen_ai.* and error.type keys are the OpenTelemetry
// GenAI semantic conventions'; jetpool.* are jetpool's own.
const (
	KeyOperation     = attribute.Key("gen_ai.operation.name")
	KeyProvider      = attribute.Key("gen_ai.provider.name")
	KeyRequestModel  = attribute.Key("gen_ai.request.model")
	KeyResponseModel = attribute.Key("gen_ai.response.model")
	KeyFinish        = attribute.Key("gen_ai.response.finish_reasons")
	KeyInputTokens   = attribute.Key("gen_ai.usage.input_tokens")
	KeyOutputTokens  = attribute.Key("gen_ai.usage.output_tokens")
	KeyInput         = attribute.Key("gen_ai.input.messages")
	KeyOutput        = attribute.Key("gen_ai.output.messages")
	KeyErrorType     = attribute.Key("error.type")

	KeyJob        = attribute.Key("jetpool.job")
	KeyAction     = attribute.Key("jetpool.action")
	KeyRecord     = attribute.Key("jetpool.record")
	KeyJetProv    = attribute.Key("jetpool.provider")
	KeyAttempt    = attribute.Key("jetpool.attempt")
	KeyRepair     = attribute.Key("jetpool.repair")
	KeyOverflow   = attribute.Key("jetpool.overflow.round")
	KeyDelivery   = attribute.Key("jetpool.delivery")
	KeyReplays    = attribute.Key("jetpool.replays")
	KeyOutcome    = attribute.Key("jetpool.outcome")
	KeyReason     = attribute.Key("jetpool.reason")
	KeyErrorClass = attribute.Key("jetpool.error.class")
	KeyCost       = attribute.Key("jetpool.cost")
	KeyCalls      = attribute.Key("jetpool.calls")
	KeyWaitUntil  = attribute.Key("jetpool.wait.until")
	KeyWorker     = attribute.Key("jetpool.worker")
)

// Span names (docs/tracing.md): a record's trace is a dispatch, its
// deliveries under it, and the model calls under each delivery.
const (
	SpanDispatch = "jetpool.dispatch"
	SpanDeliver  = "jetpool.deliver"
	SpanReplay   = "jetpool.replay"
)

// Record names the record a span is about.
type Record struct {
	Job, Action, ID string
}

func (r Record) attrs() []attribute.KeyValue {
	return []attribute.KeyValue{KeyJob.String(r.Job), KeyAction.String(r.Action), KeyRecord.String(r.ID)}
}

// StartDispatch starts the root span of a record's trace, as the
// dispatcher publishes its first work message; Inject its context into
// that message.
func StartDispatch(ctx context.Context, r Record) (context.Context, trace.Span) {
	ctx, span := start(ctx, SpanDispatch, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(r.attrs()...)
	}
	return ctx, span
}

// StartDelivery starts the span of one delivery of a work message, a child
// of the context the message carries: every redelivery of a message is a
// sibling of the first, under the span that published it.
func StartDelivery(ctx context.Context, h nats.Header, r Record, replays int, worker string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, noSpan
	}
	ctx, span := start(Extract(ctx, h), SpanDeliver+" "+r.Action, trace.SpanKindConsumer)
	if span.IsRecording() {
		span.SetAttributes(r.attrs()...)
		span.SetAttributes(KeyReplays.Int(replays))
		if worker != "" {
			span.SetAttributes(KeyWorker.String(worker))
		}
	}
	return ctx, span
}

// Outcome is how a delivery ended, for its span.
type Outcome struct {
	Kind string // stored, retry, dead_letter, park, …
	// Delivery is the exec layer's number of the delivery: the record's
	// deliveries that made calls before it, plus one.
	Delivery int
	Reason   string // a dead letter's reason
	// ErrType and ErrClass are the last error's type name and jetpool
	// class ("" when the delivery succeeded).
	ErrType, ErrClass string
	Calls             int
	Cost              float64
	Priced            bool
	WaitUntil         time.Time
}

// EndDelivery writes how the delivery ended on its span and ends it.
func EndDelivery(span trace.Span, o Outcome) {
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(KeyOutcome.String(o.Kind), KeyCalls.Int(o.Calls), KeyDelivery.Int(o.Delivery))
	if o.Priced {
		span.SetAttributes(KeyCost.Float64(o.Cost))
	}
	if o.Reason != "" {
		span.SetAttributes(KeyReason.String(o.Reason))
	}
	if !o.WaitUntil.IsZero() {
		span.SetAttributes(KeyWaitUntil.String(o.WaitUntil.UTC().Format(time.RFC3339Nano)))
		span.AddEvent("wait", trace.WithAttributes(KeyWaitUntil.String(o.WaitUntil.UTC().Format(time.RFC3339Nano))))
	}
	if o.ErrType != "" || o.ErrClass != "" {
		span.SetAttributes(KeyErrorType.String(orDefault(o.ErrType, o.ErrClass)), KeyErrorClass.String(o.ErrClass))
		if o.Kind != "stored" {
			span.SetStatus(codes.Error, orDefault(o.ErrClass, o.ErrType))
		}
	}
	span.End()
}

// Call is one model request, for its span.
type Call struct {
	Record
	// Operation is the GenAI operation: "chat" or "embeddings".
	Operation string
	// Provider is the workflow's provider name, Kind its adapter kind.
	Provider, Kind, Model string
	// Attempt is the record's call number for the action, across its
	// deliveries; Repair the repair round of the delivery (0: the first
	// answer), Overflow its compaction round.
	Attempt, Repair, Overflow int
}

// StartCall starts a model call's span, named as the GenAI conventions
// say: "{operation} {model}".
func StartCall(ctx context.Context, c Call) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, noSpan
	}
	op := orDefault(c.Operation, "chat")
	ctx, span := start(ctx, op+" "+c.Model, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(c.Record.attrs()...)
		span.SetAttributes(KeyOperation.String(op), KeyProvider.String(ProviderName(c.Provider, c.Kind)),
			KeyRequestModel.String(c.Model), KeyJetProv.String(c.Provider), KeyAttempt.Int(c.Attempt))
		if c.Repair > 0 {
			span.SetAttributes(KeyRepair.Int(c.Repair))
		}
		if c.Overflow > 0 {
			span.SetAttributes(KeyOverflow.Int(c.Overflow))
		}
	}
	return ctx, span
}

// Answer is what a model call returned, for its span.
type Answer struct {
	Model         string
	FinishReason  string
	Input, Output int // tokens
	Cost          float64
	Priced        bool
	// Text is the answer, put on the span only with ContentEnv set.
	Text string
}

// EndCall writes the call's answer, or its error (errType the error's
// type name, errClass jetpool's class of it), on its span and ends it.
func EndCall(span trace.Span, a Answer, errType, errClass string) {
	if !span.IsRecording() {
		return
	}
	if errType != "" || errClass != "" {
		span.SetAttributes(KeyErrorType.String(orDefault(errType, errClass)), KeyErrorClass.String(errClass))
		span.SetStatus(codes.Error, orDefault(errClass, errType))
		span.End()
		return
	}
	if a.Model != "" {
		span.SetAttributes(KeyResponseModel.String(a.Model))
	}
	if a.FinishReason != "" {
		span.SetAttributes(KeyFinish.StringSlice([]string{a.FinishReason}))
	}
	span.SetAttributes(KeyInputTokens.Int(a.Input), KeyOutputTokens.Int(a.Output))
	if a.Priced {
		span.SetAttributes(KeyCost.Float64(a.Cost))
	}
	if Content() && a.Text != "" {
		span.SetAttributes(KeyOutput.String(messagesJSON([]Message{{Role: "assistant", Content: a.Text}})))
	}
	span.End()
}

// Message is a turn of the conversation, for the opt-in content.
type Message struct {
	Role    string
	Content string
}

// Content reports whether prompts and answers go on the spans (ContentEnv).
func Content() bool {
	st := current.Load()
	return st != nil && st.content
}

// SetInput puts the call's messages on its span when the user opted in.
func SetInput(span trace.Span, system string, msgs []Message) {
	if !span.IsRecording() || !Content() {
		return
	}
	if system != "" {
		msgs = append([]Message{{Role: "system", Content: system}}, msgs...)
	}
	span.SetAttributes(KeyInput.String(messagesJSON(msgs)))
}

// messagesJSON writes messages in the conventions' shape: role and parts.
func messagesJSON(msgs []Message) string {
	type part struct {
		Type    string `json:"type"`
		Content string `json:"content"`
	}
	type msg struct {
		Role  string `json:"role"`
		Parts []part `json:"parts"`
	}
	out := make([]msg, len(msgs))
	for i, m := range msgs {
		out[i] = msg{Role: m.Role, Parts: []part{{Type: "text", Content: m.Content}}}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// Wait records on the call's span that it waited for its provider's
// limiter before it went.
func Wait(span trace.Span, waited time.Duration) {
	if span.IsRecording() && waited > 0 {
		span.AddEvent("rate_limit.wait", trace.WithAttributes(attribute.Int64("jetpool.wait.ms", waited.Milliseconds())))
	}
}

// StartReplay starts the span of a dead letter's replay, a child of the
// span context the dead letter kept (traceparent; a new trace when it
// kept none); Inject its context into the republished work message.
func StartReplay(ctx context.Context, traceparent string, r Record, replays int, reason string) (context.Context, trace.Span) {
	if !Enabled() {
		return ctx, noSpan
	}
	if traceparent != "" {
		ctx = Extract(ctx, nats.Header{headerTraceparent: []string{traceparent}})
	}
	ctx, span := start(ctx, SpanReplay, trace.SpanKindProducer)
	if span.IsRecording() {
		span.SetAttributes(r.attrs()...)
		span.SetAttributes(KeyReplays.Int(replays), KeyReason.String(reason))
	}
	return ctx, span
}

// ProviderName is gen_ai.provider.name for a workflow provider: its name
// when that is one the conventions list (a groq provider speaks OpenAI's
// protocol but is groq), else what its adapter kind stands for.
func ProviderName(name, kind string) string {
	switch strings.ToLower(name) {
	case "openai", "anthropic", "groq", "deepseek", "perplexity", "cohere", "mistral_ai", "x_ai", "ibm.watsonx.ai",
		"aws.bedrock", "azure.ai.openai", "azure.ai.inference", "gcp.gemini", "gcp.vertex_ai", "gcp.gen_ai":
		return strings.ToLower(name)
	case "mistral":
		return "mistral_ai"
	case "xai":
		return "x_ai"
	case "gemini":
		return "gcp.gemini"
	}
	switch kind {
	case "gemini":
		return "gcp.gemini"
	case "openai", "anthropic":
		return kind
	case "sim":
		return "jetpool.sim"
	}
	return orDefault(kind, name)
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
