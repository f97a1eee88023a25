package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
)

// jaegerTrace is a trace as Jaeger's query API returns it.
type jaegerTrace struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

type jaegerSpan struct {
	TraceID       string      `json:"traceID"`
	SpanID        string      `json:"spanID"`
	OperationName string      `json:"operationName"`
	References    []jaegerRef `json:"references"`
	Tags          []jaegerTag `json:"tags"`
	ProcessID     string      `json:"processID"`
}

type jaegerRef struct {
	RefType string `json:"refType"`
	SpanID  string `json:"spanID"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Value any    `json:"value"`
}

// traceScript answers each record's calls by its prompt: "do record 1"
// is refused with a 503 twice, then answered; "do record 2" with a 401
// while refuse is set; the others at once.
type traceScript struct {
	mu     sync.Mutex
	calls  map[string]int
	refuse atomic.Bool
}

func (s *traceScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	prompt := ""
	if len(body.Messages) > 0 {
		prompt = body.Messages[len(body.Messages)-1].Content
	}
	s.mu.Lock()
	s.calls[prompt]++
	n := s.calls[prompt]
	s.mu.Unlock()
	switch {
	case prompt == "do record 1" && n <= 2:
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded or not ready yet.", "server_error", "")}.ServeHTTP(w, r)
	case prompt == "do record 2" && s.refuse.Load():
		providertest.Reply{Status: 401, Body: providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")}.ServeHTTP(w, r)
	default:
		providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini-2024-07-18", "answer", 11, 5)}.ServeHTTP(w, r)
	}
}

// traceReceiver is where the processes export their spans over OTLP/HTTP
// and where the test reads them back, as Jaeger's query API shows them.
type traceReceiver interface {
	endpoint() string
	traces(t *testing.T, service string) ([]jaegerTrace, string)
}

// A job with faults, two workers and a replay, each a process of its own,
// exports its traces over OTLP/HTTP to a receiver that decodes them with
// the OpenTelemetry protocol's own Go types (TestTracesOverOTLP, every
// run) or to Jaeger (TestTracesInJaeger, build tag jaeger); read back:
// one trace per record rooted at its dispatch, every
// delivery under the span that published its message, every call under
// its delivery with the GenAI attributes, the redelivered record's two
// deliveries in its trace, the replay in the dead-lettered record's
// trace, and no span holding the key or the prompt.
func TestTracesOverOTLP(t *testing.T) {
	t.Parallel()
	tracesStory(t, startOTLPReceiver(t))
}

func tracesStory(t *testing.T, jg traceReceiver) {
	const (
		n       = 6
		keyEnv  = "E2E_TRACE_KEY"
		key     = "sk-e2e-SECRET-5f1e2d3c4b5a"
		ackWait = 10 * time.Second
	)
	h := &traceScript{calls: map[string]int{}}
	h.refuse.Store(true)
	srv := providertest.NewServer(t, h)
	b, url := embeddedServer(t, ackWait)
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(fmt.Sprintf(`providers:
  openai: {kind: openai, base_url: %s/v1, api_key_env: %s, timeout: 5s}
actions:
  - name: act
    provider: openai
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: {max_attempts: 2, backoff: 10ms, redeliver: {max_deliveries: 2, backoff: 50ms}}
`, srv.URL, keyEnv)), 0o600))
	env := workerEnv(url, ackWait, keyEnv, key, "JETPOOL_KEY_HOSTS", keyEnv+"="+strings.TrimPrefix(srv.URL, "http://"),
		"OTEL_EXPORTER_OTLP_ENDPOINT", jg.endpoint(), "OTEL_BSP_SCHEDULE_DELAY", "100")

	d := jetpool(t, env, "dispatch", wf, "--input", testenv.Records(t, n), "--job", "traced", "--no-preflight")
	require.Equal(t, 0, d.code, d.stderr)
	w1 := start(t, env, "worker", "--concurrency", "2", "--job", "traced")
	w2 := start(t, env, "worker", "--concurrency", "2", "--job", "traced")
	_, p := waitFinished(t, b, "traced", 30*time.Second)
	require.EqualValues(t, n-1, p.OK)
	require.EqualValues(t, 1, p.Failed)

	h.refuse.Store(false)
	r := jetpool(t, env, "retry", "--job", "traced", "--no-progress")
	require.Equal(t, 0, r.code, r.stderr)
	testenv.Eventually(t, 30*time.Second, func() bool {
		_, p, err := progress(b, "traced")
		return err == nil && p.OK == n
	}, "the replayed record succeeds")
	// Stopped, each worker sends what it still holds.
	for _, w := range []*proc{w1, w2} {
		w.signal(t, syscall.SIGTERM)
		w.wait(t, 20*time.Second)
	}

	// The exporters' batches and the store take a moment: read until every record's
	// trace holds its last delivery.
	var traces []jaegerTrace
	var raw string
	testenv.Eventually(t, 20*time.Second, func() bool {
		traces, raw = jg.traces(t, "jetpool-dispatch")
		if len(traces) != n {
			return false
		}
		for _, tr := range traces {
			stored := 0
			for _, s := range tr.Spans {
				for _, tag := range s.Tags {
					if tag.Key == "jetpool.outcome" && tag.Value == "stored" {
						stored++
					}
				}
			}
			if stored != 1 {
				return false
			}
		}
		return true
	}, "a trace per record, each with its stored delivery")
	require.NotContains(t, raw, "SECRET", "a span holds the key")
	require.NotContains(t, raw, "do record", "a span holds the prompt")

	services := map[string]bool{}
	for _, tr := range traces {
		byID := map[string]int{}
		tags := make([]map[string]any, len(tr.Spans))
		for i, s := range tr.Spans {
			require.Equal(t, tr.TraceID, s.TraceID)
			byID[s.SpanID] = i
			tags[i] = map[string]any{}
			for _, tag := range s.Tags {
				tags[i][tag.Key] = tag.Value
			}
			services[tr.Processes[s.ProcessID].ServiceName] = true
		}
		var record string
		count := map[string]int{}
		for i, s := range tr.Spans {
			count[s.OperationName]++
			if rec, ok := tags[i]["jetpool.record"].(string); ok {
				if record == "" {
					record = rec
				}
				require.Equal(t, record, rec, "one record per trace")
			}
			var up string
			if len(s.References) > 0 {
				j, ok := byID[s.References[0].SpanID]
				require.True(t, ok, "%s: its parent is in the trace", s.OperationName)
				up = tr.Spans[j].OperationName
			}
			switch s.OperationName {
			case "jetpool.dispatch":
				require.Empty(t, s.References, "the dispatch is the root")
				require.Equal(t, "jetpool-dispatch", tr.Processes[s.ProcessID].ServiceName)
			case "jetpool.deliver act":
				require.Contains(t, []string{"jetpool.dispatch", "jetpool.replay"}, up)
				require.Equal(t, "jetpool-worker", tr.Processes[s.ProcessID].ServiceName)
			case "chat gpt-4o-mini":
				require.Equal(t, "jetpool.deliver act", up)
				require.Equal(t, "chat", tags[i]["gen_ai.operation.name"])
				require.Equal(t, "openai", tags[i]["gen_ai.provider.name"])
				require.Equal(t, "gpt-4o-mini", tags[i]["gen_ai.request.model"])
				if _, failed := tags[i]["error.type"]; !failed {
					require.EqualValues(t, 11, tags[i]["gen_ai.usage.input_tokens"])
					require.EqualValues(t, 5, tags[i]["gen_ai.usage.output_tokens"])
					require.Equal(t, "gpt-4o-mini-2024-07-18", tags[i]["gen_ai.response.model"])
				}
			case "jetpool.replay":
				require.Equal(t, "jetpool.deliver act", up, "the replay goes on under the delivery that failed")
				require.Equal(t, "jetpool-retry", tr.Processes[s.ProcessID].ServiceName)
			default:
				t.Fatalf("unexpected span %q", s.OperationName)
			}
		}
		require.Equal(t, 1, count["jetpool.dispatch"], record)
		switch record {
		case "r1": // two deliveries: two 503s, then the answer
			require.Equal(t, 2, count["jetpool.deliver act"], record)
			require.Equal(t, 3, count["chat gpt-4o-mini"], record)
		case "r2": // dead-lettered at its 401, replayed, answered
			require.Equal(t, 2, count["jetpool.deliver act"], record)
			require.Equal(t, 1, count["jetpool.replay"], record)
			require.Equal(t, 2, count["chat gpt-4o-mini"], record)
		default:
			require.Equal(t, 1, count["jetpool.deliver act"], record)
			require.Equal(t, 1, count["chat gpt-4o-mini"], record)
		}
	}
	require.Equal(t, map[string]bool{"jetpool-dispatch": true, "jetpool-worker": true, "jetpool-retry": true}, services)
}
