// Package tracing follows each record of a job through OpenTelemetry
// traces: its dispatch, every delivery, every model call (attempts,
// repairs, overflow rounds), the waits and dead letters between them, and
// a replay, as one trace across processes (docs/tracing.md).
//
// It is off unless the standard OTEL_* variables configure an exporter
// (Setup). Off, every Start function returns the context it was given and
// a span that records nothing, without allocating, and no goroutine runs:
// callers guard attribute building with span.IsRecording().
//
// The trace context travels in the W3C traceparent / tracestate headers of
// the JetStream messages (Inject, Extract), and a dead letter keeps it
// (deadletter.Entry.Trace) so that a replay continues the record's trace.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of jetpool's spans.
const ScopeName = "github.com/jetpool/jetpool"

// ContentEnv, set to true, puts the prompts and answers on the model call
// spans (gen_ai.input.messages, gen_ai.output.messages). Off by default:
// records are often data a trace backend must not hold.
const ContentEnv = "JETPOOL_TRACE_CONTENT"

// state is what the process traces with: nil while tracing is off.
type state struct {
	tracer  trace.Tracer
	content bool
}

var current atomic.Pointer[state]

// propagator is W3C trace context only: baggage is not carried, so no
// record data leaves a process in a header by accident.
var propagator = propagation.TraceContext{}

// Enabled reports whether spans are being recorded.
func Enabled() bool { return current.Load() != nil }

// ErrProtocol is returned by Setup when OTEL_EXPORTER_OTLP_PROTOCOL (or
// its traces variant) names a protocol other than http/protobuf.
var ErrProtocol = errors.New("unsupported OTLP protocol")

// Configured reports whether the environment asks for traces, and why
// not when it does not. Traces are on when OTEL_TRACES_EXPORTER is otlp,
// or unset while an OTLP endpoint is set; OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn them off.
func Configured(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))); exp {
	case "otlp":
		return true
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false
	}
}

// Setup turns tracing on when the environment configures it (Configured):
// an OTLP/HTTP exporter reading the standard OTEL_EXPORTER_OTLP_*
// variables, a batching span processor, the sampler of OTEL_TRACES_SAMPLER
// and a resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES (service
// defaults to "jetpool-"+role). shutdown flushes what is buffered and
// stops; it is a no-op when tracing stayed off.
func Setup(ctx context.Context, role string) (shutdown func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	if !Configured(os.Getenv) {
		if exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp != "" && !strings.EqualFold(exp, "none") && !strings.EqualFold(exp, "otlp") {
			return off, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: jetpool exports otlp or none", exp)
		}
		return off, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := os.Getenv(v); p != "" {
			if p != "http/protobuf" {
				return off, fmt.Errorf("%s=%s: %w (jetpool sends http/protobuf; every OTLP receiver takes it on port 4318)", v, p, ErrProtocol)
			}
			break
		}
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return off, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", "jetpool-"+role)))
	if err != nil {
		return off, fmt.Errorf("tracing: resource: %w", err)
	}
	if env, eerr := resource.New(ctx, resource.WithFromEnv()); eerr == nil {
		if merged, merr := resource.Merge(res, env); merr == nil {
			res = merged
		}
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	restore := Use(tp)
	return func(ctx context.Context) error {
		restore()
		return tp.Shutdown(ctx)
	}, nil
}

// Use makes tp the provider of jetpool's spans until restore is called;
// Setup uses it, and tests hand it a provider with an in-memory exporter.
// It does not touch OpenTelemetry's global provider.
func Use(tp trace.TracerProvider) (restore func()) {
	prev := current.Swap(&state{tracer: tp.Tracer(ScopeName), content: contentOn()})
	return func() { current.Store(prev) }
}

func contentOn() bool {
	v := strings.ToLower(os.Getenv(ContentEnv))
	return v == "true" || v == "1"
}

// noSpan is what every Start function returns while tracing is off.
var noSpan trace.Span = noop.Span{}

// start starts a span when tracing is on.
func start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	st := current.Load()
	if st == nil {
		return ctx, noSpan
	}
	return st.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}
