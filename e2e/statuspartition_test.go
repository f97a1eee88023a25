//go:build chaos

package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// `jetpool status` while one node of three does not answer (frozen: to its
// peers and clients as a node partitioned off) answers from the two that
// do: it waits for the streams whose leader was there a few seconds at
// most (connectReading), not Ensure's minute. The time is logged, not
// asserted (docs/durability.md has the figures).
func TestChaosStatusNodeCutOff(t *testing.T) {
	c := startNATSCluster(t, natsOpts{})
	admin := readyURLs(t, c.urls(), 10*time.Second)
	m := newModel(t, 10*time.Millisecond)
	wf := modelWorkflow(t, m, "{max_attempts: 3}", "answer")
	testenv.Dispatch(t, admin, wf, testenv.Records(t, 20), dispatcher.Options{JobID: "cutoff"})
	env := map[string]string{"JETPOOL_NATS_URL": c.urls(), "JETPOOL_REPLICAS": "3"}
	for x := range c.nodes {
		c.freeze(x)
		r := jetpool(t, env, "status", "cutoff")
		c.thaw(x)
		t.Logf("node %d frozen: status took %s, exit %d: %s%s", x, r.took.Round(time.Millisecond), r.code, r.stdout, r.stderr)
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "cutoff  running  20")
	}
}
