package worker_test

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/worker"
)

// staller is a local OpenAI-format endpoint that streams every answer
// after latency, except the first call of the records stall picks: those
// get a stream of keep-alives (an SSE comment, empty chunks) that never
// brings content, until the client goes away.
type staller struct {
	latency time.Duration
	stall   func(record int) bool

	mu    sync.Mutex
	calls map[int]int

	total, stalled atomic.Int64
}

var recordRE = regexp.MustCompile(`record (\d+)`)

func (s *staller) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.total.Add(1)
	var body strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := r.Body.Read(buf)
		body.Write(buf[:n])
		if err != nil {
			break
		}
	}
	rec := 0
	if m := recordRE.FindStringSubmatch(body.String()); m != nil {
		fmt.Sscan(m[1], &rec)
	}
	s.mu.Lock()
	s.calls[rec]++
	first := s.calls[rec] == 1
	s.mu.Unlock()
	if first && s.stall(rec) {
		s.stalled.Add(1)
		providertest.Stall{Start: providertest.OpenAIStart("gpt-4o-mini"), Keepalives: providertest.OpenAIKeepalives("gpt-4o-mini"),
			Every: 50 * time.Millisecond}.ServeHTTP(w, r)
		return
	}
	t := time.NewTimer(s.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	providertest.SSE{Events: providertest.OpenAIStream("gpt-4o-mini", []string{"an ", "answer"}, 12, 2)}.ServeHTTP(w, r)
}

func stallWorkflow(t testing.TB, url, timeout, idle, retryBlock string) string {
	t.Helper()
	if idle != "" {
		idle = ", stream_idle_timeout: " + idle
	}
	return fmt.Sprintf(`
providers:
  stalls: {kind: openai, base_url: %q, timeout: %s, stream: true%s}
defaults:
  provider: stalls
  model: gpt-4o-mini
  retry: %s
actions:
  - name: act
    prompt: "Summarise: {{ .text }}"
`, url, timeout, idle, retryBlock)
}

// A stream that stays open on keep-alives without content is cut after the
// provider's stream_idle_timeout, well before the call's timeout, and its
// record is called again like one whose stream dropped: every record
// succeeds, the stalled ones on their second call, their first failure a
// network error that says the stream was idle.
func TestStalledStreamIsRetried(t *testing.T) {
	t.Parallel()
	stalls := map[int]bool{2: true, 5: true, 9: true}
	srv := &staller{latency: 10 * time.Millisecond, calls: map[int]int{}, stall: func(r int) bool { return stalls[r] }}
	ps := providertest.NewServer(t, srv)
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, stallWorkflow(t, ps.URL+"/v1", "5m", "1s", "{max_attempts: 2, backoff: 10ms}"))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 12), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 4})
	job, prog := testenv.WaitFinished(t, b, res.Job.ID, 2*time.Minute)
	require.EqualValues(t, 12, prog.OK)
	require.EqualValues(t, 15, srv.total.Load(), "one call a record, two for each stalled one")
	for id, r := range testenv.Results(t, b, job) {
		var n int
		fmt.Sscanf(id, "r%d", &n)
		if !stalls[n] {
			require.Equal(t, 1, r.Recovery.Attempts, id)
			continue
		}
		require.Equal(t, 2, r.Recovery.Attempts, id)
		require.Len(t, r.Recovery.Failures, 1, id)
		require.Equal(t, "network", r.Recovery.Failures[0].Class, id)
		require.Contains(t, r.Recovery.Failures[0].Error, "StreamIdleError: the stream sent no content for 1s (stream_idle_timeout), only", id)
	}
}

// BenchmarkStreamStalls measures what streams that stall on keep-alives
// cost a job: 400 records, 200 ms a call, concurrency 32, a call timeout
// of 20 s, retry on; one record's first call in twenty stalls (keep-alives
// every 50 ms, never content). "before" cuts a stalled stream only at the
// call's timeout, as jetpool did (stream_idle_timeout set to the timeout);
// "default" at half the timeout; "2s" at 2 s. It reports records/s:
//
//	go test ./worker -run '^$' -bench BenchmarkStreamStalls -benchtime 1x -v
//
// JETPOOL_BENCH_RECORDS changes the records.
func BenchmarkStreamStalls(b *testing.B) {
	records := 400
	if n := os.Getenv("JETPOOL_BENCH_RECORDS"); n != "" {
		fmt.Sscan(n, &records)
	}
	type row struct {
		name             string
		elapsed          time.Duration
		calls, stalled   int64
		ok, failed, lost int64
	}
	var rows []row
	for _, c := range []struct {
		name, idle string
		stalls     bool
	}{
		{"clean", "", false},
		{"stalls, before (cut at the 20s timeout)", "20s", true},
		{"stalls, default stream_idle_timeout (10s)", "", true},
		{"stalls, stream_idle_timeout 2s", "2s", true},
	} {
		b.Run(strings.NewReplacer(" ", "_", ",", "", "(", "", ")", "").Replace(c.name), func(b *testing.B) {
			for range b.N {
				srv := &staller{latency: 200 * time.Millisecond, calls: map[int]int{},
					stall: func(r int) bool { return c.stalls && r%20 == 7 }}
				ps := providertest.NewServer(b, srv)
				bk := testenv.Broker(b)
				wf := testenv.Workflow(b, stallWorkflow(b, ps.URL+"/v1", "20s", c.idle, "{max_attempts: 2, backoff: 100ms}"))
				res := testenv.Dispatch(b, bk, wf, testenv.Records(b, records), dispatcher.Options{})
				start := time.Now()
				testenv.Pool(b, bk, worker.Config{Concurrency: 32})
				_, prog := testenv.WaitFinished(b, bk, res.Job.ID, 10*time.Minute)
				elapsed := time.Since(start)
				rows = append(rows, row{name: c.name, elapsed: elapsed, calls: srv.total.Load(), stalled: srv.stalled.Load(),
					ok: prog.OK, failed: prog.Failed, lost: int64(records) - prog.OK - prog.Failed})
				b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
			}
		})
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d records, 200 ms a call, concurrency 32, timeout 20s, retry {max_attempts: 2}\n", records)
	sb.WriteString("| run | elapsed | records/s | HTTP calls | stalled streams | ok | failed | lost |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(&sb, "| %s | %.1f s | %.1f | %d | %d | %d | %d | %d |\n", r.name, r.elapsed.Seconds(),
			float64(records)/r.elapsed.Seconds(), r.calls, r.stalled, r.ok, r.failed, r.lost)
	}
	b.Log(sb.String())
}
