package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/worker"
)

// endpointWorkflow is one action on provider p at url, its key in keyEnv.
func endpointWorkflow(url, keyEnv string) string {
	return fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %q, api_key_env: %s, timeout: 10s}
actions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
`, url, keyEnv)
}

// moved is a job whose records failed on an old endpoint and were replayed
// under a revision that moves provider p to a new one.
type moved struct {
	job      string
	old, new *providertest.Server
}

// moveEndpoint dispatches n records to a job on old (which refuses each
// with a 400), works them to dead letters with a pool under first, then
// adds a revision that moves p to new and replays them under it.
func moveEndpoint(t *testing.T, b *broker.Broker, keyEnv string, n int, first func(m moved) *provider.Trust) moved {
	t.Helper()
	ctx := context.Background()
	m := moved{
		old: providertest.NewServer(t, providertest.Reply{Status: 400, Body: providertest.OpenAIError("bad request", "invalid_request_error", "")}),
		new: providertest.NewServer(t, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 3, 1)}),
	}
	res := testenv.Dispatch(t, b, testenv.Workflow(t, endpointWorkflow(m.old.URL+"/v1", keyEnv)), testenv.Records(t, n), dispatcher.Options{})
	m.job = res.Job.ID
	p1 := testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 2, Trust: first(m)})
	_, p := testenv.WaitFinished(t, b, m.job, 30*time.Second)
	require.EqualValues(t, n, p.Failed)
	require.NoError(t, p1.Stop(ctx))
	enc, err := testenv.Workflow(t, endpointWorkflow(m.new.URL+"/v1", keyEnv)).Encode()
	require.NoError(t, err)
	_, err = b.AddRevision(ctx, m.job, enc, "fixed.yaml")
	require.NoError(t, err)
	rr, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: m.job}})
	require.NoError(t, err)
	require.Equal(t, n, rr.Replayed)
	return m
}

// trustOf is the policy of a worker whose operator binds keyEnv to the
// servers' hosts.
func trustOf(t *testing.T, keyEnv string, servers ...*providertest.Server) *provider.Trust {
	t.Helper()
	hosts := make([]string, len(servers))
	for i, s := range servers {
		hosts[i] = strings.TrimPrefix(s.URL, "http://")
	}
	tr, err := provider.LoadTrust(func(k string) (string, bool) {
		if k == provider.EnvKeyHosts {
			return keyEnv + "=" + strings.Join(hosts, ","), true
		}
		return "", false
	})
	require.NoError(t, err)
	return tr
}

// A revision that moves a provider's endpoint moves its records' calls: the
// replayed records call the new endpoint, never the old one again (they
// used to call the old one: a worker built every provider from the
// job's first workflow).
func TestRevisionMovesTheEndpoint(t *testing.T) {
	const keyEnv = "MOVE_TEST_KEY"
	t.Setenv(keyEnv, "sk-move")
	b := testenv.Broker(t)
	m := moveEndpoint(t, b, keyEnv, 4, func(m moved) *provider.Trust { return trustOf(t, keyEnv, m.old) })
	testenv.Pool(t, b, worker.Config{Concurrency: 2, Trust: trustOf(t, keyEnv, m.old, m.new)})
	j, p := testenv.WaitFinished(t, b, m.job, 30*time.Second)
	require.EqualValues(t, 4, p.OK)
	require.Len(t, m.old.Requests(), 4, "the old endpoint: the first run's calls only")
	require.Len(t, m.new.Requests(), 4, "every replayed record called the new endpoint")
	for id, r := range testenv.Results(t, b, j) {
		require.Equal(t, 2, r.Revision, id)
		require.Equal(t, "ok", r.Output, id)
	}
}

// A worker whose operator did not bind the key to the revision's new host
// does not serve the job (it never sends the key there) and says why, for
// the revision; one that serves the job already stops when the revision
// comes. Its records wait for a worker that may.
func TestRevisionToAnUnboundHostIsNotServed(t *testing.T) {
	const keyEnv = "MOVE_TEST_KEY_UNBOUND"
	t.Setenv(keyEnv, "sk-move")
	b := testenv.Broker(t)
	var serving *worker.Pool
	m := moveEndpoint(t, b, keyEnv, 3, func(m moved) *provider.Trust {
		// A second pool under the same policy serves the job from its start.
		serving = testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 2, Trust: trustOf(t, keyEnv, m.old)})
		return trustOf(t, keyEnv, m.old)
	})
	fresh := testenv.Pool(t, b, worker.Config{Concurrency: 2, Trust: trustOf(t, keyEnv, m.old)})
	for name, p := range map[string]*worker.Pool{"a pool that served the job": serving, "a pool started after the revision": fresh} {
		testenv.Eventually(t, 20*time.Second, func() bool { return p.Unservable()[m.job] != "" }, "%s says it cannot serve the job", name)
		require.Contains(t, p.Unservable()[m.job], "revision 2: provider p: key variable "+keyEnv+" may be sent to ", name)
	}
	require.Empty(t, m.new.Requests(), "the key never went to the unbound host")
	j, _, err := b.GetJob(context.Background(), m.job)
	require.NoError(t, err)
	prog, err := b.JobProgress(context.Background(), j, true)
	require.NoError(t, err)
	require.EqualValues(t, 3, int(prog.Queued)+prog.AckPending, "the replayed records wait for a worker that may serve them: %+v", prog)

	// A worker bound to the new host works them.
	testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 2, Trust: trustOf(t, keyEnv, m.old, m.new)})
	_, p := testenv.WaitFinished(t, b, m.job, 30*time.Second)
	require.EqualValues(t, 3, p.OK)
	require.Len(t, m.new.Requests(), 3)
}
