package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// headerTraceparent is the W3C trace context header the propagator writes.
const headerTraceparent = "traceparent"

// headerCarrier lets the propagator read and write a NATS message's
// headers. NATS header keys are case-sensitive; the W3C keys are written
// and read in their lower-case form.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject writes the span context of ctx into h (nothing while tracing is
// off, or when ctx holds no span).
func Inject(ctx context.Context, h nats.Header) {
	if h == nil || !Enabled() || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, headerCarrier(h))
}

// InjectSpan writes span's context into h: the span that caused the
// message (a delivery forwarding the record to its next action).
func InjectSpan(span trace.Span, h nats.Header) {
	if span == nil || !span.SpanContext().IsValid() {
		return
	}
	Inject(trace.ContextWithSpan(context.Background(), span), h)
}

// Extract returns ctx with the remote span context h carries, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// Traceparent is the W3C traceparent of span when it is a real one,
// else the one h carries ("" when neither has one): what a dead letter
// keeps, so that a replay continues the trace even when the worker that
// failed the record did not trace.
func Traceparent(span trace.Span, h nats.Header) string {
	if span != nil && span.SpanContext().IsValid() {
		h := nats.Header{}
		InjectSpan(span, h)
		if tp := headerCarrier(h).Get(headerTraceparent); tp != "" {
			return tp
		}
	}
	return headerCarrier(h).Get(headerTraceparent)
}

// CopyTrace copies the trace context headers of from into to: a process
// that does not trace still passes the trace on.
func CopyTrace(from, to nats.Header) {
	if len(from[headerTraceparent]) == 0 || to == nil {
		return
	}
	for _, k := range propagator.Fields() {
		if v := headerCarrier(from).Get(k); v != "" && to != nil {
			to[k] = []string{v}
		}
	}
}
