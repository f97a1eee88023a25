package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver takes OTLP/HTTP protobuf exports on loopback and decodes
// them with the protocol's own Go types (go.opentelemetry.io/proto/otlp):
// what any OTLP backend receives, read back in Jaeger's shape.
type otlpReceiver struct {
	url string
	mu  sync.Mutex
	req []*coltrace.ExportTraceServiceRequest
}

func startOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(r.serve)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	r.url = "http://" + ln.Addr().String()
	return r
}

func (r *otlpReceiver) endpoint() string { return r.url }

func (r *otlpReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "OTLP/HTTP protobuf traces only", http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		z, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = z
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m coltrace.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.req = append(r.req, &m)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// traces is every trace with a span of service, as Jaeger's query API
// would give it, and everything received as JSON (the raw answer).
func (r *otlpReceiver) traces(t *testing.T, service string) ([]jaegerTrace, string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	byTrace := map[string]*jaegerTrace{}
	var order []string
	services := map[string]map[string]bool{}
	var raw bytes.Buffer
	for _, m := range r.req {
		js, err := protojson.Marshal(m)
		require.NoError(t, err)
		raw.Write(js)
		for _, rs := range m.ResourceSpans {
			svc := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					svc = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					id := hex.EncodeToString(s.TraceId)
					tr := byTrace[id]
					if tr == nil {
						tr = &jaegerTrace{TraceID: id, Processes: map[string]jaegerProcess{}}
						byTrace[id] = tr
						order = append(order, id)
						services[id] = map[string]bool{}
					}
					services[id][svc] = true
					tr.Processes[svc] = jaegerProcess{svc}
					sp := jaegerSpan{TraceID: id, SpanID: hex.EncodeToString(s.SpanId), OperationName: s.Name, ProcessID: svc}
					if len(s.ParentSpanId) > 0 {
						sp.References = append(sp.References, jaegerRef{"CHILD_OF", hex.EncodeToString(s.ParentSpanId)})
					}
					for _, a := range s.Attributes {
						sp.Tags = append(sp.Tags, jaegerTag{a.Key, otlpValue(a.Value)})
					}
					tr.Spans = append(tr.Spans, sp)
				}
			}
		}
	}
	var out []jaegerTrace
	for _, id := range order {
		if services[id][service] {
			out = append(out, *byTrace[id])
		}
	}
	// As Jaeger's JSON would decode: numbers as float64.
	js, err := json.Marshal(out)
	require.NoError(t, err)
	var decoded []jaegerTrace
	require.NoError(t, json.Unmarshal(js, &decoded))
	return decoded, raw.String()
}

func otlpValue(v *common.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return x.StringValue
	case *common.AnyValue_IntValue:
		return x.IntValue
	case *common.AnyValue_DoubleValue:
		return x.DoubleValue
	case *common.AnyValue_BoolValue:
		return x.BoolValue
	default:
		return v.String()
	}
}
