package e2e

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/internal/testenv"
)

// `jetpool status` with one node of three cut off (SIGSTOP): first the
// node leading the jobs bucket, whose reads wait for an election, then the
// one leading the work stream. Each status answers within its bound —
// read from a replica where the leader is silent — and a part that did
// not answer is named and exits 3, never shown as a zero; the first one
// after the freeze may instead say that the jobs did not answer in time
// (exit 3), never later ones; once the node is back, status is whole
// again. How long each took: docs/durability.md.
func TestChaosStatusNodeCutOff(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const n = 200
	c := startNATSCluster(t, natsOpts{})
	admin := readyURLs(t, c.urls(), broker.AckWaitDefault)
	testenv.Dispatch(t, admin, simWorkflow(t, 0, ""), testenv.Records(t, n), dispatcher.Options{JobID: "cutoff"})
	env := map[string]string{"JETPOOL_NATS_URL": c.urls()}
	whole := func() bool {
		r := jetpool(t, env, "status", "--json")
		return r.code == 0
	}
	require.True(t, whole(), "status answers whole before the fault")

	for _, stream := range []string{"KV_" + broker.BucketJobs, broker.StreamWork} {
		victim := c.leader(admin, stream)
		c.freeze(victim)
		for i := range 3 {
			r := jetpool(t, env, "status", "--json")
			require.Contains(t, []int{0, 3}, r.code, "whole, or partial and saying so: %s", r.stderr)
			if i == 0 && r.stdout == "" {
				// On a loaded host the election after the freeze can
				// outlast the job list's bound: then the first status
				// says so (exit 3, "try again") instead of answering.
				require.Contains(t, r.stderr, "did not answer within")
				t.Logf("%s's leader %s frozen, status 1: %.1fs, no answer: %s", stream, c.nodes[victim].name, r.took.Seconds(), r.stderr)
				continue
			}
			var out []jobstatus.Job
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), "an answer, not a failure: %s %s", r.stdout, r.stderr)
			require.Len(t, out, 1)
			s := out[0]
			require.EqualValues(t, n, s.Total)
			if s.Answered(jobstatus.PartBacklog) {
				require.EqualValues(t, n, s.Queued, "no worker runs: every record is queued")
			}
			if s.Answered(jobstatus.PartResults) {
				require.Zero(t, s.Succeeded+s.Failed)
			}
			if r.code == 3 {
				require.NotEmpty(t, s.Unanswered, "exit 3 names what did not answer")
				require.Contains(t, r.stderr, "partial status")
			} else {
				require.Empty(t, s.Unanswered)
			}
			t.Logf("%s's leader %s frozen, status %d: %.1fs, exit %d, jobs from a replica %v, unanswered %v",
				stream, c.nodes[victim].name, i+1, r.took.Seconds(), r.code, s.FromReplica, slices.Sorted(maps.Keys(s.Unanswered)))
			require.Less(t, r.took, 2*time.Minute)
		}
		c.thaw(victim)
		testenv.Eventually(t, 90*time.Second, whole, "status whole again once %s is back", c.nodes[victim].name)
		c.healthy(victim)
	}
}
