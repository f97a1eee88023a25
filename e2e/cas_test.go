package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/worker"
)

// On a replicated (R3) bucket a lost compare-and-set is reported with code
// 10164, not 10071: matched as jetstream.ErrKeyExists alone, a conflict
// was an error, so a limiter slot stayed held and a job was not marked
// failed. Several connections, each on another node, update one limiter
// state and one job state at once: every update retries and lands.
func TestChaosCompareAndSetContention(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	c := startCluster(t)
	admin := readyCluster(t, c)
	job := dispatch(t, admin, simWorkflow(t, 0, ""), 1, "cas")
	const writers, each = 4, 15
	var brokers []*broker.Broker
	for i := range writers {
		brokers = append(brokers, clusterBroker(t, c.url(i%3)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, 2*writers*each)
	for i, b := range brokers {
		store, err := ratelimit.NewKVStore(ctx, b)
		require.NoError(t, err)
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range each {
				if _, err := store.Update(ctx, "cas.nokey", func(s *ratelimit.State) bool { s.Cooldowns++; return true }); err != nil {
					errs <- fmt.Errorf("limits, writer %d: %w", i, err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range each {
				if _, err := b.UpdateJob(ctx, job.ID, func(j *broker.Job) bool { j.Reason += "x"; return true }); err != nil {
					errs <- fmt.Errorf("job, writer %d: %w", i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	st, err := ratelimit.NewKVStore(ctx, admin)
	require.NoError(t, err)
	all, err := st.List(ctx)
	require.NoError(t, err)
	require.Equal(t, writers*each, all["cas.nokey"].Cooldowns, "every limits update landed once")
	j, _, err := admin.GetJob(ctx, job.ID)
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("x", writers*each), j.Reason, "every job update landed once")
}

// `limits:` on a cluster: one budget (concurrency 2) shared by three pools
// on three connections, each to another node, through the R3
// JETPOOL_LIMITS bucket; their leases contend on one key for the whole
// job, which completes, and never more than two calls run at once.
func TestClusterSharedLimits(t *testing.T) {
	t.Parallel()
	c := startCluster(t)
	admin := readyCluster(t, c)
	wf := testenv.Workflow(t, `
providers:
  sim:
    kind: sim
    limits: {concurrency: 2}
    sim: {latency: 30ms, seed: 11}
defaults: {provider: sim, model: sim-1}
actions:
  - {name: answer, prompt: "Answer: {{ .text }}"}
`)
	const n = 60
	job := dispatch(t, admin, wf, n, "limits")
	var mu sync.Mutex
	running, most := 0, 0
	counter := testenv.NewCounter()
	counter.Wrap = func(_ provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		return next()
	}
	for i := range 3 {
		testenv.Pool(t, clusterBroker(t, c.url(i)), worker.Config{Concurrency: 4, NewProvider: counter.New})
	}
	j, p := waitFinished(t, admin, job.ID, 90*time.Second)
	require.EqualValues(t, n, p.OK, "%+v", p.Counts)
	checkResults(t, admin, j, n)
	require.LessOrEqual(t, most, 2, "the shared concurrency budget holds across the pools")
	t.Logf("3 pools on 3 nodes, limits {concurrency: 2}: %d records, at most %d calls at once, %d calls", n, most, counter.Total())
}
