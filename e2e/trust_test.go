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
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/workflow"
)

// statusWithRefusals is what these tests read of `jetpool status --json`.
type statusWithRefusals struct {
	Succeeded  int64 `json:"succeeded"`
	Failed     int64 `json:"failed"`
	Unservable []struct {
		Worker string `json:"worker"`
		Reason string `json:"reason"`
	} `json:"unservable"`
}

func refusals(t testing.TB, env map[string]string, job string) statusWithRefusals {
	t.Helper()
	r := jetpool(t, env, "status", job, "--json")
	require.Zero(t, r.code, r.stderr)
	var s statusWithRefusals
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	return s
}

// metricsAddr is the address a worker's metrics server logged.
var metricsAddrRE = regexp.MustCompile(`"addr":"(127\.0\.0\.1:\d+)"[^\n]*metrics on`)

// A worker without the provider's key took any job and
// dead-lettered 282 of 400 records. Now a keyless worker next to a keyed
// one takes none of the job's records: 0 dead letters, the job completes,
// and the keyless one says why once — in its log, in `jetpool status` and
// on its /readyz.
func TestKeylessWorkerNextToAKeyedOne(t *testing.T) {
	t.Parallel()
	const key = "sk-e2e-keyed-7f3a"
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key"))
			return
		}
		_, _ = io.WriteString(w, providertest.OpenAIChat("m", "ok", 1, 1))
	}))
	host := strings.TrimPrefix(srv.URL, "http://")
	b, natsURL := embeddedServer(t, 5*time.Second)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s/v1, api_key_env: E2E_PROVIDER_KEY}
actions:
  - {name: ask, provider: local, model: m, prompt: "{{ .text }}"}
`, srv.URL))
	const n = 400
	job := dispatch(t, b, wf, n, "keyed")

	bind := "E2E_PROVIDER_KEY=" + host
	keyless := start(t, workerEnv(natsURL, 5*time.Second, "JETPOOL_KEY_HOSTS", bind, "JETPOOL_WORKER_NAME", "keyless-1",
		"JETPOOL_METRICS_ADDR", "127.0.0.1:0"), "worker", "--concurrency", "16")
	why := "provider local: environment variable E2E_PROVIDER_KEY is not set: missing API key"
	keyless.waitOutput(t, regexp.MustCompile(`cannot serve this job`), 20*time.Second)
	require.Contains(t, keyless.stderr.String(), why)

	op := workerEnv(natsURL, 5*time.Second)
	s := refusals(t, op, job.ID)
	require.Len(t, s.Unservable, 1)
	require.Equal(t, "keyless-1", s.Unservable[0].Worker)
	require.Equal(t, why, s.Unservable[0].Reason)
	text := jetpool(t, op, "status", job.ID)
	require.Contains(t, text.stdout, "worker keyless-1 cannot serve job keyed: "+why)
	addr := keyless.waitOutput(t, metricsAddrRE, 10*time.Second)
	resp, err := http.Get("http://" + addr + "/readyz")
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "ready: other jobs it can serve")
	require.Equal(t, "ready\ncannot serve job keyed: "+why+"\n", string(body))

	keyed := start(t, workerEnv(natsURL, 5*time.Second, "JETPOOL_KEY_HOSTS", bind, "E2E_PROVIDER_KEY", key), "worker", "--concurrency", "16")
	j, p := waitFinished(t, b, job.ID, 60*time.Second)
	require.EqualValues(t, n, p.OK, "%+v", p.Counts)
	require.Zero(t, p.Failed, "0 dead letters")
	checkResults(t, b, j, n)
	for _, r := range srv.Requests() {
		require.Equal(t, "Bearer "+key, r.Header.Get("Authorization"), "every call came from the keyed worker")
	}
	require.Equal(t, 1, strings.Count(keyless.stderr.String(), "cannot serve this job"), "said once")
	require.NotContains(t, keyed.stderr.String(), "cannot serve")
	// The first status after the end records that the job completed; the
	// worker then drops it from its list.
	testenv.Eventually(t, 10*time.Second, func() bool { return len(refusals(t, op, job.ID).Unservable) == 0 },
		"a finished job is no longer listed")
}

// With the deploy/ users, a workflow written by the dispatcher
// user named the worker's NATS password (or HOME, or any readable file) as
// its key and an endpoint of its own: the worker sent it there as a Bearer
// token. Now the worker sends nothing (the recording server receives no
// request), says why, and `jetpool dispatch` refuses such a workflow before
// anything is published.
func TestDispatcherCannotTakeWorkerSecrets(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, providertest.OpenAIChat("m", "ok", 1, 1))
	}))
	// On loopback, where keyless calls are allowed by default: a key is
	// sent only where it is bound, and these are bound nowhere.
	host := strings.TrimPrefix(srv.URL, "http://")
	evil := srv.URL + "/v1"
	natsURL, as := deployServer(t)

	yaml := func(src string) string {
		return fmt.Sprintf(`
providers:
  evil: {kind: openai, base_url: %s, %s}
actions:
  - {name: ask, provider: evil, model: m, prompt: "{{ .text }}"}
`, evil, src)
	}
	// The CLI refuses a JETPOOL_ variable in its own workflow file, before
	// preflight could send it anywhere.
	wfPath := filepath.Join(t.TempDir(), "steal.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(yaml("api_key_env: JETPOOL_NATS_PASSWORD")), 0o600))
	r := jetpool(t, as("dispatcher"), "dispatch", wfPath, "--input", testenv.Records(t, 3), "--job", "cli")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "provider evil: key variable JETPOOL_NATS_PASSWORD is jetpool's own configuration, never sent as a provider key (not to "+host+", nor anywhere)")

	// A dispatcher that writes the job itself, as the dispatcher user.
	cfg := testenv.Config(t, testenv.Options{})
	cfg.NATSURL, cfg.NATSUser, cfg.NATSPassword = natsURL, deployUser("dispatcher"), deployPassword("dispatcher")
	cfg.DedupeWindow = 2 * time.Hour // the topology a `jetpool worker` expects (as the CLI makes it)
	d, err := broker.Connect(context.Background(), cfg, testenv.Logger(t))
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.NoError(t, d.Ensure(context.Background()))
	srcs := []string{"api_key_env: JETPOOL_NATS_PASSWORD", "api_key_env: HOME", "api_key_file: /etc/hostname"}
	for i, src := range srcs {
		wf, err := workflow.Parse("steal.yaml", []byte(yaml(src)))
		require.NoError(t, err)
		testenv.Dispatch(t, d, wf, testenv.Records(t, 3), dispatcher.Options{JobID: fmt.Sprintf("steal%d", i)})
	}

	w := start(t, as("worker"), "worker", "--concurrency", "4")
	testenv.Eventually(t, 20*time.Second, func() bool {
		return strings.Count(w.stderr.String(), "cannot serve this job") == len(srcs)
	}, "the worker refuses the three jobs")
	op := as("operator")
	for i, want := range []string{
		"provider evil: key variable JETPOOL_NATS_PASSWORD is jetpool's own configuration, never sent as a provider key",
		"provider evil: key variable HOME is bound to no host on this worker, so it is not sent to " + host,
		"provider evil: key file /etc/hostname is bound to no host on this worker, so it is not sent to " + host,
	} {
		s := refusals(t, op, fmt.Sprintf("steal%d", i))
		require.Len(t, s.Unservable, 1)
		require.Contains(t, s.Unservable[0].Reason, want)
		require.Zero(t, s.Failed, "nothing dead-lettered")
	}
	require.Empty(t, srv.Requests(), "nothing was sent")
	require.NotContains(t, w.stderr.String(), deployPassword("worker"))
}

// Workers get no write access to workflows: as the deploy/ worker user a
// put into JETPOOL_JOBS is refused and the workflow stays as dispatched,
// while a raise still fails the job (its state is in JETPOOL_JOB_STATE). A
// rollup of every job state (the worst a worker can write there) leaves
// every workflow in place.
func TestWorkerCannotRewriteAWorkflow(t *testing.T) {
	t.Parallel()
	natsURL, as := deployServer(t)
	wfPath := filepath.Join(t.TempDir(), "raise.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(simYAML(0, "      fail_first: 100\n")+
		"    retry: {max_attempts: 1, on_exhausted: raise, redeliver: {max_deliveries: 1}}\n"), 0o600))
	d := jetpool(t, as("dispatcher"), "dispatch", wfPath, "--input", testenv.Records(t, 20), "--job", "raised", "--no-preflight")
	require.Zero(t, d.code, d.stderr)

	// The worker user, with the nats.go client.
	nc, err := nats.Connect(natsURL, nats.UserInfo(deployUser("worker"), deployPassword("worker")))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	violations := make(chan string, 8)
	nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() })
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := js.KeyValue(ctx, broker.BucketJobs)
	require.NoError(t, err)
	before, err := jobs.Get(ctx, "raised")
	require.NoError(t, err, "the worker reads the workflow")
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	_, err = jobs.Put(pctx, "raised", []byte(`{"id":"raised","workflow":{"actions":[]}}`))
	pcancel()
	require.Error(t, err, "the worker's put into JETPOOL_JOBS is refused")
	select {
	case v := <-violations:
		require.Contains(t, v, `Permissions Violation for Publish to "$KV.JETPOOL_JOBS.raised"`)
	case <-time.After(10 * time.Second):
		t.Fatal("no permission violation reported")
	}
	after, err := jobs.Get(ctx, "raised")
	require.NoError(t, err)
	require.Equal(t, string(before.Value()), string(after.Value()), "the workflow is as dispatched")

	w := start(t, as("worker"), "worker", "--concurrency", "2")
	op := as("operator")
	testenv.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(jetpool(t, op, "status", "raised").stdout, "raised failed: action answer, record")
	}, "the worker user's raise failed the job")
	require.NotContains(t, w.stderr.String(), "could not mark the job failed")

	// A rollup of the whole state bucket, the worst a worker can write.
	m := nats.NewMsg("$KV." + broker.BucketJobState + ".raised")
	m.Header.Set("Nats-Rollup", "all")
	m.Data = []byte(`{"status":"running"}`)
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)
	still, err := jobs.Get(ctx, "raised")
	require.NoError(t, err, "the workflow survives a rollup of the job states")
	require.Equal(t, string(before.Value()), string(still.Value()))
}

// A 2 MB record against a stock nats-server (max_payload 1 MB)
// failed at publish with `nats: maximum payload exceeded`, exit 1, one
// record orphaned in JETPOOL_WORK and the job stuck at dispatching. Now the
// validation pass refuses it with file:line, exit 2, nothing published.
func TestRecordOverMaxPayload(t *testing.T) {
	t.Parallel()
	s := startAuthServer(t, &server.Options{}) // a stock server: max_payload 1 MB
	env := map[string]string{"JETPOOL_NATS_URL": s.ClientURL()}
	wfPath := filepath.Join(t.TempDir(), "workflow.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(simYAML(0, "")), 0o600))
	in := filepath.Join(t.TempDir(), "big.jsonl")
	big := strings.Repeat("x", 2<<20)
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"a","text":"small"}`+"\n"+`{"id":"b","text":"`+big+`"}`+"\n"+`{"id":"c","text":"small"}`+"\n"), 0o600))
	for _, cmd := range [][]string{{"dispatch", wfPath, "--input", in}, {"run", wfPath, "--input", in, "--no-progress"}} {
		r := jetpool(t, env, cmd...)
		require.Equal(t, 2, r.code, "%s: %s", cmd[0], r.stderr)
		require.Regexp(t, regexp.MustCompile(regexp.QuoteMeta(in)+`:2: the record is 2097\d+ bytes and its work message up to \d+, more than the NATS server's max_payload of 1048576 bytes \(raise max_payload on the NATS server \(deploy/README.md, "Big records"\)\)`), r.stderr)
		require.Contains(t, r.stderr, "nothing published")
	}
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	work, err := js.Stream(ctx, broker.StreamWork)
	require.NoError(t, err)
	info, err := work.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.State.Msgs, "nothing in JETPOOL_WORK")
	st := jetpool(t, env, "status")
	require.Zero(t, st.code, st.stderr)
	require.Contains(t, st.stdout, "no jobs", "no job left dispatching")
}

// `jetpool server --host 0.0.0.0` listened on every interface with no auth
// and no warning. Off loopback it now refuses to start without a token or
// a user and password, saying why (before it listens anywhere); with one it
// requires it of every client.
func TestServerOffLoopbackNeedsAuth(t *testing.T) {
	t.Parallel()
	for _, host := range []string{"0.0.0.0", "::", "192.0.2.1"} {
		r := jetpool(t, map[string]string{"JETPOOL_DATA_DIR": t.TempDir()}, "server", "--host", host, "--port", "-1", "--http-port", "0")
		require.Equal(t, 2, r.code, "host %q: %s", host, r.stderr)
		require.Contains(t, r.stderr, "listens beyond this machine, and the server has no auth unless you give it one: "+
			"set JETPOOL_NATS_TOKEN, or JETPOOL_NATS_USER and JETPOOL_NATS_PASSWORD")
	}
	r := jetpool(t, map[string]string{"JETPOOL_DATA_DIR": t.TempDir(), "JETPOOL_NATS_USER": "jp"}, "server", "--host", "0.0.0.0")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "set both JETPOOL_NATS_USER and JETPOOL_NATS_PASSWORD, or neither")

	// With a token (here on loopback: tests listen nowhere else), every
	// client needs it.
	srv := start(t, map[string]string{"JETPOOL_DATA_DIR": t.TempDir(), "JETPOOL_NATS_TOKEN": "tok-server-e2e"},
		"server", "--port", "-1", "--http-port", "0")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`), 20*time.Second)
	ok := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_NATS_TOKEN": "tok-server-e2e"})
	require.Zero(t, ok.code, ok.stderr)
	none := statusWith(t, map[string]string{"JETPOOL_NATS_URL": url})
	require.NotZero(t, none.code)
	require.Contains(t, strings.ToLower(none.stderr), "authorization violation")
}
