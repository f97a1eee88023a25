package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// deployNATS is a nats-server process on the shipped single-node test
// config (deploy/nats/testdata/permissions-test.conf, which includes
// deploy/nats/accounts.conf as is), its passwords in its environment as
// the cluster's nodes get them. log reads the server's log so far.
type deployNATS struct {
	url string
	log func() string
}

func startDeployNATS(t testing.TB) deployNATS {
	t.Helper()
	bin := tool(t, "nats-server")
	ports := freePorts(t, 2)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "nats.log")
	logf, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(bin, "-c", "../deploy/nats/testdata/permissions-test.conf",
		"-a", "127.0.0.1", "-p", fmt.Sprint(ports[0]), "-m", fmt.Sprint(ports[1]), "-sd", filepath.Join(dir, "store"))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NATS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range deployPasswords {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	logf.Close()
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	readLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	testenv.Eventually(t, 20*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("nats-server exited:\n%s", readLog())
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1]))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "nats-server on the shipped config is healthy")
	return deployNATS{url: fmt.Sprintf("nats://127.0.0.1:%d", ports[0]), log: readLog}
}

// as is the environment of a jetpool child as deploy user (tenant-role).
func (d deployNATS) as(user string, extra ...string) map[string]string {
	env := map[string]string{"JETPOOL_NATS_URL": d.url, "JETPOOL_NATS_USER": user, "JETPOOL_NATS_PASSWORD": deployPassword(user),
		"JETPOOL_ACK_WAIT": "5s", "JETPOOL_LOG_LEVEL": "info"}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// nats runs the real nats CLI (bin) as user, with a short timeout: a
// request the server refuses is dropped, and the CLI waits for its answer
// that long. It may run on any goroutine: it reports a failure to start
// the CLI as exit code -1, with why on stderr.
func (d deployNATS) nats(bin, user string, args ...string) result {
	home, err := os.MkdirTemp("", "jetpool-e2e-nats-")
	if err != nil {
		return result{code: -1, stderr: err.Error()}
	}
	defer os.RemoveAll(home)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--server", d.url, "--user", user, "--password", deployPassword(user),
		"--timeout", "2s"}, args...)...)
	// An empty home: no saved context of the machine leaks in.
	cmd.Env = []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH"), "TZ=UTC"}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	if err != nil && cmd.ProcessState == nil {
		r.code, r.stderr = -1, err.Error()
	}
	return r
}

// tenantWorkflow is the job of a tenant: the sim, its key checked, so the
// records the auth fault draws fail with "invalid api key" (dead-lettered
// at once) until a worker holds the valid key.
const tenantWorkflow = `providers:
  sim:
    kind: sim
    api_key_env: SIM_API_KEY
    sim: {seed: 11, valid_key: sk-sim-fixed, faults: {auth: 0.3}}
defaults: {provider: sim, model: sim-1}
actions:
  - name: answer
    prompt: "Answer: {{ .text }}"
`

const tenantRecords = 20

// tenantInput writes tenant's records: the same ids in every tenant (r1…),
// each text a secret of the tenant's ("acme-secret-7").
func tenantInput(t testing.TB, tenant string) string {
	t.Helper()
	var sb strings.Builder
	for i := 1; i <= tenantRecords; i++ {
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":\"%s-secret-%d\"}\n", i, tenant, i)
	}
	p := filepath.Join(t.TempDir(), tenant+".jsonl")
	require.NoError(t, os.WriteFile(p, []byte(sb.String()), 0o600))
	return p
}

// Tenants on the shipped deploy config: two tenants' jobs run side by side
// on one nats-server process, each tenant's commands as the role the
// deploy README gives them (dispatch as the dispatcher, worker as the
// worker, status / results / dlq / ui --read-only as the viewer, retry
// and ui's replay and purge as the operator) without one refused
// operation; then the real `nats` CLI as every user of the other tenant
// (and sys) tries every way at acme's job — read, purge, delete, fail,
// forge — and as acme's own dispatcher, worker and viewer what their role
// lacks. Each is refused by the server or lands in the other tenant's own
// account; acme's job, results, dead letters and job state stay as they
// were, and no output holds a byte of acme's records.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	srv := startDeployNATS(t)
	tenants := []string{"acme", "globex"}
	job := func(tenant string) string { return tenant + "-report" }
	wfPath := filepath.Join(t.TempDir(), "workflow.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte(tenantWorkflow), 0o600))

	// Each tenant dispatches its job and works it with a key that is not
	// the valid one: a few records are dead-lettered.
	workers := map[string]*proc{}
	for _, tn := range tenants {
		d := jetpool(t, srv.as(tn+"-dispatcher"), "dispatch", wfPath, "--input", tenantInput(t, tn), "--job", job(tn), "--no-preflight")
		require.Zero(t, d.code, "dispatch as %s-dispatcher: %s", tn, d.stderr)
		workers[tn] = start(t, srv.as(tn+"-worker", "SIM_API_KEY", "sk-sim-wrong"), "worker", "--concurrency", "4")
	}
	failed := map[string]int64{}
	for _, tn := range tenants {
		var s status
		testenv.Eventually(t, 60*time.Second, func() bool {
			s = jobStatus(t, srv.as(tn+"-viewer"), job(tn))
			return s.Succeeded+s.Failed == tenantRecords
		}, "%s's job is worked by its worker: %+v", tn, &s)
		require.GreaterOrEqual(t, s.Failed, int64(2), "%s: some records drew the auth fault", tn)
		require.Equal(t, 1, s.Workers, "%s sees its own worker only", tn)
		failed[tn] = s.Failed
	}

	// The viewer: status, results, dlq list and show, ui --read-only — of
	// its own tenant only.
	for _, tn := range tenants {
		other := "globex"
		if tn == other {
			other = "acme"
		}
		v := srv.as(tn + "-viewer")
		r := jetpool(t, v, "status", "--json")
		require.Zero(t, r.code, r.stderr)
		var all []status
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &all), r.stdout)
		require.Len(t, all, 1, "%s's viewer lists its own job only", tn)
		require.Equal(t, job(tn), all[0].Job)
		r = jetpool(t, v, "status", job(other))
		require.NotZero(t, r.code, "%s's viewer finds no job %s", tn, job(other))

		r = jetpool(t, v, "results", job(tn))
		require.Zero(t, r.code, r.stderr)
		require.Equal(t, tenantRecords, strings.Count(r.stdout, "\n"), r.stdout)
		require.Contains(t, r.stdout, tn+"-secret-")
		require.NotContains(t, r.stdout, other+"-secret-")

		r = jetpool(t, v, "dlq", "list", "--json")
		require.Zero(t, r.code, r.stderr)
		require.EqualValues(t, failed[tn], strings.Count(r.stdout, `"job":"`+job(tn)+`"`), r.stdout)
		require.NotContains(t, r.stdout, job(other))
		seq := regexp.MustCompile(`"seq":(\d+)`).FindStringSubmatch(r.stdout)
		require.NotNil(t, seq, r.stdout)
		r = jetpool(t, v, "dlq", "show", seq[1])
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "invalid api key")
		require.Contains(t, r.stdout, tn+"-secret-")

		ui := start(t, v, "ui", "--read-only", "--addr", "127.0.0.1:0")
		base := ui.waitOutput(t, regexp.MustCompile(`jetpool ui on (http://127\.0\.0\.1:\d+)/ \(read-only\)`), 20*time.Second)
		c := newUIClient(t, base)
		var jobs struct {
			Jobs []struct {
				Job string `json:"job"`
			} `json:"jobs"`
		}
		c.get(t, "/api/jobs", &jobs)
		require.Len(t, jobs.Jobs, 1)
		require.Equal(t, job(tn), jobs.Jobs[0].Job)
		code, body := c.post(t, "/api/dlq/replay", `{"job":"`+job(tn)+`"}`)
		require.Equal(t, http.StatusForbidden, code, "a read-only dashboard replays nothing: %s", body)
		ui.signal(t, syscall.SIGTERM)
		ui.wait(t, 10*time.Second)
	}

	// The operator: acme's replays its dead letters with `jetpool retry`,
	// globex's purges one from the dashboard and replays the rest there;
	// a worker with the valid key works them.
	for _, tn := range tenants {
		workers[tn].signal(t, syscall.SIGTERM)
		require.Zero(t, workers[tn].wait(t, 30*time.Second))
	}
	r := jetpool(t, srv.as("acme-operator"), "retry", "--job", job("acme"))
	require.Zero(t, r.code, r.stderr)
	g := start(t, srv.as("globex-operator"), "ui", "--addr", "127.0.0.1:0")
	c := newUIClient(t, g.waitOutput(t, regexp.MustCompile(`jetpool ui on (http://127\.0\.0\.1:\d+)/`), 20*time.Second))
	code, body := c.post(t, "/api/dlq/purge", `{"job":"globex-report","limit":1}`)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"purged":1}`, body)
	code, body = c.post(t, "/api/dlq/replay", `{"job":"globex-report"}`)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, fmt.Sprintf(`"replayed":%d`, failed["globex"]-1))
	for _, tn := range tenants {
		workers[tn] = start(t, srv.as(tn+"-worker", "SIM_API_KEY", "sk-sim-fixed"), "worker", "--concurrency", "4")
	}
	want := map[string]int64{"acme": tenantRecords, "globex": tenantRecords - 1}
	for _, tn := range tenants {
		var s status
		testenv.Eventually(t, 60*time.Second, func() bool {
			s = jobStatus(t, srv.as(tn+"-viewer"), job(tn))
			return s.Succeeded == want[tn] && s.Queued == 0 && s.InFlight == 0
		}, "%s's replay is worked: %+v", tn, &s)
	}
	// Every one of those commands ran with its role's rights and no more.
	require.NotContains(t, srv.log(), "Violation", "no jetpool command was refused anything")

	// acme's job as it stands, to compare after the attempts.
	before := tenantSnapshot(t, srv, "acme")
	require.EqualValues(t, tenantRecords, before.okResults)

	// The attempts. Another tenant's users, and sys: every operation on
	// acme's job. From another account acme's streams, buckets and
	// subjects cannot be named: what an operation reaches, if anything, is
	// the user's own account.
	acme := job("acme")
	forged := `{"id":"r1","status":"ok","output":"FORGED","action":"answer","job":"` + acme + `"}`
	attempts := func() [][]string {
		return [][]string{
			{"stream", "ls"},
			{"stream", "get", "JETPOOL_RESULTS", "1"},
			{"stream", "get", "JETPOOL_WORK", "1"},
			{"stream", "get", "JETPOOL_DLQ", "1"},
			{"kv", "get", "JETPOOL_JOBS", acme},
			{"kv", "ls", "JETPOOL_JOB_STATE"},
			{"stream", "purge", "JETPOOL_WORK", "-f"},
			{"stream", "purge", "JETPOOL_RESULTS", "-f"},
			{"stream", "purge", "JETPOOL_DLQ", "-f"},
			{"stream", "rmm", "JETPOOL_RESULTS", "1", "-f"},
			{"stream", "rm", "KV_JETPOOL_JOBS", "-f"},
			{"consumer", "next", "JETPOOL_WORK", "jetpool-" + acme},
			{"consumer", "rm", "JETPOOL_WORK", "jetpool-" + acme, "-f"},
			{"kv", "put", "JETPOOL_JOB_STATE", acme, `{"status":"failed","reason":"forged"}`},
			{"kv", "del", "JETPOOL_JOBS", acme, "-f"},
			{"kv", "rm", "JETPOOL_JOB_STATE", "-f"},
			{"pub", "jetpool.results." + acme + ".answer.ok.r1", forged},
			{"pub", "jetpool.work." + acme + ".answer", `{"id":"r99","text":"more calls"}`},
			{"pub", "jetpool.dlq." + acme + ".answer", `{"id":"r1"}`},
			{"pub", "$KV.JETPOOL_JOB_STATE." + acme, `{"status":"failed"}`},
			{"req", "jetpool.ctl.stats", ""},
		}
	}
	type attempt struct {
		user string
		args []string
		// refused: the API or publish subject the server must refuse (the
		// user's own tenant); "" for another tenant's user, whose attempt
		// lands in its own account.
		refused string
	}
	var all []attempt
	for _, u := range []string{"globex-dispatcher", "globex-worker", "globex-viewer", "globex-operator", "sys"} {
		for _, a := range attempts() {
			all = append(all, attempt{user: u, args: a})
		}
	}
	// acme's own users, what their role may not do to acme's job.
	own := func(user, subject string, args ...string) attempt {
		return attempt{user: user, args: args, refused: subject}
	}
	all = append(all,
		own("acme-dispatcher", "$JS.API.STREAM.PURGE.JETPOOL_RESULTS", "stream", "purge", "JETPOOL_RESULTS", "-f"),
		own("acme-dispatcher", "$JS.API.STREAM.PURGE.JETPOOL_DLQ", "stream", "purge", "JETPOOL_DLQ", "-f"),
		own("acme-dispatcher", "$JS.API.STREAM.MSG.DELETE.JETPOOL_RESULTS", "stream", "rmm", "JETPOOL_RESULTS", "1", "-f"),
		own("acme-dispatcher", "$JS.API.STREAM.DELETE.JETPOOL_WORK", "stream", "rm", "JETPOOL_WORK", "-f"),
		own("acme-dispatcher", "$JS.API.CONSUMER.MSG.NEXT.JETPOOL_WORK.jetpool-"+acme, "consumer", "next", "JETPOOL_WORK", "jetpool-"+acme),
		own("acme-dispatcher", "$JS.API.CONSUMER.DELETE.JETPOOL_WORK.jetpool-"+acme, "consumer", "rm", "JETPOOL_WORK", "jetpool-"+acme, "-f"),
		own("acme-dispatcher", "jetpool.results."+acme+".answer.ok.r1", "pub", "jetpool.results."+acme+".answer.ok.r1", forged),
		own("acme-dispatcher", "jetpool.dlq."+acme+".answer", "pub", "jetpool.dlq."+acme+".answer", `{"id":"r1"}`),

		// (A worker may purge its own tenant's JETPOOL_WORK: batched writes
		// keep acked work for the workers to purge, and a worker may already
		// ack any of its tenant's records. Another tenant's stream it cannot
		// name: the attempts above, as globex-worker.)
		own("acme-worker", "$JS.API.STREAM.PURGE.JETPOOL_RESULTS", "stream", "purge", "JETPOOL_RESULTS", "-f"),
		own("acme-worker", "$JS.API.STREAM.DELETE.JETPOOL_RESULTS", "stream", "rm", "JETPOOL_RESULTS", "-f"),
		own("acme-worker", "$JS.API.CONSUMER.DELETE.JETPOOL_WORK.jetpool-"+acme, "consumer", "rm", "JETPOOL_WORK", "jetpool-"+acme, "-f"),
		own("acme-worker", "$KV.JETPOOL_JOBS."+acme, "kv", "put", "JETPOOL_JOBS", acme, `{"rewritten":true}`),
		own("acme-worker", "$KV.JETPOOL_JOBS."+acme, "kv", "del", "JETPOOL_JOBS", acme, "-f"),
		own("acme-worker", "$JS.API.STREAM.DELETE.KV_JETPOOL_JOB_STATE", "kv", "rm", "JETPOOL_JOB_STATE", "-f"),

		own("acme-viewer", "jetpool.results."+acme+".answer.ok.r1", "pub", "jetpool.results."+acme+".answer.ok.r1", forged),
		own("acme-viewer", "$KV.JETPOOL_JOB_STATE."+acme, "kv", "put", "JETPOOL_JOB_STATE", acme, `{"status":"failed","reason":"forged"}`),
		own("acme-viewer", "$KV.JETPOOL_JOBS."+acme, "kv", "del", "JETPOOL_JOBS", acme, "-f"),
		own("acme-viewer", "$JS.API.STREAM.PURGE.JETPOOL_WORK", "stream", "purge", "JETPOOL_WORK", "-f"),
		own("acme-viewer", "$JS.API.STREAM.PURGE.JETPOOL_DLQ", "stream", "purge", "JETPOOL_DLQ", "-f"),
		own("acme-viewer", "$JS.API.STREAM.MSG.DELETE.JETPOOL_RESULTS", "stream", "rmm", "JETPOOL_RESULTS", "1", "-f"),
		own("acme-viewer", "$JS.API.CONSUMER.MSG.NEXT.JETPOOL_WORK.jetpool-"+acme, "consumer", "next", "JETPOOL_WORK", "jetpool-"+acme),
		own("acme-viewer", "jetpool.work."+acme+".answer", "pub", "jetpool.work."+acme+".answer", `{"id":"r99","text":"more calls"}`),
	)

	bin := tool(t, "nats")
	results := make([]result, len(all))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, a := range all {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			results[i] = srv.nats(bin, a.user, a.args...)
		})
	}
	wg.Wait()
	for i, a := range all {
		r := results[i]
		out := r.stdout + r.stderr
		what := a.user + ": nats " + strings.Join(a.args, " ")
		require.NotEqual(t, -1, r.code, "%s: %s", what, r.stderr)
		assert.NotContains(t, out, "acme-secret", "%s shows none of acme's records:\n%s", what, out)
		assert.NotContains(t, out, "sk-sim", "%s", what)
		if a.refused != "" {
			assert.NotZero(t, r.code, "%s is refused:\n%s", what, out)
			assert.Contains(t, out, `Permissions Violation for Publish to "`+a.refused+`"`, "%s is refused by the server:\n%s", what, out)
			assert.Regexp(t, `"ACME/user:`+regexp.QuoteMeta(a.user)+`" - Publish Violation - Subject "`+regexp.QuoteMeta(a.refused)+`"`, srv.log(),
				"the server logs %s", what)
		}
		if a.user == "sys" && a.args[0] != "pub" && a.args[0] != "req" {
			assert.NotZero(t, r.code, "%s: the system account has no JetStream:\n%s", what, out)
		}
	}

	// acme's job is as it was, and its own commands say so.
	after := tenantSnapshot(t, srv, "acme")
	assert.Equal(t, before, after, "acme's job after every attempt")
	v := srv.as("acme-viewer")
	s := jobStatus(t, v, acme)
	assert.Equal(t, "completed", s.Status)
	assert.EqualValues(t, tenantRecords, s.Succeeded)
	r = jetpool(t, v, "results", acme)
	require.Zero(t, r.code, r.stderr)
	assert.Equal(t, tenantRecords, strings.Count(r.stdout, "\n"))
	assert.Equal(t, tenantRecords, strings.Count(r.stdout, `{"id":"r`))
	assert.NotContains(t, r.stdout, "FORGED")
	t.Logf("%d attempts, %d of them on acme's own users' missing rights; acme unchanged: %+v", len(all),
		strings.Count(srv.log(), `"ACME/user:`), after)
}

// tenantState is what of a tenant's job an attempt could change.
type tenantState struct {
	work, results, dlq       uint64 // messages in each stream
	resultsLast, dlqLast     uint64 // last sequences: a delete then a publish shows
	okResults                int
	jobState, jobSpec        string
	consumers                int
	jobStateRev, jobSpecRevs uint64
}

// tenantSnapshot reads tenant's job as its operator.
func tenantSnapshot(t testing.TB, srv deployNATS, tenant string) tenantState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	user := tenant + "-operator"
	nc, err := nats.Connect(srv.url, nats.UserInfo(user, deployPassword(user)))
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var st tenantState
	info := func(name string) *jetstream.StreamInfo {
		s, err := js.Stream(ctx, name)
		require.NoError(t, err, "%s of %s", name, tenant)
		i, err := s.Info(ctx)
		require.NoError(t, err)
		return i
	}
	st.work = info(broker.StreamWork).State.Msgs
	ri := info(broker.StreamResults)
	st.results, st.resultsLast = ri.State.Msgs, ri.State.LastSeq
	di := info(broker.StreamDLQ)
	st.dlq, st.dlqLast = di.State.Msgs, di.State.LastSeq
	res, err := js.Stream(ctx, broker.StreamResults)
	require.NoError(t, err)
	ok, err := res.Info(ctx, jetstream.WithSubjectFilter("jetpool.results."+tenant+"-report.answer.ok.*"))
	require.NoError(t, err)
	st.okResults = len(ok.State.Subjects)
	for bucket, v := range map[string]*string{broker.BucketJobState: &st.jobState, broker.BucketJobs: &st.jobSpec} {
		kv, err := js.KeyValue(ctx, bucket)
		require.NoError(t, err)
		e, err := kv.Get(ctx, tenant+"-report")
		require.NoError(t, err, "%s of %s", bucket, tenant)
		*v = string(e.Value())
		if bucket == broker.BucketJobState {
			st.jobStateRev = e.Revision()
		} else {
			st.jobSpecRevs = e.Revision()
		}
	}
	work, err := js.Stream(ctx, broker.StreamWork)
	require.NoError(t, err)
	names := work.ConsumerNames(ctx)
	for range names.Name() {
		st.consumers++
	}
	require.NoError(t, names.Err())
	return st
}

// uiClient talks to a dashboard's API as its page does: the session's
// CSRF cookie and header on every POST.
type uiClient struct {
	base string
	hc   *http.Client
	csrf string
}

func newUIClient(t testing.TB, base string) *uiClient {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &uiClient{base: base, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
	var s struct {
		CSRF string `json:"csrf"`
	}
	c.get(t, "/api/session", &s)
	require.NotEmpty(t, s.CSRF)
	c.csrf = s.CSRF
	return c
}

func (c *uiClient) get(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := c.hc.Get(c.base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, v), "GET %s: %s", path, body)
}

func (c *uiClient) post(t testing.TB, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Jetpool-CSRF", c.csrf)
	resp, err := c.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}
