package tracing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/tracing"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func TestConfigured(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{env: nil, want: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, want: false},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, want: false},
	} {
		require.Equal(t, tc.want, tracing.Configured(env(tc.env)), "%v", tc.env)
	}
}

// Setup with nothing configured leaves tracing off; a protocol jetpool
// does not send, or an exporter it does not have, is an error naming the
// variable.
func TestSetup(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	shutdown, err := tracing.Setup(context.Background(), "test")
	require.NoError(t, err)
	require.False(t, tracing.Enabled())
	require.NoError(t, shutdown(context.Background()))

	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	_, err = tracing.Setup(context.Background(), "test")
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER=zipkin")

	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	_, err = tracing.Setup(context.Background(), "test")
	require.ErrorIs(t, err, tracing.ErrProtocol)
	require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_PROTOCOL=grpc")
	require.False(t, tracing.Enabled())

	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	shutdown, err = tracing.Setup(context.Background(), "test")
	require.NoError(t, err)
	require.True(t, tracing.Enabled())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, shutdown(ctx), "no span to send: shutdown needs no receiver")
	require.False(t, tracing.Enabled())
}

// Off, tracing costs nothing: the context comes back as it was, the span
// records nothing, and nothing is allocated.
func TestOffCostsNothing(t *testing.T) {
	require.False(t, tracing.Enabled())
	ctx := context.Background()
	h := nats.Header{"traceparent": []string{"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	r := tracing.Record{Job: "j", Action: "a", ID: "r1"}
	out := nats.Header{}
	allocs := testing.AllocsPerRun(100, func() {
		c, span := tracing.StartDelivery(ctx, h, r, 0, "w")
		if c != ctx || span.IsRecording() {
			t.Fatal("a span while tracing is off")
		}
		c, call := tracing.StartCall(ctx, tracing.Call{Record: r, Model: "m", Attempt: 1})
		if c != ctx {
			t.Fatal("a call span while tracing is off")
		}
		tracing.EndCall(call, tracing.Answer{Model: "m", Input: 1, Output: 2}, "", "")
		tracing.EndDelivery(span, tracing.Outcome{Kind: "stored", Calls: 1})
		tracing.Inject(ctx, out)
	})
	require.Zero(t, allocs)
}

func use(t *testing.T) *tracetest.InMemoryExporter {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	restore := tracing.Use(tp)
	t.Cleanup(func() { restore(); _ = tp.Shutdown(context.Background()) })
	return exp
}

// The context a message carries is the parent of its delivery's span, and
// a dead letter's traceparent the parent of its replay.
func TestPropagation(t *testing.T) {
	exp := use(t)
	r := tracing.Record{Job: "j", Action: "a", ID: "r1"}
	ctx, root := tracing.StartDispatch(context.Background(), r)
	h := nats.Header{}
	tracing.Inject(ctx, h)
	root.End()
	require.Len(t, h["traceparent"], 1)

	_, del := tracing.StartDelivery(context.Background(), h, r, 0, "w1")
	tp := tracing.Traceparent(del, h)
	tracing.EndDelivery(del, tracing.Outcome{Kind: "dead_letter", Delivery: 1, ErrType: "AuthError", ErrClass: "auth"})
	require.Contains(t, tp, del.SpanContext().SpanID().String())

	_, rep := tracing.StartReplay(context.Background(), tp, r, 1, "permanent")
	rep.End()

	spans := exp.GetSpans()
	require.Len(t, spans, 3)
	require.Equal(t, spans[0].SpanContext.SpanID(), spans[1].Parent.SpanID())
	require.Equal(t, spans[1].SpanContext.SpanID(), spans[2].Parent.SpanID())
	for _, s := range spans {
		require.Equal(t, spans[0].SpanContext.TraceID(), s.SpanContext.TraceID())
	}
	require.Equal(t, trace.SpanKindProducer, spans[0].SpanKind)
	require.Equal(t, "Error", spans[1].Status.Code.String())

	// A process that does not trace passes the context on as it came.
	out := nats.Header{}
	tracing.CopyTrace(h, out)
	require.Equal(t, h["traceparent"], out["traceparent"])
}

// The prompt and answer are on a call's span only with ContentEnv set.
func TestContentOptIn(t *testing.T) {
	for _, on := range []bool{false, true} {
		if on {
			t.Setenv(tracing.ContentEnv, "true")
		}
		exp := use(t)
		_, span := tracing.StartCall(context.Background(), tracing.Call{Model: "m"})
		tracing.SetInput(span, "be brief", []tracing.Message{{Role: "user", Content: "the prompt"}})
		tracing.EndCall(span, tracing.Answer{Text: "the answer"}, "", "")
		var all strings.Builder
		for _, kv := range exp.GetSpans()[0].Attributes {
			all.WriteString(string(kv.Key) + "=" + kv.Value.String() + "\n")
		}
		for _, s := range []string{"the prompt", "the answer", "be brief"} {
			require.Equal(t, on, strings.Contains(all.String(), s), "%s with content %v", s, on)
		}
	}
}

func TestProviderName(t *testing.T) {
	require.Equal(t, "openai", tracing.ProviderName("openai", "openai"))
	require.Equal(t, "groq", tracing.ProviderName("groq", "openai"))
	require.Equal(t, "gcp.gemini", tracing.ProviderName("g", "gemini"))
	require.Equal(t, "anthropic", tracing.ProviderName("claude", "anthropic"))
	require.Equal(t, "openai", tracing.ProviderName("local-vllm", "openai"))
}

// What a delivery and one call pay for tracing while it is off, and on
// with every span sampled out (parentbased_traceidratio at 0).
func BenchmarkDeliveryAndCall(b *testing.B) {
	h := nats.Header{}
	r := tracing.Record{Job: "j", Action: "a", ID: "r1"}
	run := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx, del := tracing.StartDelivery(context.Background(), h, r, 0, "w")
			_, call := tracing.StartCall(ctx, tracing.Call{Record: r, Model: "m", Attempt: 1})
			tracing.EndCall(call, tracing.Answer{Model: "m", Input: 1, Output: 2}, "", "")
			tracing.EndDelivery(del, tracing.Outcome{Kind: "stored", Calls: 1})
		}
	}
	b.Run("off", run)
	b.Run("sampled-out", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))
		defer tracing.Use(tp)()
		run(b)
	})
	b.Run("on", func(b *testing.B) {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		defer tracing.Use(tp)()
		run(b)
	})
}
