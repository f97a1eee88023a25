package deploy_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
)

// The tenants and roles of nats/accounts.conf: every tenant is an account
// with one user per role, named <tenant>-<role>.
var (
	tenants = []string{"acme", "globex"}
	roles   = []string{"dispatcher", "worker", "viewer", "operator"}
)

// Passwords the tests put in the environment for the $NATS_*_PASSWORD references of
// nats/accounts.conf: NATS_<TENANT>_<ROLE>_PASSWORD, and NATS_SYS_PASSWORD. Letters and
// digits only (see the note in accounts.conf).
var testPasswords = func() map[string]string {
	pw := map[string]string{"NATS_SYS_PASSWORD": "sysTestPw1"}
	for _, t := range tenants {
		for _, r := range roles {
			pw[passwordVar(t+"-"+r)] = t + r + "TestPw1"
		}
	}
	return pw
}()

// passwordVar is the variable that holds user's password.
func passwordVar(user string) string {
	return "NATS_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD"
}

var nodeConfigs = []string{"nats/nats-1.conf", "nats/nats-2.conf", "nats/nats-3.conf"}

func setPasswords(t *testing.T) {
	t.Helper()
	for k, v := range testPasswords {
		t.Setenv(k, v)
	}
}

// ---------------------------------------------------------------------------------
// (a) every YAML file under deploy/ parses (all documents of multi-document files),
// plus a few contract checks on what the manifests say.

func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	return files
}

func decodeAll(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "%s: document %d", path, len(docs)+1)
		if doc != nil { // an empty document between two "---"
			docs = append(docs, doc)
		}
	}
	return docs
}

func TestYAMLFilesParse(t *testing.T) {
	files := yamlFiles(t)
	// The deliverables; a rename must be deliberate.
	for _, want := range []string{
		"compose/compose.yaml",
		"k8s/nats-values.yaml",
		"k8s/worker-deployment.yaml",
		"k8s/worker-pdb.yaml",
		"k8s/keda-scaledobject.yaml",
		"k8s/worker-podmonitor.yaml",
		"k8s/purge-cronjob.yaml",
	} {
		assert.Contains(t, files, want)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			docs := decodeAll(t, f)
			assert.NotEmpty(t, docs, "no YAML document in %s", f)
			if strings.HasPrefix(f, "k8s/") && f != "k8s/nats-values.yaml" {
				for i, d := range docs {
					assert.NotEmpty(t, d["apiVersion"], "%s doc %d: apiVersion", f, i+1)
					assert.NotEmpty(t, d["kind"], "%s doc %d: kind", f, i+1)
				}
			}
		})
	}
}

// dig walks nested maps/lists: keys are map keys, ints index lists.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func byKind(docs []map[string]any, kind string) map[string]any {
	for _, d := range docs {
		if d["kind"] == kind {
			return d
		}
	}
	return nil
}

func TestComposeContract(t *testing.T) {
	docs := decodeAll(t, "compose/compose.yaml")
	require.Len(t, docs, 1)
	services, _ := docs[0]["services"].(map[string]any)
	require.NotNil(t, services)
	for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
		svc := services[n]
		require.NotNil(t, svc, "service %s", n)
		assert.Contains(t, dig(svc, "image"), "nats:2", "%s uses the official nats:2.x image", n)
		assert.Contains(t, strings.Join(toStrings(dig(svc, "command")), " "), "/etc/nats/"+n+".conf")
	}
	for _, tenant := range tenants {
		w := services["worker-"+tenant]
		require.NotNil(t, w, "a worker pool per tenant: worker-%s", tenant)
		assert.EqualValues(t, 2, dig(w, "deploy", "replicas"))
		env, _ := dig(w, "environment").(map[string]any)
		require.NotNil(t, env)
		assert.Equal(t, "3", env["JETPOOL_REPLICAS"])
		url, _ := env["JETPOOL_NATS_URL"].(string)
		for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
			assert.Contains(t, url, n+":4222")
		}
		assert.Equal(t, tenant+"-worker", env["JETPOOL_NATS_USER"], "the tenant's worker user")
		assert.Contains(t, env["JETPOOL_NATS_PASSWORD"], "${"+passwordVar(tenant+"-worker")+":?")
		assert.Contains(t, env["OPENAI_API_KEY"], "${"+strings.ToUpper(tenant)+"_OPENAI_API_KEY", "the tenant's own provider keys")
		assert.Equal(t, []string{"worker", "--drain", "130s"}, toStrings(dig(w, "command")), "drain: TestDrainFitsGrace")
	}
	// The servers get every password accounts.conf reads.
	env, _ := dig(services["nats-1"], "environment").(map[string]any)
	for v := range testPasswords {
		assert.Contains(t, env, v)
	}
	assert.Len(t, env, len(testPasswords))
}

func TestKubernetesContract(t *testing.T) {
	dep := byKind(decodeAll(t, "k8s/worker-deployment.yaml"), "Deployment")
	require.NotNil(t, dep)
	pod := dig(dep, "spec", "template", "spec")
	assert.Equal(t, true, dig(pod, "securityContext", "runAsNonRoot"))
	c := dig(pod, "containers", 0) // its drain and grace: TestDrainFitsGrace
	assert.Equal(t, "/healthz", dig(c, "livenessProbe", "httpGet", "path"))
	assert.Equal(t, "/readyz", dig(c, "readinessProbe", "httpGet", "path"))
	assert.EqualValues(t, 9090, dig(c, "ports", 0, "containerPort"))
	env := map[string]any{}
	for _, e := range dig(c, "env").([]any) {
		env[dig(e, "name").(string)] = e
	}
	assert.Equal(t, ":9090", dig(env["JETPOOL_METRICS_ADDR"], "value"))
	assert.Equal(t, "acme-worker", dig(env["JETPOOL_NATS_USER"], "value"), "one tenant's worker pool")
	assert.Equal(t, "jetpool-acme", dig(dep, "metadata", "namespace"), "a namespace per tenant")
	assert.Equal(t, "3", dig(env["JETPOOL_REPLICAS"], "value"))
	assert.NotNil(t, dig(env["JETPOOL_NATS_PASSWORD"], "valueFrom", "secretKeyRef"), "NATS password comes from a Secret")

	so := byKind(decodeAll(t, "k8s/keda-scaledobject.yaml"), "ScaledObject")
	require.NotNil(t, so)
	triggers, _ := dig(so, "spec", "triggers").([]any)
	require.Len(t, triggers, 1, "one trigger for every job")
	trig := triggers[0]
	assert.Equal(t, "prometheus", dig(trig, "type"))
	query, _ := dig(trig, "metadata", "query").(string)
	assert.Contains(t, query, "sum(max by (jetpool_job) (jetpool_backlog", "the max per job across workers, summed over jobs")
	assert.Contains(t, query, "or vector(0)", "no job: a backlog of 0, not an empty result")
	assert.NotContains(t, strings.ReplaceAll(query, `namespace="jetpool-acme"`, ""), "jetpool-", "no job named in the trigger")
	assert.Equal(t, "false", dig(trig, "metadata", "ignoreNullValues"))
	assert.EqualValues(t, 1, dig(so, "spec", "minReplicaCount"), "one worker reports the backlog")

	pm := byKind(decodeAll(t, "k8s/worker-podmonitor.yaml"), "PodMonitor")
	require.NotNil(t, pm)
	assert.Equal(t, dig(dep, "spec", "selector", "matchLabels"), dig(pm, "spec", "selector", "matchLabels"))
	assert.Equal(t, dig(c, "ports", 0, "name"), dig(pm, "spec", "podMetricsEndpoints", 0, "port"))

	cj := byKind(decodeAll(t, "k8s/purge-cronjob.yaml"), "CronJob")
	require.NotNil(t, cj)
	assert.Equal(t, "Forbid", dig(cj, "spec", "concurrencyPolicy"))
	pc := dig(cj, "spec", "jobTemplate", "spec", "template", "spec", "containers", 0)
	assert.Equal(t, []string{"job", "purge", "--yes"}, toStrings(dig(pc, "args")))
	assert.Equal(t, dig(c, "image"), dig(pc, "image"), "the worker's image")
	assert.Equal(t, dig(dep, "metadata", "namespace"), dig(cj, "metadata", "namespace"), "the tenant's namespace")
	for _, e := range dig(pc, "env").([]any) {
		if dig(e, "name") == "JETPOOL_NATS_USER" {
			assert.Equal(t, "acme-operator", dig(e, "value"), "purged by the tenant's operator")
		}
	}
	assert.Contains(t, query, `namespace="jetpool-acme"`, "the tenant's backlog only")

	pdb := byKind(decodeAll(t, "k8s/worker-pdb.yaml"), "PodDisruptionBudget")
	require.NotNil(t, pdb)
	assert.Equal(t, dig(dep, "spec", "selector", "matchLabels"), dig(pdb, "spec", "selector", "matchLabels"))
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

// ---------------------------------------------------------------------------------
// (b) the node configs load: in-process with the server's own parser (always), and with
// the real `nats-server -t` binary (skipped locally when absent, a failure on CI).

func TestNodeConfigsLoad(t *testing.T) {
	setPasswords(t)
	for i, f := range nodeConfigs {
		t.Run(f, func(t *testing.T) {
			opts, err := server.ProcessConfigFile(f)
			require.NoError(t, err)
			assert.Equal(t, "nats-"+string(rune('1'+i)), opts.ServerName)
			assert.Equal(t, "jetpool", opts.Cluster.Name)
			assert.Len(t, opts.Routes, 3)
			assert.True(t, opts.JetStream, "JetStream enabled")
			assert.True(t, opts.SyncAlways, "sync_interval: always (see common.conf)")
			assert.Equal(t, 8222, opts.HTTPPort, "monitoring port")
			assert.Equal(t, "SYS", opts.SystemAccount)
			users := map[string]*server.User{}
			for _, u := range opts.Users {
				users[u.Username] = u
			}
			assert.Len(t, users, len(tenants)*len(roles)+1, "the tenants' users and sys")
			for _, tenant := range tenants {
				for _, role := range roles {
					name := tenant + "-" + role
					u := users[name]
					require.NotNil(t, u, "user %s", name)
					assert.Equal(t, strings.ToUpper(tenant), u.Account.Name, "each tenant is an account")
					assert.Equal(t, testPasswords[passwordVar(name)], u.Password)
				}
			}
			assert.Equal(t, "SYS", users["sys"].Account.Name)
		})
	}
}

func natsServerBinary(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", "nats-server")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	msg := "nats-server binary not found in PATH or $(go env GOPATH)/bin; install it with: " +
		"go install github.com/nats-io/nats-server/v2@v2.15.2"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func TestNodeConfigsNatsServerCheck(t *testing.T) {
	bin := natsServerBinary(t)
	env := os.Environ()
	for k, v := range testPasswords {
		env = append(env, k+"="+v)
	}
	for _, f := range nodeConfigs {
		t.Run(f, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "--config", f, "-t")
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "nats-server -t %s:\n%s", f, out)
			assert.Contains(t, string(out), "is valid")
		})
	}
	// And a missing password variable is refused rather than silently empty.
	t.Run("missing password variable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--config", nodeConfigs[0], "-t")
		for _, kv := range env {
			if !strings.HasPrefix(kv, "NATS_GLOBEX_WORKER_PASSWORD=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "config with an unset password variable must be refused:\n%s", out)
		assert.Contains(t, string(out), "NATS_GLOBEX_WORKER_PASSWORD")
	})
}

// ---------------------------------------------------------------------------------
// (c) the permission model, against a real in-process nats-server loaded from
// nats/testdata/permissions-test.conf, which includes the shipped nats/accounts.conf.

const waitFor = 5 * time.Second

// client is one NATS connection as one of the jetpool users, recording the
// asynchronous permission violations the server reports for it.
type client struct {
	nc *nats.Conn
	js jetstream.JetStream

	mu         sync.Mutex
	violations []string
	notify     chan struct{}
}

func connect(t *testing.T, url, user string) *client {
	t.Helper()
	c := &client{notify: make(chan struct{}, 1)}
	pw := testPasswords[passwordVar(user)]
	nc, err := nats.Connect(url,
		nats.UserInfo(user, pw),
		nats.Name("deploy-test-"+user),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				c.mu.Lock()
				c.violations = append(c.violations, err.Error())
				c.mu.Unlock()
				select {
				case c.notify <- struct{}{}:
				default:
				}
			}
		}))
	require.NoError(t, err, "connect as %s", user)
	c.nc = nc
	c.js, err = jetstream.New(nc)
	require.NoError(t, err)
	return c
}

// expectViolation waits until the server has reported a permission violation naming
// subject for this connection.
func (c *client) expectViolation(t *testing.T, subject string) {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for _, v := range c.violations {
			if strings.Contains(v, `"`+subject+`"`) {
				c.mu.Unlock()
				return
			}
		}
		seen := append([]string(nil), c.violations...)
		c.mu.Unlock()
		select {
		case <-c.notify:
		case <-deadline.C:
			t.Fatalf("no permission violation for %q within %s; seen: %q", subject, waitFor, seen)
		}
	}
}

func (c *client) noViolations(t *testing.T) {
	t.Helper()
	// Flush round-trips to the server, so any -ERR for what was sent before has arrived.
	require.NoError(t, c.nc.Flush())
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Empty(t, c.violations)
}

func startServer(t *testing.T) *server.Server {
	t.Helper()
	setPasswords(t)
	opts, err := server.ProcessConfigFile("nats/testdata/permissions-test.conf")
	require.NoError(t, err)
	opts.Host = "127.0.0.1"
	opts.Port = -1
	opts.HTTPPort = 0
	opts.JetStream = true
	opts.StoreDir = t.TempDir()
	opts.NoLog = true
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("nats-server not ready within 10s")
	}
	return s
}

// denied runs a JetStream API call that the permissions must refuse: the server drops
// the request (the client sees a timeout or an error, never success) and reports a
// permission violation on subject.
func denied(t *testing.T, c *client, subject string, call func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 750*time.Millisecond)
	defer cancel()
	err := call(ctx)
	require.Error(t, err, "%s must be denied", subject)
	c.expectViolation(t, subject)
}

func TestPermissions(t *testing.T) {
	// nats-server and nats.go stop their goroutines on Shutdown/Close; goleak checks that
	// nothing started by this test outlives it (deferred calls run last-in first-out:
	// connections close, the server shuts down, then goleak verifies).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	s := startServer(t)
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	url := s.ClientURL()
	require.True(t, strings.HasPrefix(url, "nats://127.0.0.1:"), url)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// ---- operator: sets up the topology the other roles use.
	op := connect(t, url, "acme-operator")
	defer op.nc.Close()
	_, err := op.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "JETPOOL_WORK", Subjects: []string{"jetpool.work.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
		AllowDirect: true,
	})
	require.NoError(t, err)
	_, err = op.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "JETPOOL_RESULTS", Subjects: []string{"jetpool.results.>"},
		Storage: jetstream.FileStorage, AllowDirect: true,
	})
	require.NoError(t, err)
	_, err = op.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "JETPOOL_DLQ", Subjects: []string{"jetpool.dlq.>"}, Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	jobs, err := op.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETPOOL_JOBS"})
	require.NoError(t, err)
	_, err = jobs.Put(ctx, "job1", []byte(`{"workflow":{"actions":[]}}`))
	require.NoError(t, err)
	_, err = op.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETPOOL_JOB_STATE"})
	require.NoError(t, err)
	_, err = op.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETPOOL_CLAIMS", Storage: jetstream.MemoryStorage, TTL: 5 * time.Minute})
	require.NoError(t, err)
	_, err = op.js.CreateOrUpdateConsumer(ctx, "JETPOOL_WORK", jetstream.ConsumerConfig{
		Durable: "jetpool-job1", FilterSubject: "jetpool.work.job1.>",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 3,
	})
	require.NoError(t, err)
	_, err = op.js.Publish(ctx, "jetpool.work.job1.a", []byte(`{"id":"r1"}`))
	require.NoError(t, err)
	_, err = op.js.Publish(ctx, "jetpool.work.job1.a", []byte(`{"id":"r2"}`))
	require.NoError(t, err)

	workMsgs := func() uint64 {
		t.Helper()
		st, err := op.js.Stream(ctx, "JETPOOL_WORK")
		require.NoError(t, err, "JETPOOL_WORK must still exist")
		info, err := st.Info(ctx)
		require.NoError(t, err)
		return info.State.Msgs
	}
	require.EqualValues(t, 2, workMsgs())

	// Workers answer control requests (jetpool.ctl.>) through allow_responses.
	t.Run("worker", func(t *testing.T) {
		w := connect(t, url, "acme-worker")
		defer w.nc.Close()

		// consume: fetch + double ack (the server confirms the ack)
		cons, err := w.js.Consumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		require.NoError(t, err)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(waitFor))
		require.NoError(t, err)
		var got []jetstream.Msg
		for m := range batch.Messages() {
			got = append(got, m)
		}
		require.NoError(t, batch.Error())
		require.Len(t, got, 1)
		assert.Equal(t, "jetpool.work.job1.a", got[0].Subject())
		require.NoError(t, got[0].DoubleAck(ctx))
		assert.EqualValues(t, 1, workMsgs(), "the acked record left the work-queue stream")

		// publish the next step, a dead letter and a result
		for _, subj := range []string{"jetpool.work.job1.b", "jetpool.dlq.job1.a", "jetpool.results.job1.a"} {
			_, err := w.js.Publish(ctx, subj, []byte(`{}`))
			require.NoError(t, err, "worker publish %s", subj)
		}
		// read results (direct get) and delete a single result message
		res, err := w.js.Stream(ctx, "JETPOOL_RESULTS")
		require.NoError(t, err)
		last, err := res.GetLastMsgForSubject(ctx, "jetpool.results.job1.a")
		require.NoError(t, err)
		require.NoError(t, res.DeleteMsg(ctx, last.Sequence))
		// and a work record by sequence (the max-deliveries catcher), then delete it
		work, err := w.js.Stream(ctx, "JETPOOL_WORK")
		require.NoError(t, err)
		rec, err := work.GetMsg(ctx, 2)
		require.NoError(t, err)
		assert.JSONEq(t, `{"id":"r2"}`, string(rec.Data))
		require.NoError(t, work.DeleteMsg(ctx, 2))

		// KV: open, put, get, list keys (an ordered consumer under the hood) on the job
		// states; the workflows in JETPOOL_JOBS it may read (get, watch) but not write
		wfs, err := w.js.KeyValue(ctx, "JETPOOL_JOBS")
		require.NoError(t, err)
		_, err = wfs.Get(ctx, "job1")
		require.NoError(t, err)
		wfKeys, err := wfs.ListKeys(ctx)
		require.NoError(t, err)
		listed := 0
		for range wfKeys.Keys() {
			listed++
		}
		assert.Equal(t, 1, listed, "the worker lists the jobs")
		kv, err := w.js.KeyValue(ctx, "JETPOOL_JOB_STATE")
		require.NoError(t, err)
		_, err = kv.Put(ctx, "job1", []byte(`{"status":"running"}`))
		require.NoError(t, err)
		e, err := kv.Get(ctx, "job1")
		require.NoError(t, err)
		assert.Equal(t, `{"status":"running"}`, string(e.Value()))
		keys, err := kv.ListKeys(ctx)
		require.NoError(t, err)
		var names []string
		for k := range keys.Keys() {
			names = append(names, k)
		}
		_ = keys.Stop() // ListKeys has already stopped its watcher at the end of the listing
		assert.Equal(t, []string{"job1"}, names)

		// claims of calls (broker.Claim): create, a second create refused (it reads the
		// claim to say so), the leader's copy read, let go with the revision
		claims, err := w.js.KeyValue(ctx, "JETPOOL_CLAIMS")
		require.NoError(t, err)
		rev, err := claims.Create(ctx, "job1.a.r1", []byte(`{"holder":"w/1"}`))
		require.NoError(t, err)
		_, err = claims.Create(ctx, "job1.a.r1", []byte(`{"holder":"w/2"}`))
		require.ErrorIs(t, err, jetstream.ErrKeyExists)
		cs, err := w.js.Stream(ctx, "KV_JETPOOL_CLAIMS")
		require.NoError(t, err)
		_, err = cs.GetLastMsgForSubject(ctx, "$KV.JETPOOL_CLAIMS.job1.a.r1")
		require.NoError(t, err)
		require.NoError(t, claims.Delete(ctx, "job1.a.r1", jetstream.LastRevision(rev)))

		// control: the worker answers a stats request from the operator
		sub, err := w.nc.Subscribe("jetpool.ctl.stats", func(m *nats.Msg) { _ = m.Respond([]byte(`{"in_flight":0}`)) })
		require.NoError(t, err)
		defer func() { _ = sub.Unsubscribe() }()
		require.NoError(t, w.nc.Flush())
		reply, err := op.nc.Request("jetpool.ctl.stats", nil, waitFor)
		require.NoError(t, err)
		assert.Equal(t, `{"in_flight":0}`, string(reply.Data))

		// the pause advisories of the work consumers (broker.PauseSubject):
		// an operator's nats consumer pause and resume reach the worker
		pauses, err := w.nc.SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.PAUSE.JETPOOL_WORK.>")
		require.NoError(t, err)
		defer func() { _ = pauses.Unsubscribe() }()
		require.NoError(t, w.nc.Flush())
		_, err = op.js.PauseConsumer(ctx, "JETPOOL_WORK", "jetpool-job1", time.Now().Add(time.Hour))
		require.NoError(t, err)
		adv, err := pauses.NextMsg(waitFor)
		require.NoError(t, err, "the worker hears the pause")
		assert.Equal(t, "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.JETPOOL_WORK.jetpool-job1", adv.Subject)
		assert.Contains(t, string(adv.Data), `"paused":true`)
		_, err = op.js.ResumeConsumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		require.NoError(t, err)
		adv, err = pauses.NextMsg(waitFor)
		require.NoError(t, err, "the worker hears the resume")
		assert.Contains(t, string(adv.Data), `"paused":false`)

		w.noViolations(t)

		// It purges the work its pool acked (batched writes: the work
		// stream keeps acked records), one job's below a sequence.
		require.NoError(t, work.Purge(ctx, jetstream.WithPurgeSubject("jetpool.work.job1.>"), jetstream.WithPurgeSequence(1)), "answered: allowed")
		// never: purge another stream, delete a stream, delete a consumer, create a stream
		denied(t, w, "$JS.API.STREAM.PURGE.JETPOOL_RESULTS", func(ctx context.Context) error {
			s, err := w.js.Stream(ctx, "JETPOOL_RESULTS")
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
		denied(t, w, "$JS.API.STREAM.DELETE.JETPOOL_RESULTS", func(ctx context.Context) error {
			return w.js.DeleteStream(ctx, "JETPOOL_RESULTS")
		})
		denied(t, w, "$JS.API.CONSUMER.DELETE.JETPOOL_WORK.jetpool-job1", func(ctx context.Context) error {
			return w.js.DeleteConsumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		})
		denied(t, w, "$JS.API.STREAM.CREATE.OTHER", func(ctx context.Context) error {
			_, err := w.js.CreateStream(ctx, jetstream.StreamConfig{Name: "OTHER", Subjects: []string{"other.>"}})
			return err
		})
		// nor rewrite a job's workflow
		denied(t, w, "$KV.JETPOOL_JOBS.job1", func(ctx context.Context) error {
			_, err := wfs.Put(ctx, "job1", []byte(`{"workflow":"rewritten"}`))
			return err
		})
		e, err = wfs.Get(ctx, "job1")
		require.NoError(t, err)
		assert.Equal(t, `{"workflow":{"actions":[]}}`, string(e.Value()), "the workflow is as the operator wrote it")
		// nor publish outside jetpool's subjects
		require.NoError(t, w.nc.Publish("elsewhere.x", nil))
		w.expectViolation(t, "elsewhere.x")

		// everything is still there
		assert.EqualValues(t, 1, workMsgs(), "the next step job1.b is still queued")
		_, err = op.js.Stream(ctx, "JETPOOL_RESULTS")
		require.NoError(t, err, "JETPOOL_RESULTS still exists")
		_, err = op.js.Consumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		require.NoError(t, err, "consumer jetpool-job1 still exists")
	})

	t.Run("dispatcher", func(t *testing.T) {
		d := connect(t, url, "acme-dispatcher")
		defer d.nc.Close()

		// topology: idempotent create/update of a stream, a new job's consumer, KV write
		_, err := d.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "JETPOOL_WORK", Subjects: []string{"jetpool.work.>"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
			AllowDirect: true,
		})
		require.NoError(t, err)
		_, err = d.js.CreateOrUpdateConsumer(ctx, "JETPOOL_WORK", jetstream.ConsumerConfig{
			Durable: "jetpool-job2", FilterSubject: "jetpool.work.job2.>",
			AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
		for _, bucket := range []string{"JETPOOL_JOBS", "JETPOOL_JOB_STATE"} {
			kv, err := d.js.KeyValue(ctx, bucket)
			require.NoError(t, err)
			_, err = kv.Put(ctx, "job2", []byte(`{"status":"queued"}`))
			require.NoError(t, err)
		}

		// the job index (dispatcher.Matching): made, written, listed by one
		// workflow's prefix and cleaned key by key by the dispatcher (never
		// purged whole: below)
		idx, err := d.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETPOOL_JOB_INDEX", History: 1, Storage: jetstream.FileStorage})
		require.NoError(t, err)
		_, err = idx.Put(ctx, "def1.job2", []byte(`{"job":"job2"}`))
		require.NoError(t, err)
		kl, err := idx.ListKeysFiltered(ctx, "def1.*")
		require.NoError(t, err)
		var keys []string
		for k := range kl.Keys() {
			keys = append(keys, k)
		}
		assert.Equal(t, []string{"def1.job2"}, keys)
		require.NoError(t, idx.Purge(ctx, "def1.job2"))

		// publish work
		before := workMsgs()
		_, err = d.js.Publish(ctx, "jetpool.work.job1.a", []byte(`{"id":"r3"}`))
		require.NoError(t, err)
		assert.Equal(t, before+1, workMsgs())

		// read results: direct get
		res, err := d.js.Stream(ctx, "JETPOOL_RESULTS")
		require.NoError(t, err)
		_, err = op.js.Publish(ctx, "jetpool.results.job1.b", []byte(`{"status":"ok"}`))
		require.NoError(t, err)
		_, err = res.GetLastMsgForSubject(ctx, "jetpool.results.job1.b")
		require.NoError(t, err)
		d.noViolations(t)

		// may look at a work consumer, but never take work from it
		cons, err := d.js.Consumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		require.NoError(t, err)
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(750*time.Millisecond))
		require.NoError(t, err) // the request is only sent; the server drops it
		n := 0
		for range batch.Messages() {
			n++
		}
		assert.Zero(t, n, "the dispatcher must not receive work")
		d.expectViolation(t, "$JS.API.CONSUMER.MSG.NEXT.JETPOOL_WORK.jetpool-job1")

		// It purges a new job's work (an input refused after it began to
		// publish, a dispatch taken over: dispatcher/checking.go)...
		work, err := d.js.Stream(ctx, "JETPOOL_WORK")
		require.NoError(t, err)
		require.NoError(t, work.Purge(ctx, jetstream.WithPurgeSubject("jetpool.work.refused.>")), "answered: allowed")
		// ...but no other stream, nor acks on a worker's behalf, nor deletes
		denied(t, d, "$JS.API.STREAM.PURGE.JETPOOL_RESULTS", func(ctx context.Context) error {
			return res.Purge(ctx)
		})
		denied(t, d, "$JS.API.STREAM.PURGE.KV_JETPOOL_JOB_INDEX", func(ctx context.Context) error {
			s, err := d.js.Stream(ctx, "KV_JETPOOL_JOB_INDEX")
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		})
		require.NoError(t, d.nc.Publish("$JS.ACK.JETPOOL_WORK.jetpool-job1.1.1.1.1.0", []byte("+ACK")))
		d.expectViolation(t, "$JS.ACK.JETPOOL_WORK.jetpool-job1.1.1.1.1.0")
		denied(t, d, "$JS.API.STREAM.DELETE.JETPOOL_WORK", func(ctx context.Context) error {
			return d.js.DeleteStream(ctx, "JETPOOL_WORK")
		})
		denied(t, d, "$JS.API.STREAM.MSG.DELETE.JETPOOL_WORK", func(ctx context.Context) error {
			return work.DeleteMsg(ctx, 2)
		})
		// nor publish results or dead letters
		require.NoError(t, d.nc.Publish("jetpool.results.job1.a", nil))
		d.expectViolation(t, "jetpool.results.job1.a")

		assert.Equal(t, before+1, workMsgs(), "nothing was taken off the work queue")
		info, err := op.js.Consumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		require.NoError(t, err)
		assert.Zero(t, info.CachedInfo().NumAckPending, "no delivery went to the dispatcher")
	})

	t.Run("viewer", func(t *testing.T) {
		v := connect(t, url, "acme-viewer")
		defer v.nc.Close()

		// reads: stream and consumer info, results by subject, job entries, their keys
		work, err := v.js.Stream(ctx, "JETPOOL_WORK")
		require.NoError(t, err)
		_, err = v.js.Consumer(ctx, "JETPOOL_WORK", "jetpool-job1")
		require.NoError(t, err)
		res, err := v.js.Stream(ctx, "JETPOOL_RESULTS")
		require.NoError(t, err)
		_, err = op.js.Publish(ctx, "jetpool.results.job1.c", []byte(`{"status":"ok"}`))
		require.NoError(t, err)
		_, err = res.GetLastMsgForSubject(ctx, "jetpool.results.job1.c")
		require.NoError(t, err)
		jobs, err := v.js.KeyValue(ctx, "JETPOOL_JOBS")
		require.NoError(t, err)
		_, err = jobs.Get(ctx, "job1")
		require.NoError(t, err)
		keys, err := jobs.ListKeys(ctx)
		require.NoError(t, err)
		for range keys.Keys() {
		}
		states, err := v.js.KeyValue(ctx, "JETPOOL_JOB_STATE")
		require.NoError(t, err)
		v.noViolations(t)

		before := workMsgs()
		// never: forge a result, fail a job, consume, purge, delete, make a work consumer
		denied(t, v, "jetpool.results.job1.c", func(ctx context.Context) error {
			_, err := v.js.Publish(ctx, "jetpool.results.job1.c", []byte(`{"status":"ok","output":"forged"}`))
			return err
		})
		denied(t, v, "$KV.JETPOOL_JOB_STATE.job1", func(ctx context.Context) error {
			_, err := states.Put(ctx, "job1", []byte(`{"status":"failed"}`))
			return err
		})
		denied(t, v, "$JS.API.STREAM.PURGE.JETPOOL_WORK", func(ctx context.Context) error {
			return work.Purge(ctx)
		})
		denied(t, v, "$JS.API.STREAM.MSG.DELETE.JETPOOL_RESULTS", func(ctx context.Context) error {
			return res.DeleteMsg(ctx, 1)
		})
		denied(t, v, "$JS.API.CONSUMER.CREATE.JETPOOL_WORK.spy.jetpool.work.job1.>", func(ctx context.Context) error {
			_, err := v.js.CreateConsumer(ctx, "JETPOOL_WORK", jetstream.ConsumerConfig{Durable: "spy", FilterSubject: "jetpool.work.job1.>"})
			return err
		})
		require.NoError(t, v.nc.Publish("$JS.API.CONSUMER.MSG.NEXT.JETPOOL_WORK.jetpool-job1", []byte(`{"batch":1}`)))
		v.expectViolation(t, "$JS.API.CONSUMER.MSG.NEXT.JETPOOL_WORK.jetpool-job1")
		assert.Equal(t, before, workMsgs(), "nothing was taken off the work queue")
		last, err := op.js.Stream(ctx, "JETPOOL_RESULTS")
		require.NoError(t, err)
		m, err := last.GetLastMsgForSubject(ctx, "jetpool.results.job1.c")
		require.NoError(t, err)
		assert.Equal(t, `{"status":"ok"}`, string(m.Data), "the result is as the worker wrote it")
	})

	// The tenant's budget (JETPOOL_TENANT budget) is its operator's alone:
	// a worker reads and watches it and writes the ledger beside it; no
	// worker, dispatcher or viewer can set it, delete it or purge the
	// bucket; another tenant's operator sets only its own.
	t.Run("tenant budget", func(t *testing.T) {
		tenant, err := op.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETPOOL_TENANT"})
		require.NoError(t, err)
		_, err = tenant.Put(ctx, "budget", []byte(`{"max_cost":5}`))
		require.NoError(t, err, "the operator sets the budget")

		w := connect(t, url, "acme-worker")
		defer w.nc.Close()
		wkv, err := w.js.KeyValue(ctx, "JETPOOL_TENANT")
		require.NoError(t, err)
		e, err := wkv.Get(ctx, "budget")
		require.NoError(t, err)
		assert.Equal(t, `{"max_cost":5}`, string(e.Value()))
		watch, err := wkv.Watch(ctx, "budget")
		require.NoError(t, err)
		first := <-watch.Updates()
		require.NotNil(t, first)
		require.NoError(t, watch.Stop())
		rev, err := wkv.Create(ctx, "ledger", []byte(`{"cost":0}`))
		require.NoError(t, err)
		_, err = wkv.Update(ctx, "ledger", []byte(`{"cost":0.5}`), rev)
		require.NoError(t, err, "the worker writes the ledger with compare-and-set")
		ts, err := w.js.Stream(ctx, "KV_JETPOOL_TENANT")
		require.NoError(t, err)
		_, err = ts.GetLastMsgForSubject(ctx, "$KV.JETPOOL_TENANT.ledger")
		require.NoError(t, err)
		w.noViolations(t)
		denied(t, w, "$KV.JETPOOL_TENANT.budget", func(ctx context.Context) error {
			_, err := wkv.Put(ctx, "budget", []byte(`{"max_cost":1000000}`))
			return err
		})
		denied(t, w, "$KV.JETPOOL_TENANT.budget", func(ctx context.Context) error {
			return wkv.Delete(ctx, "budget")
		})
		denied(t, w, "$JS.API.STREAM.PURGE.KV_JETPOOL_TENANT", func(ctx context.Context) error {
			return ts.Purge(ctx)
		})

		for _, user := range []string{"acme-dispatcher", "acme-viewer"} {
			c := connect(t, url, user)
			kv, err := c.js.KeyValue(ctx, "JETPOOL_TENANT")
			require.NoError(t, err, user)
			denied(t, c, "$KV.JETPOOL_TENANT.budget", func(ctx context.Context) error {
				_, err := kv.Put(ctx, "budget", []byte(`{"max_cost":1000000}`))
				return err
			})
			c.nc.Close()
		}
		g := connect(t, url, "globex-operator")
		defer g.nc.Close()
		gkv, err := g.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "JETPOOL_TENANT"})
		require.NoError(t, err)
		_, err = gkv.Put(ctx, "budget", []byte(`{"max_cost":1000000}`))
		require.NoError(t, err, "globex sets its own")

		e, err = tenant.Get(ctx, "budget")
		require.NoError(t, err)
		assert.Equal(t, `{"max_cost":5}`, string(e.Value()), "acme's budget is as its operator set it")
	})

	// Another tenant's users, even its operator, see nothing of this one:
	// its own account has its own streams (none yet), and whatever it does
	// there — make a JETPOOL_WORK and purge it, publish a result on this
	// tenant's subjects, write a job state — leaves this tenant as it was.
	t.Run("another tenant", func(t *testing.T) {
		before := workMsgs()
		sniff, err := op.nc.SubscribeSync("jetpool.>")
		require.NoError(t, err)
		defer func() { _ = sniff.Unsubscribe() }()
		sniffKV, err := op.nc.SubscribeSync("$KV.>")
		require.NoError(t, err)
		defer func() { _ = sniffKV.Unsubscribe() }()
		require.NoError(t, op.nc.Flush())
		for _, user := range []string{"globex-dispatcher", "globex-worker", "globex-viewer", "globex-operator"} {
			g := connect(t, url, user)
			_, err := g.js.Stream(ctx, "JETPOOL_WORK")
			require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "%s sees no JETPOOL_WORK of acme's", user)
			_, err = g.js.KeyValue(ctx, "JETPOOL_JOBS")
			require.ErrorIs(t, err, jetstream.ErrBucketNotFound, user)
			g.nc.Close()
		}
		g := connect(t, url, "globex-operator")
		defer g.nc.Close()
		gw, err := g.js.CreateStream(ctx, jetstream.StreamConfig{Name: "JETPOOL_WORK", Subjects: []string{"jetpool.work.>"}, Retention: jetstream.WorkQueuePolicy})
		require.NoError(t, err)
		require.NoError(t, gw.Purge(ctx), "globex purges its own work stream")
		require.NoError(t, g.nc.Publish("jetpool.results.job1.a", []byte(`{"status":"ok","output":"forged"}`)))
		require.NoError(t, g.nc.Publish("$KV.JETPOOL_JOB_STATE.job1", []byte(`{"status":"failed"}`)))
		require.NoError(t, g.nc.Flush())
		g.noViolations(t)

		assert.Equal(t, before, workMsgs(), "acme's work is untouched")
		st, err := op.js.KeyValue(ctx, "JETPOOL_JOB_STATE")
		require.NoError(t, err)
		e, err := st.Get(ctx, "job1")
		require.NoError(t, err)
		assert.Equal(t, `{"status":"running"}`, string(e.Value()), "acme's job state is as the worker wrote it")
		for _, sub := range []*nats.Subscription{sniff, sniffKV} {
			m, err := sub.NextMsg(200 * time.Millisecond)
			require.ErrorIs(t, err, nats.ErrTimeout, "nothing globex published reached acme's account: %v", m)
		}
	})

	t.Run("sys user is not in a tenant", func(t *testing.T) {
		nc, err := nats.Connect(url, nats.UserInfo("sys", testPasswords["NATS_SYS_PASSWORD"]))
		require.NoError(t, err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		_, err = js.Stream(ctx, "JETPOOL_WORK")
		require.Error(t, err, "the system account does not see jetpool's streams")
	})

	t.Run("wrong password", func(t *testing.T) {
		nc, err := nats.Connect(url, nats.UserInfo("acme-worker", "nope"), nats.MaxReconnects(0))
		if nc != nil {
			nc.Close()
		}
		require.Error(t, err)
	})
}

// ---------------------------------------------------------------------------------
// (d) the Dockerfile keeps its promises (static build, non-root, entrypoint).

func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../Dockerfile")
	require.NoError(t, err)
	df := string(data)
	assert.Contains(t, df, "CGO_ENABLED=0")
	assert.Contains(t, df, "./cmd/jetpool")
	assert.Contains(t, df, "gcr.io/distroless/static")
	assert.Contains(t, df, "USER nonroot")
	assert.Contains(t, df, `ENTRYPOINT ["/jetpool"]`)
	assert.Contains(t, df, `CMD ["worker"]`)
}
