package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/worker"
)

// The chaos tests hold jetpool's promise — nothing lost, nothing paid twice
// — under the faults storage and clusters really have (docs/durability.md):
// real nats-server processes (three, R3, fsync on every write), `jetpool`
// child processes, and a local model that counts every call of every
// record (model_test.go). Each ends with checkPromise.

// doneSoFar is the job's final results now, -1 while the cluster does not
// answer (a leader being elected).
func doneSoFar(b *broker.Broker, job string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	j, _, err := b.GetJob(ctx, job)
	if err != nil {
		return -1
	}
	c, err := b.JobCounts(ctx, j, false)
	if err != nil {
		return -1
	}
	return c.Done
}

// chaosWorkers starts two `jetpool worker` children on the cluster, each
// allowed to send the model's key to the model.
func chaosWorkers(t *testing.T, c *natsCluster, m *model, job string, ackWait time.Duration) {
	env := workerEnv(c.urls(), ackWait, "JETPOOL_REPLICAS", "3", "CHAOS_API_KEY", "k",
		"JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
	for range 2 {
		start(t, env, "worker", "--concurrency", "8", "--job", job)
	}
}

// Kill the leader of each of jetpool's streams and buckets in turn, mid-job
// (SIGKILL, then start it again on its store): every paid answer is kept —
// a result write the lost leader did not answer is written again, not
// called again — and every record has one final result.
func TestChaosLeaderLoss(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 1500
	c := startNATSCluster(t, natsOpts{SyncAlways: true})
	admin := readyURLs(t, c.urls(), 10*time.Second)
	m := newModel(t, 50*time.Millisecond)
	m.script = func(key string, call int) (providertest.Reply, bool) {
		if strings.HasSuffix(key, "7") { // a record in ten dead-letters: the DLQ is written throughout
			return providertest.Reply{Status: 401, Body: providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")}, true
		}
		return providertest.Reply{}, false
	}
	wf := modelWorkflow(t, m, "{max_attempts: 3, backoff: 100ms}", "answer")
	res := testenv.Dispatch(t, admin, wf, testenv.Records(t, n), dispatcher.Options{JobID: "chaos"})
	chaosWorkers(t, c, m, res.Job.ID, 10*time.Second)

	targets := []string{broker.StreamResults, broker.StreamWork, broker.StreamDLQ,
		"KV_" + broker.BucketAttempts, "KV_" + broker.BucketJobState, "KV_" + broker.BucketClaims}
	var killed []time.Time
	for i, stream := range targets {
		at := int64((i + 1) * n / (len(targets) + 2))
		testenv.Eventually(t, 90*time.Second, func() bool { return doneSoFar(admin, res.Job.ID) >= at }, "%d records done", at)
		leader := c.leader(admin, stream)
		c.kill(leader)
		killed = append(killed, time.Now())
		t.Logf("killed %s, the leader of %s, with %d records done", c.nodes[leader].name, stream, doneSoFar(admin, res.Job.ID))
		// The job goes on without it; then it comes back and catches up,
		// with calls slowed meanwhile so that the job is still running at
		// the next kill.
		testenv.Eventually(t, 60*time.Second, func() bool { return doneSoFar(admin, res.Job.ID) >= at+50 }, "progress without %s", c.nodes[leader].name)
		m.setSlow(time.Second)
		c.start(leader)
		c.healthy(leader) // as a rolling restart waits, before the next node
		c.current(admin, stream)
		m.setSlow(0)
	}
	j, _ := waitFinished(t, admin, res.Job.ID, 120*time.Second, func(j *broker.Job) string { return explainMissing(admin, j, m, n) })
	// No record is paid again, a twin delivery after a node's loss neither
	// (docs/durability.md: workers hear the elections and wait for a
	// twin); one that is still is reported as such (Known gaps).
	t.Log(checkPromise(t, admin, j, m, promise{n: n, bound: callBound(wf), serverKills: killed, serverWindow: 10 * time.Second}))
	// Each record's call was claimed first (worker/handle.go twin): one key a record.
	claimed := claims(t, admin).Msgs
	t.Logf("claims: %d records claimed (a claim the store refused during a kill is not there)", claimed)
	require.Greater(t, claimed, uint64(n/2), "the workers claim their calls on R3")
}

// Freeze the node leading the results stream for 20 s (SIGSTOP): its
// connections stay open and silent. Result writes it does not answer are
// held and written again once a new leader is elected; workers connected to
// it notice and move on; nothing is paid twice.
func TestChaosFrozenNode(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 1200
	c := startNATSCluster(t, natsOpts{SyncAlways: true})
	admin := readyURLs(t, c.urls(), broker.AckWaitDefault)
	m := newModel(t, 50*time.Millisecond)
	wf := modelWorkflow(t, m, "{max_attempts: 3, backoff: 100ms}", "answer")
	res := testenv.Dispatch(t, admin, wf, testenv.Records(t, n), dispatcher.Options{JobID: "frozen"})
	chaosWorkers(t, c, m, res.Job.ID, broker.AckWaitDefault)

	testenv.Eventually(t, 60*time.Second, func() bool { return doneSoFar(admin, res.Job.ID) >= n/4 }, "a quarter done")
	victim := c.leader(admin, broker.StreamResults)
	c.freeze(victim)
	frozen := time.Now()
	t.Cleanup(func() {
		if c.nodes[victim].frozen {
			c.thaw(victim)
		}
	})
	// Twenty seconds of a silent node, watched from a node that answers.
	other := (victim + 1) % 3
	watch := clusterBroker(t, c.url(other))
	testenv.Eventually(t, 60*time.Second, func() bool { return time.Since(frozen) >= 20*time.Second }, "20 s frozen")
	t.Logf("%s (results leader) frozen 20 s; %d records done meanwhile", c.nodes[victim].name, doneSoFar(watch, res.Job.ID))
	c.thaw(victim)
	j, _ := waitFinished(t, admin, res.Job.ID, 120*time.Second)
	t.Log(checkPromise(t, admin, j, m, promise{n: n, bound: callBound(wf)}))
}

// A store that fills up mid-job (a server's max_file_store, taken by
// another stream): result writes are refused ("insufficient storage"), the
// answers are held, pulling pauses, `jetpool run` says what is wrong; once
// space comes back the same run completes, with no call made twice.
func TestChaosFullStore(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	chaosFullStore(t, false)
}

// The same where every write is synced and writes are batched: the work
// stream keeps acked records until they are purged, and results go in
// group commits (docs/durability.md); a full store fails a whole batch.
func TestChaosFullStoreSynced(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	chaosFullStore(t, true)
}

func chaosFullStore(t *testing.T, synced bool) {
	const n = 3000
	c := startNATSCluster(t, natsOpts{Nodes: 1, MaxStore: 64 << 20, SyncAlways: synced})
	ctx := context.Background()
	nc, err := nats.Connect(c.url(0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	filler, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}})
	require.NoError(t, err)

	m := newModel(t, 5*time.Millisecond)
	m.answer = strings.Repeat("x", 3000) + " answer of %s" // 3 KB answers
	dir, wfPath := modelWorkflowFile(t, m)
	out := filepath.Join(dir, "results.jsonl")
	env := workerEnv(c.url(0), 10*time.Second, "CHAOS_API_KEY", "k")
	if synced {
		env["JETPOOL_BATCH_WRITES"] = "on"
	}
	run := start(t, env, "run", wfPath, "--input", testenv.Records(t, n), "--output", out, "--no-progress", "--concurrency", "16")

	// A quarter in, another stream takes every byte left.
	testenv.Eventually(t, 60*time.Second, func() bool { return m.total() >= n/4 }, "a quarter called")
	big := make([]byte, 256<<10)
	filled := 0
	for tries := 0; tries < 2000; tries++ {
		if _, err := js.Publish(ctx, "filler", big); err != nil {
			if filled > 0 && strings.Contains(err.Error(), "insufficient") {
				break
			}
			continue
		}
		filled++
	}
	// Keep it full while the held records would free space by their acks
	// (they do not ack: nothing is acked before it is stored).
	run.waitOutput(t, regexp.MustCompile(`writes to JETPOOL_RESULTS are failing`), 60*time.Second)
	stopFill := func() {}
	if synced {
		// There the workers' purges free what the records acked before the
		// fill held (up to a second's worth): the filler takes that too, as
		// another stream growing would, and the pause is counted from two
		// purges on.
		stop := make(chan struct{})
		kept := make(chan struct{})
		go func() {
			defer close(kept)
			chunk := make([]byte, 16<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := js.Publish(ctx, "filler", chunk); err != nil {
					testenv.Tick()
				}
			}
		}()
		stopFill = func() { close(stop); <-kept }
		full := time.Now()
		testenv.Eventually(t, 30*time.Second, func() bool { return time.Since(full) > 2*time.Second }, "two purges on")
	}
	paused := m.total()
	since := time.Now()
	testenv.Eventually(t, 30*time.Second, func() bool { return time.Since(since) > 5*time.Second }, "paused 5 s")
	require.LessOrEqual(t, m.total()-paused, 2*16, "work paused: at most the slots and held answers more (was %d)", paused)
	t.Logf("store full after %d records called, %d MiB of filler; %d calls during 5 s of a full store", paused, filled/4, m.total()-paused)

	// jetpool status says what is wrong, and counts every record in one
	// column: nothing outside them while the store is full.
	st := jetpool(t, map[string]string{"JETPOOL_NATS_URL": c.url(0)}, "status", "--json")
	require.Zero(t, st.code, st.stderr)
	var jobs []struct {
		Total             int64
		Queued            int64
		InFlight          int64 `json:"in_flight"`
		Storing           int64
		Waiting           int64 `json:"waiting_for_redelivery"`
		Succeeded, Failed int64
		StorageFaults     []struct{ Write, Stream, Hint string } `json:"storage_faults"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &jobs), st.stdout)
	require.Len(t, jobs, 1)
	s := jobs[0]
	require.Equal(t, s.Total, s.Queued+s.InFlight+s.Storing+s.Waiting+s.Succeeded+s.Failed, "every record in one column: %+v", s)
	require.NotEmpty(t, s.StorageFaults, "status shows the storage fault")
	require.Contains(t, s.StorageFaults[0].Hint, "full")

	stopFill()                            // before the space comes back
	require.NoError(t, filler.Purge(ctx)) // space comes back
	require.Contains(t, []int{0}, run.wait(t, 120*time.Second), "the same run completes")
	f, err := os.Open(out)
	require.NoError(t, err)
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r struct{ ID, Status string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r))
		require.False(t, seen[r.ID], "one line a record: %s", r.ID)
		seen[r.ID] = true
		require.Equal(t, "ok", r.Status, r.ID)
	}
	require.Len(t, seen, n)
	for id := range seen {
		require.Len(t, m.callsOf("answer/"+id), 1, "%s: called once", id)
	}
}

// `jetpool retry` killed (SIGKILL) half way through its replay, with the
// embedded server it hosts: run again, it finds the replay it left
// unfinished, says so and finishes it; every record ends with one result.
func TestChaosRetryKilled(t *testing.T) {
	t.Parallel()
	const n = 600
	m := newModel(t, 20*time.Millisecond)
	var fixed atomic.Bool
	m.script = func(key string, call int) (providertest.Reply, bool) {
		if strings.HasSuffix(key, "3") && !fixed.Load() {
			return providertest.Reply{Status: 401, Body: providertest.OpenAIError("Incorrect API key provided", "invalid_request_error", "invalid_api_key")}, true
		}
		return providertest.Reply{}, false
	}
	dir, wfPath := modelWorkflowFile(t, m)
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_ACK_WAIT": "3s", "CHAOS_API_KEY": "k",
		"JETPOOL_LOG_LEVEL": "warn"}
	r := jetpool(t, env, "run", wfPath, "--input", testenv.Records(t, n), "--no-progress", "--job", "replayed")
	require.Equal(t, 4, r.code, "completed with failed records: %s", r.stderr)
	failed := m.total() - (n - n/10)
	require.Equal(t, n/10, failed, "a record in ten was refused")

	fixed.Store(true) // the key is fixed
	before := m.total()
	retry := start(t, env, "retry", "--no-progress")
	testenv.Eventually(t, 60*time.Second, func() bool { return m.total()-before >= failed/3 }, "a third replayed")
	retry.signal(t, syscall.SIGKILL)
	killed := time.Now()
	retry.wait(t, 10*time.Second)
	atKill := m.total() - before

	// The kill's signal is sent at killed; the process dies a moment after,
	// and a request it wrote just before can reach the model after killed.
	// Every call that starts before the second retry does was the first's.
	second := time.Now()
	again := jetpool(t, env, "retry", "--no-progress")
	require.Equal(t, 0, again.code, again.stdout+again.stderr)
	require.Contains(t, again.stderr, "is not finished", "the second retry says what it found")
	require.Contains(t, again.stdout, fmt.Sprintf("%d records, %d succeeded, 0 failed", n, n))

	// Every record: one final result, ok; none paid again after it was
	// answered, but for the calls the killed process had in flight.
	for _, id := range okResults(t, env, "replayed", n) {
		calls := m.callsOf("answer/" + id)
		for i := 0; i+1 < len(calls); i++ {
			if calls[i].status == 200 {
				// Called again after an answer: only the kill explains it
				// (the killed process had the answer, not yet stored, or
				// never read it), so the answer was the first retry's and
				// the call again the second's.
				at := func(t time.Time) string { return t.Format(time.TimeOnly + ".000") }
				require.True(t, calls[i].start.Before(second) && !calls[i+1].start.Before(second),
					"%s: called at %s (answered at %s) and again at %s; the first retry was killed at %s, the second started at %s",
					id, at(calls[i].start), at(calls[i].end), at(calls[i+1].start), at(killed), at(second))
			}
		}
	}
	t.Logf("retry killed after %d calls for %d dead letters; the second retry made %d (the rest, and those the killed one had in flight or unstored)",
		atKill, failed, m.total()-before-atKill)
}

// okResults reads job's results with `jetpool results` and requires one
// line a record, n in all, each ok; it returns their record ids.
func okResults(t *testing.T, env map[string]string, job string, n int) []string {
	t.Helper()
	rs := jetpool(t, env, "results", job)
	require.Zero(t, rs.code, rs.stderr)
	lines := strings.Split(strings.TrimSpace(rs.stdout), "\n")
	require.Len(t, lines, n, "one line a record")
	ids := make([]string, 0, n)
	for _, l := range lines {
		var res struct{ ID, Status string }
		require.NoError(t, json.Unmarshal([]byte(l), &res))
		require.Equal(t, "ok", res.Status, res.ID)
		ids = append(ids, res.ID)
	}
	return ids
}

// A cluster started a moment ago (compose, Kubernetes): `jetpool dispatch`
// waits for JetStream to elect its leaders and place the streams, within a
// bound, instead of failing with "context deadline exceeded".
func TestChaosDispatchToAFreshCluster(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	c := startNATSCluster(t, natsOpts{}) // listening, no meta leader yet
	wf := filepath.Join(t.TempDir(), "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(simYAML(0, "")), 0o600))
	r := jetpool(t, map[string]string{"JETPOOL_NATS_URL": c.urls(), "JETPOOL_REPLICAS": "3"},
		"dispatch", wf, "--input", testenv.Records(t, 20), "--job", "fresh")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "fresh\n", r.stdout)
}

// A starved pool — an adaptive window of one call, many slots, a short
// AckWait — keeps every record it holds alive while it waits for its turn:
// none runs out its AckWait into a second delivery (and a second payment).
func TestChaosStarvedPool(t *testing.T) {
	t.Parallel()
	const n = 150
	b := testenv.Broker(t, testenv.Options{AckWait: time.Second})
	wf := testenv.Workflow(t, simYAML(20*time.Millisecond, ""))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{JobID: "starved"})
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 64, NewProvider: counter.New,
		LimitsConfig: ratelimit.Config{AdaptiveInitial: 1, AdaptiveMax: 1}})
	j, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	require.EqualValues(t, n, p.OK)
	ctx := context.Background()
	cons, err := b.JS.Consumer(ctx, broker.StreamWork, broker.ConsumerName(res.Job.ID))
	require.NoError(t, err)
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.Zero(t, info.NumRedelivered, "no record ran out its AckWait while it waited for the window")
	for id, r := range checkResults(t, b, j, n) {
		require.Equal(t, 1, counter.Calls(id), id)
		require.Zero(t, r.Recovery.Lost, id)
	}
}

// A lookup reads the leader, and a lookup through a node just back from a
// long freeze finds every outcome stored meanwhile. Such a node is behind
// (the leader dropped its route to it) and answers "JetStream temporarily
// unavailable" for a while: that is asked again, not an error. A direct
// get could be answered by a follower that is only 90 % caught up
// (nats-server serves a follower's direct gets from there), so lookups that
// decide whether to pay do not use them; the test logs what direct gets
// through the thawed node found.
//
// Counts and reads (status, exports) are kept off a member that is behind.
func TestChaosLookupReadsTheLeader(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 300
	c := startNATSCluster(t, natsOpts{})
	admin := readyURLs(t, c.urls(), 10*time.Second)
	leader := c.leader(admin, broker.StreamResults)
	follower := (leader + 1) % 3
	writer := clusterBroker(t, c.url(leader))
	reader := clusterBroker(t, c.url(follower))
	ctx := context.Background()

	c.freeze(follower)
	frozen := time.Now()
	big := strings.Repeat("x", 64<<10) // enough to fill the routes' buffers: the leader drops its route to the frozen node
	for i := range n {
		require.NoError(t, writer.WriteResult(ctx, &broker.Result{ID: fmt.Sprintf("r%d", i), Job: "thaw", Action: "a", Status: broker.StatusOK, Output: big}))
	}
	testenv.Eventually(t, time.Minute, func() bool { return time.Since(frozen) > 15*time.Second }, "frozen past the route's write deadline")
	c.thaw(follower)
	// The reader's connection to the thawed node went stale: it reconnects.
	var s jetstream.Stream
	testenv.Eventually(t, 30*time.Second, func() bool {
		var err error
		s, err = reader.JS.Stream(ctx, broker.StreamResults)
		return err == nil
	}, "the results stream's info through the thawed node")
	// Counts and whole-stream reads made now are placed at random on a
	// member: one placed on the thawed, behind, member is made again on a
	// current one (broker/current.go), and they all see every result.
	for k := range 6 {
		var got uint64
		testenv.Eventually(t, 30*time.Second, func() bool {
			var err error
			got, err = reader.Count(ctx, broker.StreamResults, broker.ResultFilter("thaw", "", ""))
			return err == nil
		}, "count %d answers", k)
		require.EqualValues(t, n, got, "count %d after the thaw", k)
		read := 0
		require.NoError(t, reader.EachResult(ctx, "thaw", func(*broker.Result) error { read++; return nil }))
		require.Equal(t, n, read, "read %d after the thaw", k)
	}
	direct, missed, errs := 0, 0, 0
	for i := range n {
		id := fmt.Sprintf("r%d", i)
		if m, err := s.GetLastMsgForSubject(ctx, broker.ResultSubject("thaw", "a", "*", id)); err != nil || m == nil {
			direct++
		}
		// A lookup that errs (the client's connection to the thawed node
		// went stale and reconnects) is what a worker holds and asks again:
		// never a miss, which would pay.
		var r *broker.Result
		testenv.Eventually(t, 30*time.Second, func() bool {
			var err error
			r, _, err = reader.LastOutcome(ctx, "thaw", "a", id)
			if err != nil {
				errs++
			}
			return err == nil
		}, "a lookup of %s answers", id)
		if r == nil {
			missed++
		}
	}
	t.Logf("after the thaw, %d of %d direct gets through the thawed replica found nothing; lookups from the leader missed %d (%d asked again after an error)", direct, n, missed, errs)
	require.Zero(t, missed)
}

// modelWorkflowFile writes, in a new temp dir, a one-action workflow
// calling m, for the jetpool commands a test runs.
func modelWorkflowFile(t *testing.T, m *model) (dir, path string) {
	dir = t.TempDir()
	path = filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf(`providers:
  chaos: {kind: openai, base_url: %s/v1, api_key_env: CHAOS_API_KEY}
defaults: {provider: chaos, model: chaos-1}
actions:
  - name: answer
    prompt: "ACTION answer: {{ .text }}"
`, m.URL)), 0o600))
	return dir, path
}
