package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/workflow"
)

// simWorkflow is a one-action workflow on the sim provider with the given
// latency; extra is appended to the sim: block (faults, seed, ...).
func simWorkflow(t testing.TB, latency time.Duration, extra string) *workflow.Workflow {
	t.Helper()
	return testenv.Workflow(t, simYAML(latency, extra))
}

func simYAML(latency time.Duration, extra string) string {
	return fmt.Sprintf(`providers:
  sim:
    kind: sim
    sim:
      latency: %s
      seed: 11
%s
defaults:
  provider: sim
  model: sim-1
actions:
  - name: answer
    prompt: "Answer: {{ .text }}"
`, latency, extra)
}

// embeddedServer starts an embedded nats-server for the test (loopback, random
// port) with every jetpool stream ensured, and returns the broker and the
// URL child processes use. ackWait is the AckWait of the job consumers the
// test dispatches through this broker.
func embeddedServer(t testing.TB, ackWait time.Duration) (*broker.Broker, string) {
	t.Helper()
	b := testenv.Broker(t, testenv.Options{AckWait: ackWait})
	return b, b.Server().ClientURL()
}

// dispatch publishes n records of wf as job id through b.
func dispatch(t testing.TB, b *broker.Broker, wf *workflow.Workflow, n int, id string) *broker.Job {
	t.Helper()
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{JobID: id})
	require.EqualValues(t, n, res.Published)
	return res.Job
}

// consumerState is the job consumer's backlog: not yet delivered, and
// delivered but not acked (in flight or waiting for redelivery).
func consumerState(t testing.TB, b *broker.Broker, job string) (pending uint64, ackPending int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(job))
	require.NoError(t, err)
	info, err := c.Info(ctx)
	require.NoError(t, err)
	return info.NumPending, info.NumAckPending
}

// done counts the job's final results (server-side, exact).
func done(t testing.TB, b *broker.Broker, job string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j, _, err := b.GetJob(ctx, job)
	require.NoError(t, err)
	c, err := b.JobCounts(ctx, j, false)
	require.NoError(t, err)
	return c.Done
}

// checkResults asserts every record r1..rn has exactly one final result
// (testenv.Results fails on two) and returns them.
func checkResults(t testing.TB, b *broker.Broker, job *broker.Job, n int) map[string]*broker.Result {
	t.Helper()
	// A read through a node just back from a fault can see the stream a
	// moment behind its leader: read again, for a while, until it has all
	// (docs/durability.md, Known gaps).
	var res map[string]*broker.Result
	testenv.Eventually(t, 30*time.Second, func() bool {
		res = testenv.Results(t, b, job)
		return len(res) >= n
	}, "every record has a final result in the stream")
	require.Len(t, res, n, "every record has exactly one final result")
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		require.Contains(t, res, id)
	}
	return res
}

// workerEnv is the environment of a `jetpool worker` child on url.
func workerEnv(url string, ackWait time.Duration, extra ...string) map[string]string {
	env := map[string]string{
		"JETPOOL_NATS_URL":  url,
		"JETPOOL_ACK_WAIT":  ackWait.String(),
		"JETPOOL_LOG_LEVEL": "info",
	}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// waitFinished is testenv.WaitFinished for a broker that may lose its server
// meanwhile: an error of one poll (a request that times out while the
// cluster elects a new leader) is retried until timeout, not fatal.
func waitFinished(t testing.TB, b *broker.Broker, job string, timeout time.Duration, explain ...func(*broker.Job) string) (*broker.Job, broker.Progress) {
	t.Helper()
	var j *broker.Job
	deadline := time.Now().Add(timeout)
	var lastErr error
	var last broker.Progress
	for time.Now().Before(deadline) {
		jj, p, err := progress(b, job)
		if err == nil && p.Finished(jj) {
			return jj, p
		}
		if jj != nil {
			j = jj
		}
		lastErr, last = err, p
		testenv.Tick()
	}
	why := ""
	for _, e := range explain {
		if j != nil {
			why += e(j)
		}
	}
	t.Fatalf("job %s not finished after %s: %+v (last error: %v)%s", job, timeout, last, lastErr, why)
	return nil, last
}

func progress(b *broker.Broker, job string) (*broker.Job, broker.Progress, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	j, _, err := b.GetJob(ctx, job)
	if err != nil {
		return nil, broker.Progress{}, err
	}
	p, err := b.JobProgress(ctx, j, true)
	return j, p, err
}

// chaosOnly skips a test that takes minutes of faults on real clusters in
// the README's `go test ./...`: .ci/run runs them with the chaos tag
// (`go test -tags chaos -run '^TestChaos' ./e2e/`).
func chaosOnly(t *testing.T) {
	t.Helper()
	if !chaosBuild {
		t.Skip("a chaos test: go test -tags chaos -run '^TestChaos' ./e2e/")
	}
}
