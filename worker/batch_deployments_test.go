package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
)

// A batch action on a provider with deployments: each batch is submitted
// to one deployment, with its key, and polled and read there (each fake
// knows only its own batches: a poll at the other would find none); the
// batches divide between the deployments, and each result names the
// deployment whose batch answered it. A worker whose key bindings do not
// allow one deployment's key does not serve the job.
func TestBatchDeployments(t *testing.T) {
	for _, kind := range batchKinds {
		t.Run(kind, func(t *testing.T) {
			keyA, keyB := "BATCH_DEP_KEY_A_"+strings.ToUpper(kind), "BATCH_DEP_KEY_B_"+strings.ToUpper(kind)
			t.Setenv(keyA, "sk-a")
			t.Setenv(keyB, "sk-b")
			const n, per = 12, 3
			east, west := batchtest.New(t, kind), batchtest.New(t, kind)
			for name, srv := range map[string]*batchtest.Server{"east": east, "west": west} {
				srv.Name, srv.Hold = name, true
				srv.Answer = func(id string, _ int, _ map[string]any) batchtest.Answer { return batchtest.OK(name + " " + id) }
			}
			model := map[string]string{provider.KindOpenAI: "gpt-4o-mini", provider.KindAnthropic: "claude-3-5-haiku-latest"}[kind]
			wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  fake:
    kind: %s
    deployments:
      - {name: east, base_url: %q, api_key_env: %s}
      - {name: west, base_url: %q, api_key_env: %s}
actions:
  - name: answer
    provider: fake
    model: %s
    prompt: "Answer: {{ .text }}"
    mode: batch
    batch: {max_records: %d, max_wait: 1s, poll: 5ms}
`, kind, east.URL+"/v1", keyA, west.URL+"/v1", keyB, model, per))
			b := testenv.Broker(t)
			res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})

			eastOnly := trustOfKeys(t, map[string]string{keyA: east.URL})
			refused := testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 2, Trust: eastOnly})
			testenv.Eventually(t, 20*time.Second, func() bool { return refused.Unservable()[res.Job.ID] != "" }, "the job is refused")
			require.Contains(t, refused.Unservable()[res.Job.ID], "provider west: key variable "+keyB)
			require.Zero(t, east.Created()+west.Created(), "nothing submitted by a worker that refused the job")

			testenv.Pool(t, b, worker.Config{Concurrency: 8, Trust: trustOfKeys(t, map[string]string{keyA: east.URL, keyB: west.URL})})
			// Held in progress: each header names the deployment whose fake
			// made its batch id (`jetpool status` shows it).
			testenv.Eventually(t, 20*time.Second, func() bool {
				hs, err := batch.List(context.Background(), b, res.Job.ID)
				require.NoError(t, err)
				submitted := 0
				for _, h := range hs {
					if h.ProviderID != "" {
						require.Contains(t, h.ProviderID, h.Deployment, "polled where it was submitted")
						submitted++
					}
				}
				return submitted == n/per
			}, "every batch submitted")
			east.Release()
			west.Release()
			job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
			require.EqualValues(t, n, p.OK)
			requireNoBatches(t, b)
			require.Positive(t, east.Created(), "east took batches")
			require.Positive(t, west.Created(), "west took batches")
			require.Equal(t, n/per, east.Created()+west.Created(), "each batch submitted once, at one deployment")
			by := map[string]int{}
			for id, r := range testenv.Results(t, b, job) {
				require.Equal(t, broker.StatusOK, r.Status, id)
				require.Equal(t, r.Deployment+" "+id, r.Output, "%s: answered by the deployment it names", id)
				by[r.Deployment]++
			}
			require.Equal(t, map[string]int{"east": len(east.Requests()), "west": len(west.Requests())}, by)
		})
	}
}

// trustOfKeys is the policy of a worker whose operator binds each key
// variable to its server's host.
func trustOfKeys(t *testing.T, hosts map[string]string) *provider.Trust {
	t.Helper()
	var binds []string
	for k, url := range hosts {
		binds = append(binds, k+"="+strings.TrimPrefix(url, "http://"))
	}
	tr, err := provider.LoadTrust(func(k string) (string, bool) {
		if k == provider.EnvKeyHosts {
			return strings.Join(binds, ";"), true
		}
		return "", false
	})
	require.NoError(t, err)
	return tr
}
