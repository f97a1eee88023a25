package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// syncBuffer is a log both pools' goroutines write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A worker whose operator did not bind the job's key to its endpoint,
// next to one that did: it pulls nothing, spends no attempt, dead-letters
// nothing, says why once (log, stats, OnUnservable), and the other worker
// carries the whole job.
func TestWorkerLeavesAJobItCannotServe(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, providertest.OpenAIChat("m", "ok", 1, 1))
	}))
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("sk-test-file-key\n"), 0o600))
	host := strings.TrimPrefix(srv.URL, "http://")
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s/v1, api_key_file: %s}
actions:
  - name: ask
    provider: local
    model: m
    prompt: "{{ .text }}"
`, srv.URL, keyFile))
	b := testenv.Broker(t)

	// The refusing pool starts first and sees the job first.
	var refusals []string
	var mu sync.Mutex
	logs := &syncBuffer{}
	counterB := testenv.NewCounter()
	pb := worker.New(testenv.Connect(t, b), worker.Config{Concurrency: 4, NewProvider: counterB.New, Log: zerolog.New(logs),
		OnUnservable: func(job string, why error) {
			mu.Lock()
			refusals = append(refusals, job+": "+why.Error())
			mu.Unlock()
		}})
	require.NoError(t, pb.Start(context.Background()))
	t.Cleanup(func() { _ = pb.Stop(context.Background()) })

	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 40), dispatcher.Options{JobID: "keyed"})
	want := fmt.Sprintf("provider local: key file %s is bound to no host on this worker, so it is not sent to %s (keys are bound by the worker's operator, in JETPOOL_KEY_HOSTS)", keyFile, host)
	testenv.Eventually(t, 10*time.Second, func() bool { return pb.Unservable()["keyed"] != "" }, "the refusal is known")
	require.Equal(t, want, pb.Unservable()["keyed"])
	require.Equal(t, want, pb.Snapshot().Unservable["keyed"], "in the stats `jetpool status` reads")

	trust, err := provider.LoadTrust(func(k string) (string, bool) {
		if k == provider.EnvKeyHosts {
			return keyFile + "=" + host, true
		}
		return "", false
	})
	require.NoError(t, err)
	counterA := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counterA.New, Trust: trust})

	j, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 40, p.OK, "%+v", p.Counts)
	require.Zero(t, p.Failed, "no dead letters")
	require.Equal(t, 40, counterA.Total())
	require.Zero(t, counterB.Total(), "the refusing worker made no call")
	dls, err := deadletter.List(context.Background(), b, deadletter.Filter{Job: j.ID})
	require.NoError(t, err)
	require.Empty(t, dls)
	for _, r := range srv.Requests() {
		require.Equal(t, "Bearer sk-test-file-key", r.Header.Get("Authorization"))
	}

	// Said once, though the job's entry changed since (totals, running, …).
	mu.Lock()
	require.Equal(t, []string{"keyed: " + want}, refusals)
	mu.Unlock()
	require.Equal(t, 1, strings.Count(logs.String(), "cannot serve this job"), logs.String())
	// A finished job is no longer listed.
	_, err = b.UpdateJob(context.Background(), j.ID, func(j *broker.Job) bool { j.Status = broker.JobCompleted; return true })
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, func() bool { return pb.Unservable() == nil }, "dropped once completed")
}

// A workflow names the worker's own secrets (its NATS password, HOME, a
// file) and an endpoint of the workflow writer's choosing: the worker sends
// nothing anywhere, and says why.
func TestWorkerSendsNoSecretAWorkflowNames(t *testing.T) {
	t.Parallel()
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, providertest.OpenAIChat("m", "ok", 1, 1))
	}))
	// On loopback, where keyless calls are allowed by default: a key is
	// sent only where it is bound, and these are bound nowhere.
	host := strings.TrimPrefix(srv.URL, "http://")
	base := srv.URL + "/v1"
	b := testenv.Broker(t)
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: testenv.NewCounter().New})
	for i, src := range []string{"api_key_env: JETPOOL_NATS_PASSWORD", "api_key_env: HOME", "api_key_file: /etc/hostname"} {
		job := fmt.Sprintf("steal%d", i)
		wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  evil: {kind: openai, base_url: %s, %s}
actions:
  - {name: ask, provider: evil, model: m, prompt: "{{ .text }}"}
`, base, src))
		testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{JobID: job})
		testenv.Eventually(t, 10*time.Second, func() bool { return pool.Unservable()[job] != "" }, "refused: %s", src)
		require.Contains(t, pool.Unservable()[job], "provider evil: key ")
		require.Contains(t, pool.Unservable()[job], host)
	}
	require.Contains(t, pool.Unservable()["steal0"], "JETPOOL_NATS_PASSWORD is jetpool's own configuration, never sent as a provider key")
	require.Contains(t, pool.Unservable()["steal1"], "key variable HOME is bound to no host on this worker")
	require.Contains(t, pool.Unservable()["steal2"], "key file /etc/hostname is bound to no host on this worker")
	require.Empty(t, srv.Requests(), "nothing was sent")
}

// A record the prompt cannot be rendered over within the bounds (three
// nested ranges over its 300 items) is dead-lettered as bad_input with the
// reason, is never sent, and the worker goes on with the others.
func TestRenderBombIsBadInput(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, `
providers:
  sim: {kind: sim}
defaults: {provider: sim}
actions:
  - name: list
    prompt: "{{range .items}}{{range $.items}}{{range $.items}}{{.}} {{end}}{{end}}{{end}}"
`)
	var in strings.Builder
	for i := 1; i <= 5; i++ {
		n := 3
		if i == 3 {
			n = 300
		}
		items := make([]string, n)
		for k := range items {
			items[k] = fmt.Sprintf("%q", fmt.Sprint("i", k))
		}
		fmt.Fprintf(&in, "{\"id\":\"r%d\",\"items\":[%s]}\n", i, strings.Join(items, ","))
	}
	res := testenv.Dispatch(t, b, wf, testenv.WriteFile(t, "in.jsonl", in.String()), dispatcher.Options{})
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 1, NewProvider: counter.New})
	j, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 4, p.OK)
	require.Zero(t, counter.Calls("r3"), "never sent")
	r := testenv.Results(t, b, j)["r3"]
	require.Equal(t, string(retry.ReasonBadInput), r.Reason)
	require.Equal(t, string(retry.ClassInvalidRequest), r.Error.Class)
	require.Equal(t, fmt.Sprintf("failed permanently: BadInputError: action list: prompt: more than %d steps (nested {{range}}s over large fields?): prompt takes too long to render: bad input", workflow.MaxTemplateSteps), r.Error.Message)
	dls, err := deadletter.List(context.Background(), b, deadletter.Filter{Job: j.ID})
	require.NoError(t, err)
	require.Len(t, dls, 1)
	require.Equal(t, retry.ReasonBadInput, dls[0].Reason)
	host, _ := os.Hostname()
	require.Equal(t, fmt.Sprintf("%s-%d", host, os.Getpid()), dls[0].Worker, "the dead letter names its worker")
}

// A job encoded by a newer jetpool (a workflow format this one does not
// read) is not served, and the worker says so.
func TestWorkerLeavesANewerFormat(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	pool := testenv.Pool(t, b, worker.Config{Concurrency: 2})
	wf := testenv.Workflow(t, "providers:\n  sim: {kind: sim}\nactions:\n  - {name: a, provider: sim, prompt: x}\n")
	enc, err := wf.Encode()
	require.NoError(t, err)
	newer := bytes.Replace(enc, []byte(fmt.Sprintf(`"version": %d`, workflow.FormatVersion)), []byte(`"version": 99`), 1)
	require.NotEqual(t, enc, newer)
	require.NoError(t, b.PutJob(context.Background(), &broker.Job{ID: "future", Workflow: newer, Actions: []string{"a"},
		Status: broker.JobRunning, MaxDeliver: 4}))
	testenv.Eventually(t, 10*time.Second, func() bool { return pool.Unservable()["future"] != "" }, "refused")
	require.Contains(t, pool.Unservable()["future"], fmt.Sprintf("format version 99, but this jetpool reads up to version %d (upgrade it)", workflow.FormatVersion))
}
