package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/steer"
	"github.com/jetpool/jetpool/worker"
)

// Steering as an operator sees it with the `nats` CLI: `jetpool job pause`
// is the consumer pause `nats consumer info` shows, `nats consumer resume`
// resumes it as `jetpool job resume` would; a job dispatched with --after
// is a consumer paused until its start; `jetpool job cancel` ends a job's
// queued records cancelled with a worker running and none of them called.
func TestSteeringWithNatsCLI(t *testing.T) {
	t.Parallel()
	const n = 12
	srv, url := jetpoolServer(t)
	env := map[string]string{"JETPOOL_NATS_URL": url}
	dir := t.TempDir()
	wfPath := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wfPath, []byte("providers:\n  sim: {kind: sim, sim: {latency: 5ms}}\ndefaults: {provider: sim, model: sim-1}\nactions:\n  - name: answer\n    prompt: \"Answer: {{ .text }}\"\n"), 0o600))
	input := testenv.Records(t, n)

	// A job scheduled an hour ahead: stored, paused until then.
	d := jetpool(t, env, "dispatch", wfPath, "--input", input, "--job", "later", "--after", "1h", "--no-preflight")
	require.Zero(t, d.code, d.stderr)
	assert.Contains(t, d.stderr, "job later starts at ")
	ci := natsCLI(t, url, "consumer", "info", "JETPOOL_WORK", "jetpool-later")
	require.Zero(t, ci.code, ci.stderr)
	assert.Contains(t, ci.stdout, "Paused Until")
	st := jetpool(t, env, "status")
	require.Zero(t, st.code, st.stderr)
	assert.Regexp(t, `later\s+running \(starts \d{4}-\d\d-\d\d`, st.stdout)
	var s struct {
		Scheduled bool      `json:"scheduled"`
		StartAt   time.Time `json:"start_at"`
		Paused    bool      `json:"paused"`
		Queued    int       `json:"queued"`
	}
	st = jetpool(t, env, "status", "later", "--json")
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	assert.True(t, s.Scheduled && s.Paused)
	assert.WithinDuration(t, time.Now().Add(time.Hour), s.StartAt, time.Minute)

	// jetpool job pause, seen by nats consumer info.
	d = jetpool(t, env, "dispatch", wfPath, "--input", input, "--job", "now", "--no-preflight")
	require.Zero(t, d.code, d.stderr)
	p := jetpool(t, env, "job", "pause", "now")
	require.Zero(t, p.code, p.stderr)
	ci = natsCLI(t, url, "consumer", "info", "JETPOOL_WORK", "jetpool-now")
	require.Zero(t, ci.code, ci.stderr)
	assert.Contains(t, ci.stdout, "Paused Until")

	w := start(t, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_LOG_LEVEL": "info"}, "worker", "--concurrency", "4")
	w.waitOutput(t, regexp.MustCompile(`"job":"now".*serving job`), 20*time.Second)
	st = jetpool(t, env, "status", "now", "--json")
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	assert.True(t, s.Paused)
	assert.Equal(t, n, s.Queued, "paused: nothing delivered")

	// The operator resumes it with the nats CLI; it runs to the end.
	r := natsCLI(t, url, "consumer", "resume", "JETPOOL_WORK", "jetpool-now", "--force")
	require.Zero(t, r.code, r.stderr)
	var fin status
	testenv.Eventually(t, 30*time.Second, func() bool {
		fin = jobStatus(t, env, "now")
		return fin.Status == "completed"
	}, "job now completed: %+v", &fin)
	assert.EqualValues(t, n, fin.Succeeded)

	// Cancel the scheduled job: its records end cancelled, none called.
	c := jetpool(t, env, "job", "cancel", "later")
	require.Zero(t, c.code, c.stderr)
	assert.Contains(t, c.stdout, "job later cancelled: no new calls (1 worker confirmed)")
	testenv.Eventually(t, 30*time.Second, func() bool {
		fin = jobStatus(t, env, "later")
		return fin.Queued == 0 && fin.Cancelled == n
	}, "job later's records ended: %+v", &fin)
	assert.Zero(t, fin.Failed, "cancelled, not failed")
	assert.Equal(t, "cancelled", fin.Status)
	assert.EqualValues(t, map[string]int64{"cancelled": n}, fin.DeadLetter)
	res := jetpool(t, env, "results", "later")
	require.Zero(t, res.code, res.stderr)
	assert.Len(t, regexp.MustCompile(`(?m)^\{"id":"r\d+","status":"cancelled"`).FindAllString(res.stdout, -1), n, res.stdout)
	assert.NotContains(t, res.stdout, `"calls":1`, "none called")

	w.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, w.wait(t, 10*time.Second))
	srv.signal(t, syscall.SIGTERM)
	assert.Equal(t, 0, srv.wait(t, 10*time.Second))
}

// A cancel on a three-node cluster with four workers mid-job: no call
// starts after it returns; the answers of the calls in flight are stored;
// every record has one final result (ok or cancelled), none lost.
func TestChaosCancelOnCluster(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 400
	c := startCluster(t)
	admin := readyCluster(t, c)
	job := dispatch(t, admin, simWorkflow(t, 100*time.Millisecond, ""), n, "cancelled")
	counter := testenv.NewCounter()
	for i := range 4 {
		testenv.Pool(t, clusterBroker(t, c.url(i%3)+","+c.urls()), worker.Config{Concurrency: 4, NewProvider: counter.New})
	}
	testenv.Eventually(t, 60*time.Second, func() bool { return counter.Total() >= 40 }, "the workers are calling")
	rep, err := steer.Cancel(context.Background(), admin, job.ID, steer.CancelOptions{})
	require.NoError(t, err)
	require.Equal(t, 4, rep.Workers, "every worker confirmed")
	calls := counter.Total()

	j, p := waitFinished(t, admin, job.ID, 60*time.Second)
	require.Equal(t, broker.JobCancelled, j.Status)
	require.Equal(t, calls, counter.Total(), "calls that started after the cancel returned")
	res := checkResults(t, admin, j, n)
	var ok, cancelled int
	for _, r := range res {
		switch r.Status {
		case broker.StatusOK:
			ok++
		case broker.StatusCancelled:
			cancelled++
		}
	}
	require.Equal(t, calls, ok, "every call's answer stored (one call a record, no faults)")
	require.Equal(t, n, ok+cancelled, "every record counted")
	require.EqualValues(t, ok, p.OK)
	t.Logf("cancel on a cluster: %d calls before it returned, all stored; %d records cancelled; %d after", calls, cancelled, counter.Total()-calls)
}
