//go:build jaeger

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// Jaeger's all-in-one is a heavy build (minutes of CPU), more than CI's
// budget allows: `go test -tags jaeger -run TestTracesInJaeger ./e2e/`
// with jaeger installed (docs/tracing.md).
func TestTracesInJaeger(t *testing.T) {
	t.Parallel()
	tracesStory(t, startJaeger(t))
}

func (j jaeger) endpoint() string { return j.otlp }

// jaegerConfig is Jaeger v2's all-in-one (memory storage, OTLP/HTTP in,
// its query API out) on loopback ports of the test's choosing, with its
// own telemetry off so that it binds no fixed port.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// jaegerClient keeps no connection open past a request: nothing of the
// test outlives it (TestMain's goleak).
var jaegerClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}

// jaeger is a running Jaeger all-in-one: where to send OTLP, where to ask.
type jaeger struct {
	otlp, query string
}

// startJaeger starts Jaeger v2 (installed as a Go tool: see tool) and
// waits until its query API answers.
func startJaeger(t *testing.T) jaeger {
	t.Helper()
	bin := tool(t, "jaeger")
	ports := freePorts(t, 3)
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, ports[0], ports[1], ports[2])), 0o600))
	p := startBin(t, bin, nil, "--config", cfg)
	j := jaeger{otlp: fmt.Sprintf("http://127.0.0.1:%d", ports[2]), query: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	testenv.Eventually(t, 30*time.Second, func() bool {
		select {
		case <-p.done:
			t.Fatalf("jaeger exited: %v\n%s", p.err, lastLines(p.stderr.String(), 30))
		default:
		}
		resp, err := jaegerClient.Get(j.query + "/api/services")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "jaeger's query API answers")
	return j
}

// traces is every trace of service Jaeger holds, and the raw answer.
func (j jaeger) traces(t *testing.T, service string) ([]jaegerTrace, string) {
	t.Helper()
	resp, err := jaegerClient.Get(j.query + "/api/traces?service=" + service + "&limit=1000&lookback=1h")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Data []jaegerTrace `json:"data"`
	}
	raw := new(strings.Builder)
	require.NoError(t, json.NewDecoder(io.TeeReader(resp.Body, raw)).Decode(&body))
	return body.Data, raw.String()
}
