//go:build chaos

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// The frozen tests stop a process that is calling the model — a worker, a
// nats-server node, a whole `jetpool run` — for longer than AckWait
// (SIGSTOP, as Ctrl-Z, docker pause or a VM migration do), while the model
// goes on answering, then let it go on (SIGCONT). The promise: nothing
// lost, one result a record, no call after a record's result was stored,
// calls within validate's bound, and no call paid again while its holder
// was frozen for less than its claim stands (2 × AckWait).

// frozenWorkflow is a one-action workflow on m with a retry block (bound:
// 3 attempts × 3 deliveries) and the provider's per-call timeout ("":
// the default); every worker's slots call at once (no adaptive window).
func frozenWorkflow(t testing.TB, m *model, timeout string) string {
	t.Helper()
	to := ""
	if timeout != "" {
		to = ", timeout: " + timeout
	}
	return fmt.Sprintf(`providers:
  chaos: {kind: openai, base_url: %s/v1, api_key_env: CHAOS_API_KEY, limits: {adaptive: false}%s}
defaults:
  provider: chaos
  model: chaos-1
  retry: {max_attempts: 3, backoff: 100ms}
actions:
  - name: answer
    prompt: "ACTION answer: {{ .text }}"
`, m.URL, to)
}

// inFlight is the model's calls under way now.
func (m *model) inFlight() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, cs := range m.calls {
		for _, c := range cs {
			if c.end.IsZero() {
				n++
			}
		}
	}
	return n
}

// storedWatch notes when each record's first result was stored: an
// ordered consumer on the job's results, started before any is, sees
// every one stored (one a record replaced later included) with the
// server's time of its store.
type storedWatch struct {
	mu    sync.Mutex
	first map[string]time.Time
}

func watchStored(t testing.TB, url, job string) *storedWatch {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	// A cluster just made, on a loaded host, may not answer the first
	// asks in time: asked again, each bounded, for two minutes in all.
	var cons jetstream.Consumer
	testenv.Eventually(t, 2*time.Minute, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		cons, err = js.OrderedConsumer(ctx, broker.StreamResults, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{"jetpool.results." + job + ".>"}})
		if err != nil {
			t.Logf("an ordered consumer on %s: %v", broker.StreamResults, err)
		}
		return err == nil
	}, "an ordered consumer on %s", broker.StreamResults)
	w := &storedWatch{first: map[string]time.Time{}}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		tok := strings.Split(m.Subject(), ".")
		id := tok[len(tok)-1]
		w.mu.Lock()
		if at, ok := w.first[id]; !ok || md.Timestamp.Before(at) {
			w.first[id] = md.Timestamp
		}
		w.mu.Unlock()
	})
	require.NoError(t, err)
	t.Cleanup(cc.Stop)
	return w
}

func (w *storedWatch) at(id string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.first[id]
	return at, ok
}

// paid is what a frozen test's records cost.
type paid struct {
	twice, thrice, maxCalls, calls int
	// afterStored is the calls made after their record's result was
	// stored; late says the first few.
	afterStored int
	late        []string
}

func (p paid) String() string {
	return fmt.Sprintf("%d calls, %d records paid twice (an answer, then called again), %d three times or more, at most %d calls a record, %d calls after a stored result %v",
		p.calls, p.twice, p.thrice, p.maxCalls, p.afterStored, p.late)
}

// frozenPromise checks what the frozen tests promise of records ids:
// calls within bound, and counts the records paid again and the calls
// made after their record's first result was stored (stored nil: not
// counted), which the caller asserts after logging them.
func frozenPromise(t testing.TB, m *model, ids []string, stored *storedWatch, bound int) paid {
	t.Helper()
	var p paid
	for _, id := range ids {
		cs := m.callsOf("answer/" + id)
		p.calls += len(cs)
		p.maxCalls = max(p.maxCalls, len(cs))
		require.LessOrEqual(t, len(cs), bound, "%s: %d calls, over validate's bound of %d", id, len(cs), bound)
		again := 0
		for i, c := range cs {
			if c.status == 200 && i+1 < len(cs) {
				again = len(cs) - 1 - i
				break
			}
		}
		switch {
		case again >= 2:
			p.thrice++
			fallthrough
		case again == 1:
			p.twice++
		}
		if stored == nil {
			continue
		}
		at, ok := stored.at(id)
		if !ok {
			testenv.Eventually(t, 30*time.Second, func() bool { at, ok = stored.at(id); return ok }, "%s: its result seen stored", id)
		}
		for _, c := range cs {
			if c.start.After(at) {
				p.afterStored++
				if len(p.late) < 5 {
					p.late = append(p.late, fmt.Sprintf("%s called at %s, stored at %s", id, c.start.Format(time.TimeOnly+".000"), at.Format(time.TimeOnly+".000")))
				}
			}
		}
	}
	return p
}

func recordIDs(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("r%d", i+1)
	}
	return ids
}

// A `jetpool worker` stopped (SIGSTOP) with calls in flight, past AckWait;
// another worker serves the job meanwhile; then the frozen one goes on
// (SIGCONT). Its calls' answers arrived while it was stopped.
//   - Frozen less than a claim stands (2 × AckWait): the other worker waits
//     for its claim, and nothing is paid again.
//   - Frozen longer: the other worker takes its lapsed claim and calls
//     (the frozen one is taken for dead); the frozen one, thawed, uses the
//     answers it holds and calls nothing again — never a third call, even
//     where the per-call timeout passed while it was stopped.
func TestChaosFrozenWorker(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		ackWait, freeze time.Duration
		latency         time.Duration
		timeout         string
		n               int
		pastClaim       bool // frozen longer than the claim stands
	}{
		{name: "short calls, frozen within the claim", ackWait: 3 * time.Second, freeze: 5 * time.Second, latency: 200 * time.Millisecond, n: 300},
		{name: "short calls, frozen past the claim and the call's timeout", ackWait: 2 * time.Second, freeze: 9 * time.Second, latency: 200 * time.Millisecond, timeout: "4s", n: 300, pastClaim: true},
		{name: "6 s calls, frozen within the claim", ackWait: 3 * time.Second, freeze: 5 * time.Second, latency: 6 * time.Second, n: 32},
		{name: "6 s calls, frozen past the claim", ackWait: 2 * time.Second, freeze: 7 * time.Second, latency: 6 * time.Second, timeout: "10s", n: 32, pastClaim: true},
		// The defaults: AckWait 30 s, a claim standing a minute, calls
		// timed out after 120 s.
		{name: "default AckWait, frozen 45 s", ackWait: broker.AckWaitDefault, freeze: 45 * time.Second, latency: 200 * time.Millisecond, n: 300},
		{name: "default AckWait, frozen 150 s, past the claim and the call's timeout", ackWait: broker.AckWaitDefault, freeze: 150 * time.Second, latency: 200 * time.Millisecond, n: 300, pastClaim: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			longChaos(t, tc.freeze)
			const conc = 8
			c := startNATSCluster(t, natsOpts{})
			admin := readyURLs(t, c.urls(), tc.ackWait)
			m := newModel(t, tc.latency)
			wf := testenv.Workflow(t, frozenWorkflow(t, m, tc.timeout))
			res := testenv.Dispatch(t, admin, wf, testenv.Records(t, tc.n), dispatcher.Options{JobID: "frozenworker"})
			stored := watchStored(t, c.urls(), res.Job.ID)
			env := workerEnv(c.urls(), tc.ackWait, "JETPOOL_REPLICAS", "3", "CHAOS_API_KEY", "k",
				"JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
			a := start(t, env, "worker", "--concurrency", fmt.Sprint(conc), "--job", res.Job.ID)
			// Mid-job, with a full set of calls in flight: the model
			// answers them while the worker is stopped.
			testenv.Eventually(t, 60*time.Second, func() bool { return m.total() >= 2*conc && m.inFlight() == conc }, "worker A calling, %d calls in flight", conc)
			a.signal(t, syscall.SIGSTOP)
			frozen := time.Now()
			heldCalls := m.inFlight()
			t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
			start(t, env, "worker", "--concurrency", fmt.Sprint(conc), "--job", res.Job.ID)
			testenv.Eventually(t, tc.freeze+time.Minute, func() bool { return time.Since(frozen) >= tc.freeze }, "frozen %s", tc.freeze)
			a.signal(t, syscall.SIGCONT)
			j, _ := waitFinished(t, admin, res.Job.ID, 3*time.Minute, func(j *broker.Job) string { return explainMissing(admin, j, m, tc.n) })
			checkResults(t, admin, j, tc.n)
			p := frozenPromise(t, m, recordIDs(tc.n), stored, callBound(wf))
			t.Logf("worker frozen %s (AckWait %s, calls of %s) with %d calls in flight: %s", tc.freeze, tc.ackWait, tc.latency, heldCalls, p)
			require.Zero(t, p.afterStored, "no call after a stored result")
			require.Zero(t, p.thrice, "no record paid three times")
			if !tc.pastClaim {
				require.Zero(t, p.twice, "frozen within its claims: nothing paid again")
			}
		})
	}
}

// A nats-server node stopped (SIGSTOP) for 20 s under 6 s calls. Worker A
// knows only that node: its heartbeats and claim renewals go nowhere until
// its client finds the node stale and reconnects to another (10-15 s), so
// the job consumer's leader, on another node, delivers A's records again
// to worker B once their AckWait runs out, while A's calls go on and their
// answers wait to be stored.
//   - Where a claim stands longer than A is cut off (2 × AckWait 10 s),
//     B waits for A's claims: nothing is paid again.
//   - Where it does not (AckWait 3 s), A is taken for dead: B takes its
//     lapsed claims over and calls, counting A's calls against each
//     record's budget; A, back, calls nothing again.
func TestChaosFrozenNodeLongCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ackWait   time.Duration
		pastClaim bool
	}{{ackWait: 10 * time.Second}, {ackWait: 3 * time.Second, pastClaim: true}} {
		t.Run(fmt.Sprintf("AckWait %s", tc.ackWait), func(t *testing.T) {
			// A's 8 calls, and B's 16 with 8 slots to spare: the records
			// delivered again find B free at once.
			const n, conc = 24, 8
			c := startNATSCluster(t, natsOpts{SyncAlways: true})
			admin := readyURLs(t, c.urls(), tc.ackWait)
			m := newModel(t, 6*time.Second)
			wf := testenv.Workflow(t, frozenWorkflow(t, m, ""))
			res := testenv.Dispatch(t, admin, wf, testenv.Records(t, n), dispatcher.Options{JobID: "frozennode"})
			leader := consumerLeader(t, c, admin, broker.StreamWork, broker.ConsumerName(res.Job.ID))
			victim := (leader + 1) % 3
			other := (victim + 1) % 3
			var rest []string
			for i := range c.nodes {
				if i != victim {
					rest = append(rest, c.url(i))
				}
			}
			stored := watchStored(t, c.url(other), res.Job.ID)
			worker := func(url string, conc int) {
				env := workerEnv(url, tc.ackWait, "JETPOOL_REPLICAS", "3", "CHAOS_API_KEY", "k",
					"JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
				start(t, env, "worker", "--concurrency", fmt.Sprint(conc), "--job", res.Job.ID)
			}
			worker(c.url(victim), conc)
			testenv.Eventually(t, 60*time.Second, func() bool { return m.inFlight() == conc }, "worker A calling")
			worker(strings.Join(rest, ","), 3*conc)
			// B has the rest (but what A read ahead), and slots to spare.
			testenv.Eventually(t, 60*time.Second, func() bool { return m.inFlight() >= n-conc/2 }, "B calling too")
			c.freeze(victim)
			t.Cleanup(func() {
				if c.nodes[victim].frozen {
					c.thaw(victim)
				}
			})
			frozen := time.Now()
			testenv.Eventually(t, 2*time.Minute, func() bool { return time.Since(frozen) >= 20*time.Second }, "20 s frozen")
			c.thaw(victim)
			j, _ := waitFinished(t, admin, res.Job.ID, 3*time.Minute, func(j *broker.Job) string { return explainMissing(admin, j, m, n) })
			checkResults(t, admin, j, n)
			p := frozenPromise(t, m, recordIDs(n), stored, callBound(wf))
			t.Logf("%s (worker A's only node) frozen 20 s under 6 s calls, AckWait %s: %s", c.nodes[victim].name, tc.ackWait, p)
			require.Zero(t, p.afterStored, "no call after a stored result")
			require.Zero(t, p.thrice, "no record paid three times")
			if !tc.pastClaim {
				require.Zero(t, p.twice, "no record answered twice")
			}
		})
	}
}

// consumerLeader is the node leading stream's consumer now.
func consumerLeader(t testing.TB, c *natsCluster, b *broker.Broker, stream, consumer string) int {
	t.Helper()
	leader := -1
	testenv.Eventually(t, 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		cs, err := b.JS.Consumer(ctx, stream, consumer)
		if err != nil {
			return false
		}
		info, err := cs.Info(ctx)
		if err != nil || info.Cluster == nil {
			return false
		}
		leader = c.byName(info.Cluster.Leader)
		return leader >= 0
	}, "consumer %s has a leader", consumer)
	return leader
}

// A single `jetpool run` (its embedded server in the same process) stopped
// past AckWait with calls in flight, then let go on: when it thaws, the
// server's AckWait has run out for every record in flight and it delivers
// them again, to the same process, which holds them still. Nothing is paid
// again, whatever the freeze and the call's timeout.
func TestChaosFrozenRun(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		ackWait, freeze time.Duration
		latency         time.Duration
		timeout         string
		conc            int
	}{
		{name: "1 s calls, frozen 4×AckWait", ackWait: 2 * time.Second, freeze: 8 * time.Second, latency: time.Second, conc: 16},
		{name: "frozen past the call's timeout", ackWait: 3 * time.Second, freeze: 12 * time.Second, latency: 500 * time.Millisecond, timeout: "5s", conc: 16},
		{name: "default AckWait, 32 in flight, frozen 40 s", ackWait: broker.AckWaitDefault, freeze: 40 * time.Second, latency: time.Second, conc: 32},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			longChaos(t, tc.freeze)
			const n = 160
			conc := tc.conc
			m := newModel(t, tc.latency)
			dir := t.TempDir()
			wfPath := filepath.Join(dir, "wf.yaml")
			require.NoError(t, os.WriteFile(wfPath, []byte(frozenWorkflow(t, m, tc.timeout)), 0o600))
			out := filepath.Join(dir, "results.jsonl")
			env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_ACK_WAIT": tc.ackWait.String(),
				"CHAOS_API_KEY": "k", "JETPOOL_LOG_LEVEL": "info"}
			run := start(t, env, "run", wfPath, "--input", testenv.Records(t, n), "--output", out, "--no-progress",
				"--concurrency", fmt.Sprint(conc), "--job", "frozenrun")
			testenv.Eventually(t, 60*time.Second, func() bool { return m.total() >= 2*conc && m.inFlight() == conc }, "%d calls in flight", conc)
			run.signal(t, syscall.SIGSTOP)
			frozen := time.Now()
			heldCalls := m.inFlight()
			t.Cleanup(func() { _ = run.cmd.Process.Signal(syscall.SIGCONT) })
			testenv.Eventually(t, tc.freeze+time.Minute, func() bool { return time.Since(frozen) >= tc.freeze }, "frozen %s", tc.freeze)
			run.signal(t, syscall.SIGCONT)
			require.Equal(t, 0, run.wait(t, 3*time.Minute), "the run completes")
			lines := readResultLines(t, out)
			require.Len(t, lines, n, "one line a record")
			p := frozenPromise(t, m, recordIDs(n), nil, 9)
			t.Logf("jetpool run frozen %s (AckWait %s, calls of %s, timeout %q) with %d calls in flight: %s", tc.freeze, tc.ackWait, tc.latency, tc.timeout, heldCalls, p)
			require.Zero(t, p.twice, "nothing paid again")
		})
	}
}

// readResultLines reads a results file: one ok line a record, by id.
func readResultLines(t testing.TB, path string) map[string]bool {
	t.Helper()
	f, err := os.Open(path)
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
	require.NoError(t, sc.Err())
	return seen
}
