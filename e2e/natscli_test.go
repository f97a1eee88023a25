package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// status is `jetpool status JOB --json`.
type status struct {
	Job        string           `json:"job"`
	Status     string           `json:"status"`
	Total      int64            `json:"total"`
	Queued     int64            `json:"queued"`
	InFlight   int64            `json:"in_flight"`
	Waiting    int64            `json:"waiting_for_redelivery"`
	Succeeded  int64            `json:"succeeded"`
	Failed     int64            `json:"failed"`
	Cancelled  int64            `json:"cancelled"`
	DeadLetter map[string]int64 `json:"dead_lettered_by_reason"`
	Paused     bool             `json:"paused"`
	Workers    int              `json:"workers"`
}

func jobStatus(t testing.TB, env map[string]string, job string) status {
	t.Helper()
	r := jetpool(t, env, "status", job, "--json")
	require.Zero(t, r.code, "jetpool status: %s", r.stderr)
	var s status
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	return s
}

// jetpoolServer starts `jetpool server` on a random loopback port and
// returns its client URL.
func jetpoolServer(t testing.TB) (*proc, string) {
	t.Helper()
	srv := start(t, map[string]string{"JETPOOL_DATA_DIR": t.TempDir()}, "server", "--port", "-1", "--http-port", "0")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`), 20*time.Second)
	return srv, url
}

// The operator's view of a running job with the real `nats` CLI and `jetpool
// status`, on `jetpool server` with `jetpool dispatch` and a `jetpool worker`
// as separate processes — exactly the commands of docs/operations.md.
func TestOperations(t *testing.T) {
	t.Parallel()
	const n = 40
	srv, url := jetpoolServer(t)
	env := map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_ACK_WAIT": "10s"}

	// Every record's first call fails with an unknown error, which only the
	// exec layer retries (a delayed Nak, then a redelivery), and a few keys
	// are invalid: dead-lettered at once. (Not 5xx: consecutive server errors
	// open the provider's circuit for 30s.)
	dir := t.TempDir()
	wfPath := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(`providers:
  sim:
    kind: sim
    sim:
      latency: 60ms
      seed: 5
      retry_after: 100ms
      fail_first: 1
      fail_class: unknown
      faults: {auth: 0.08}
defaults:
  provider: sim
  model: sim-1
  retry:
    max_attempts: 1
    redeliver: {max_deliveries: 3, backoff: 400ms}
actions:
  - name: answer
    prompt: "Answer: {{ .text }}"
`), 0o600))
	d := jetpool(t, env, "dispatch", wfPath, "--input", testenv.Records(t, n), "--job", "ops", "--no-preflight")
	require.Zero(t, d.code, d.stderr)
	require.Equal(t, "ops", strings.TrimSpace(d.stdout))

	// nats stream ls: the jetpool streams.
	ls := natsCLI(t, url, "stream", "ls")
	require.Zero(t, ls.code, ls.stderr)
	for _, s := range []string{"JETPOOL_WORK", "JETPOOL_DLQ", "JETPOOL_RESULTS"} {
		assert.Contains(t, ls.stdout, s)
	}
	// nats consumer info: the job's backlog.
	ci := natsCLI(t, url, "consumer", "info", "JETPOOL_WORK", "jetpool-ops")
	require.Zero(t, ci.code, ci.stderr)
	assert.Regexp(t, fmt.Sprintf(`Unprocessed Messages: %d\b`, n), ci.stdout)

	// Pause the job before any worker runs; a worker then gets none of its records.
	pause := natsCLI(t, url, "consumer", "pause", "JETPOOL_WORK", "jetpool-ops", "1h", "--force")
	require.Zero(t, pause.code, pause.stderr)
	assert.Contains(t, pause.stdout, "Paused JETPOOL_WORK > jetpool-ops until")
	w := start(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_ACK_WAIT": "10s", "JETPOOL_LOG_LEVEL": "info",
		"JETPOOL_METRICS_ADDR": "127.0.0.1:0"}, "worker", "--concurrency", "4")
	w.waitOutput(t, regexp.MustCompile(`"job":"ops".*serving job`), 20*time.Second)
	metricsAddr := w.waitOutput(t, regexp.MustCompile(`"addr":"(127\.0\.0\.1:\d+)".*metrics on`), 5*time.Second)
	s := jobStatus(t, env, "ops")
	assert.True(t, s.Paused)
	assert.Equal(t, 1, s.Workers, "the worker answers status")
	// The worker has been polling for at least the 300ms status waits for its
	// answer: while paused it has taken nothing.
	s = jobStatus(t, env, "ops")
	assert.EqualValues(t, n, s.Queued, "paused: nothing delivered")
	assert.Zero(t, s.InFlight+s.Waiting+s.Succeeded+s.Failed, "paused: nothing delivered")
	ci = natsCLI(t, url, "consumer", "info", "JETPOOL_WORK", "jetpool-ops")
	assert.Regexp(t, `Paused Until`, ci.stdout)
	assert.Regexp(t, fmt.Sprintf(`Unprocessed Messages: %d\b`, n), ci.stdout)
	assert.Regexp(t, `Outstanding Acks: 0 `, ci.stdout)

	resume := natsCLI(t, url, "consumer", "resume", "JETPOOL_WORK", "jetpool-ops", "--force")
	require.Zero(t, resume.code, resume.stderr)
	assert.Contains(t, resume.stdout, "was resumed")

	// jetpool status while the job runs: consistent snapshots, and it sees
	// records in flight and records waiting for their delayed redelivery.
	var seenInFlight, seenWaiting bool
	var final status
	testenv.Eventually(t, 30*time.Second, func() bool {
		s := jobStatus(t, env, "ops")
		require.LessOrEqual(t, s.Succeeded+s.Failed, s.Total, "%+v", s)
		require.LessOrEqual(t, s.InFlight, int64(4), "%+v", s)
		var dead int64
		for _, v := range s.DeadLetter {
			dead += v
		}
		require.Equal(t, s.Failed, dead, "failed = dead letters by reason: %+v", s)
		seenInFlight = seenInFlight || s.InFlight > 0
		seenWaiting = seenWaiting || s.Waiting > 0
		final = s
		return s.Succeeded+s.Failed == n && s.Queued == 0 && s.InFlight == 0 && s.Waiting == 0
	}, "job ops finished: %+v", &final)
	assert.True(t, seenInFlight, "status showed records in flight")
	assert.True(t, seenWaiting, "status showed records waiting for redelivery")

	// Exact: the figures equal an independent tally of every result and dead letter.
	b := connectTo(t, url)
	j, _, err := b.GetJob(context.Background(), "ops")
	require.NoError(t, err)
	res := checkResults(t, b, j, n)
	var ok, redelivered int64
	byReason := map[string]int64{}
	for _, r := range res {
		if r.Status == broker.StatusOK {
			ok++
		} else {
			byReason[r.Reason]++
		}
		if r.Recovery.Deliveries > 1 {
			redelivered++
		}
	}
	assert.Equal(t, ok, final.Succeeded)
	assert.Equal(t, int64(n)-ok, final.Failed)
	assert.Equal(t, byReason, final.DeadLetter)
	assert.Positive(t, redelivered, "some records needed a redelivery")
	assert.Positive(t, final.Failed, "some records were dead-lettered")
	dlq, err := b.Stream(context.Background(), broker.StreamDLQ)
	require.NoError(t, err)
	dinfo, err := dlq.Info(context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, final.Failed, dinfo.State.Msgs, "one dead letter per failed record")
	require.Less(t, final.Failed, int64(10), "`nats stream view` shows one page of 10 without prompting")

	// nats stream view JETPOOL_DLQ: the story of each dead letter in its headers.
	view := natsCLIOnTerminal(t, url, "stream", "view", "JETPOOL_DLQ")
	for _, h := range []string{"Jetpool-Job: ops", "Jetpool-Action: answer", "Jetpool-Record: r", "Jetpool-Reason: ",
		"Jetpool-Error-Class: ", "Jetpool-Error: failed ", "Jetpool-Attempts: ", "Jetpool-Deliveries: ",
		"Jetpool-Provider: sim", "Jetpool-Model: sim-1", "Jetpool-Failed-At: "} {
		assert.Contains(t, view, h)
	}
	assert.Equal(t, int(final.Failed), strings.Count(view, "Subject: jetpool.dlq.ops.answer"), view)
	// The same, one dead letter, without a terminal (for scripts).
	get := natsCLI(t, url, "stream", "get", "JETPOOL_DLQ", "1")
	require.Zero(t, get.code, get.stderr)
	assert.Contains(t, get.stdout, "Jetpool-Reason: ")
	assert.Contains(t, get.stdout, "Jetpool-Error: failed ")

	// The worker's observability endpoints.
	metrics := httpGet(t, "http://"+metricsAddr+"/metrics")
	assert.Contains(t, metrics, `jetpool_records_total{action="answer",class="",outcome="ok"} `+fmt.Sprint(ok))
	assert.Contains(t, metrics, "jetpool_call_duration_seconds_bucket")
	assert.Contains(t, httpGet(t, "http://"+metricsAddr+"/healthz"), "ok")
	assert.Contains(t, httpGet(t, "http://"+metricsAddr+"/readyz"), "ready")

	w.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, w.wait(t, 10*time.Second))
	srv.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, srv.wait(t, 10*time.Second))
	t.Logf("operations: %d records, %d ok, %d dead-lettered %v, %d needed a redelivery", n, ok, final.Failed, byReason, redelivered)
}

// connectTo connects the test to an external server, as a jetpool process would.
func connectTo(t testing.TB, url string) *broker.Broker {
	t.Helper()
	cfg := testenv.Config(t, testenv.Options{})
	cfg.NATSURL = url
	b, err := broker.Connect(context.Background(), cfg, testenv.Logger(t))
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func httpGet(t testing.TB, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, body)
	return string(body)
}
