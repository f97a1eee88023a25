package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A twin delivered while the claims bucket's leader does not answer (its
// node frozen, SIGSTOP) must not call: its claim is asked again until the
// bucket's new leader answers, and that leader holds the first delivery's
// claim. Before, a claim that timed out let the call go on without one,
// and every twin paid again: TestChaosLeaderLoss paid six records again in
// CI 5.5 s after their first calls (the claim's 5 s timeout), after the
// leader of the claims bucket and of the results was lost at once.
func TestChaosTwinWaitsOutAFrozenClaimsLeader(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 6
	c := startNATSCluster(t, natsOpts{})
	admin := readyURLs(t, c.urls(), 10*time.Second)
	m := newModel(t, 2*time.Second)
	wf := modelWorkflow(t, m, "{max_attempts: 3, backoff: 100ms}", "answer")
	res := testenv.Dispatch(t, admin, wf, testenv.Records(t, n), dispatcher.Options{JobID: "claimfreeze"})

	// The claims bucket's leader leads nothing else: freezing it stalls the
	// claims alone. The workers and the test talk to the other two nodes.
	x := c.leader(admin, "KV_"+broker.BucketClaims)
	var others []string
	for i := range c.nodes {
		if i != x {
			others = append(others, c.url(i))
		}
	}
	b := clusterBroker(t, strings.Join(others, ","))
	c.leadElsewhere(b, x, "KV_"+broker.BucketClaims, broker.ConsumerName(res.Job.ID))
	// AckWait 3 s: a claim stands 6 s (2 × AckWait), less than the bucket
	// takes to elect a leader, so the twin's claim may win once it is
	// answered, after the first call's has lapsed and its result is
	// stored; it must look again before it calls.
	env := workerEnv(strings.Join(others, ","), 3*time.Second, "JETPOOL_REPLICAS", "3", "CHAOS_API_KEY", "k",
		"JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
	start(t, env, "worker", "--concurrency", fmt.Sprint(2*n), "--job", res.Job.ID)
	testenv.Eventually(t, 30*time.Second, func() bool { return m.total() == n }, "every record's first call under way (claimed)")

	c.freeze(x)
	t.Cleanup(func() {
		if c.nodes[x].frozen {
			c.thaw(x)
		}
	})
	frozen := time.Now()
	// Every record's work a second time, while its first call runs: the
	// twins' claims go to the frozen leader.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := publishTwins(ctx, t, b, n)
	j, _ := waitFinished(t, b, res.Job.ID, 90*time.Second)
	checkResults(t, b, j, n)
	waitDrained(t, s, 60*time.Second)
	t.Logf("claims leader %s frozen for %s; %d calls", c.nodes[x].name, time.Since(frozen).Round(time.Second), m.total())
	for i := 1; i <= n; i++ {
		require.Len(t, m.callsOf(fmt.Sprintf("answer/r%d", i)), 1, "r%d: its twin was delivered while the claims leader was frozen", i)
	}
}

// leadElsewhere moves the leader of every stream but keep, and of the work
// stream's consumer, off node x (a step-down with another node preferred).
func (c *natsCluster) leadElsewhere(b *broker.Broker, x int, keep, consumer string) {
	c.t.Helper()
	other := c.nodes[(x+1)%len(c.nodes)].name
	req, err := json.Marshal(map[string]any{"placement": map[string]string{"preferred": other}})
	require.NoError(c.t, err)
	leaderOf := func(ctx context.Context, stream, cons string) (string, error) {
		s, err := b.JS.Stream(ctx, stream)
		if err != nil {
			return "", err
		}
		if cons == "" {
			info, err := s.Info(ctx)
			if err != nil || info.Cluster == nil {
				return "", err
			}
			return info.Cluster.Leader, nil
		}
		cs, err := s.Consumer(ctx, cons)
		if err != nil {
			return "", err
		}
		info, err := cs.Info(ctx)
		if err != nil || info.Cluster == nil {
			return "", err
		}
		return info.Cluster.Leader, nil
	}
	type group struct{ stream, consumer, api string }
	var groups []group
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := b.JS.StreamNames(ctx)
	for name := range names.Name() {
		if name != keep {
			groups = append(groups, group{name, "", "$JS.API.STREAM.LEADER.STEPDOWN." + name})
		}
	}
	require.NoError(c.t, names.Err())
	groups = append(groups, group{broker.StreamWork, consumer, "$JS.API.CONSUMER.LEADER.STEPDOWN." + broker.StreamWork + "." + consumer})
	for _, g := range groups {
		testenv.Eventually(c.t, 30*time.Second, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			leader, err := leaderOf(ctx, g.stream, g.consumer)
			if err != nil || leader == "" {
				return false
			}
			if leader != c.nodes[x].name {
				return true
			}
			_, _ = b.NC.RequestWithContext(ctx, g.api, req)
			return false
		}, "%s %s led off %s", g.stream, g.consumer, c.nodes[x].name)
	}
}
