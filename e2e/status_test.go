package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// How long `jetpool status JOB` takes on a job with many results. The results
// are published straight to JETPOOL_RESULTS (as workers write them), so the
// test measures the status query, not the workers. Gated: JETPOOL_BIG=1
// (JETPOOL_BIG=N for N results; default 200000).
func TestStatusBigJob(t *testing.T) {
	big := os.Getenv("JETPOOL_BIG")
	if big == "" {
		t.Skip("set JETPOOL_BIG=1 (or a number of results) to measure status on a big job")
	}
	n := 200_000
	if v, err := strconv.Atoi(big); err == nil && v > 1 {
		n = v
	}
	b, url := embeddedServer(t, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	const job = "big"
	wf, err := simWorkflow(t, 0, "").Encode()
	require.NoError(t, err)
	require.NoError(t, b.PutJob(ctx, &broker.Job{ID: job, Workflow: wf, Actions: []string{"answer"}, Total: int64(n),
		Dispatched: true, Status: broker.JobRunning, MaxDeliver: 4, Created: time.Now().UTC()}))
	_, err = b.EnsureConsumer(ctx, job, 4)
	require.NoError(t, err)
	j, _, err := b.GetJob(ctx, job)
	require.NoError(t, err)
	require.NoError(t, b.EnsureCounters(ctx, j)) // as the dispatcher does

	// 1 in 50 failed: permanent, and 1 in 500 exhausted.
	outcome := func(i int) string {
		switch {
		case i%500 == 0:
			return "exhausted"
		case i%50 == 0:
			return "permanent"
		}
		return broker.OutcomeOK
	}
	begin := time.Now()
	body := []byte(`{"id":"x","status":"ok","action":"answer","job":"big"}`)
	var futures []jetstream.PubAckFuture
	for i := 1; i <= n; i++ {
		m := nats.NewMsg(broker.ResultSubject(job, "answer", outcome(i), fmt.Sprintf("r%d", i)))
		m.Data = body
		f, err := b.JS.PublishMsgAsync(m)
		require.NoError(t, err)
		futures = append(futures, f)
		if len(futures) == 4000 || i == n {
			for _, f := range futures {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					t.Fatal(err)
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
			futures = futures[:0]
		}
	}
	published := time.Since(begin)
	wantFailed, wantReasons := int64(0), map[string]int64{}
	for i := 1; i <= n; i++ {
		if o := outcome(i); o != broker.OutcomeOK {
			wantFailed++
			wantReasons[o]++
		}
	}

	// In process: the counts alone, as `status` computes them.
	begin = time.Now()
	c, err := b.JobCounts(ctx, j, true)
	require.NoError(t, err)
	counts := time.Since(begin)
	require.EqualValues(t, int64(n)-wantFailed, c.OK)
	require.Equal(t, wantFailed, c.Failed)
	require.Equal(t, wantReasons, c.ByReason)

	// The command, end to end (process start, connect, counts, the
	// scatter-gather that asks workers for their in-flight records: here
	// none answer, and the server's no-responders status ends it at once).
	env := map[string]string{"JETPOOL_NATS_URL": url}
	r := jetpool(t, env, "status", job, "--json")
	require.Zero(t, r.code, r.stderr)
	var s status
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	require.EqualValues(t, int64(n)-wantFailed, s.Succeeded)
	require.Equal(t, wantFailed, s.Failed)
	require.Equal(t, wantReasons, s.DeadLetter)
	table := jetpool(t, env, "status", job)
	require.Zero(t, table.code, table.stderr)
	t.Logf("status on %d results: published in %s; JobCounts (by reason) %s; `jetpool status %s --json` %s; `jetpool status %s` %s",
		n, published.Round(time.Millisecond), counts.Round(time.Microsecond), job, r.took.Round(time.Millisecond), job, table.took.Round(time.Millisecond))
}
