package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// coolDown sets a shared cooldown of provider name (no key) for d, as a
// 429 seen by another process would have.
func coolDown(t *testing.T, store ratelimit.Store, name string, d time.Duration) {
	t.Helper()
	now := time.Now()
	_, err := store.Update(context.Background(), ratelimit.Key(name, ""), func(s *ratelimit.State) bool {
		s.Provider = name
		s.CooldownUntil, s.CooldownSet, s.CooldownCause = now.Add(d), now, "RateLimitError: 429 daily quota exhausted"
		return true
	})
	require.NoError(t, err)
}

// A shared cooldown that outlasts max_wait is waited up to max_wait, not
// dead-lettered at once: the records are parked, and those still finding
// the provider closed when max_wait is up are dead-lettered saying how long
// they waited and how long the provider would still take; no call is made.
func TestMaxWaitWaitsUpToItThenSaysWhy(t *testing.T) {
	t.Parallel()
	for _, maxWait := range []string{"1500ms", "3s"} {
		t.Run(maxWait, func(t *testing.T) {
			t.Parallel()
			h := &arrivals{next: func(int) providertest.Reply {
				return providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 5, 1)}
			}}
			srv := providertest.NewServer(t, h)
			b := testenv.Broker(t)
			store, err := ratelimit.NewKVStore(context.Background(), b)
			require.NoError(t, err)
			coolDown(t, store, "lim", 9*time.Minute)
			wf := testenv.Workflow(t, limitWorkflow(t, srv.URL+"/v1", "", fmt.Sprintf("{enabled: false, max_wait: %s}", maxWait)))
			res := testenv.Dispatch(t, b, wf, testenv.Records(t, 4), dispatcher.Options{})
			testenv.Pool(t, b, worker.Config{Concurrency: 2})
			job, prog := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
			require.EqualValues(t, 4, prog.Failed)
			require.EqualValues(t, 4, prog.ByReason[string(retry.ReasonMaxWait)])
			at, _ := h.snapshot()
			require.Empty(t, at, "no call was made")
			d, _ := time.ParseDuration(maxWait)
			for id, r := range testenv.Results(t, b, job) {
				require.Equal(t, string(retry.ReasonMaxWait), r.Reason, id)
				require.Contains(t, r.Error.Message, fmt.Sprintf("waited %s in all for provider lim, up to max_wait %s: it was in a shared cooldown, which takes no calls for another 8m", d, d), id)
				require.Contains(t, r.Error.Message, "(RateLimitError: 429 daily quota exhausted); no call was made", id)
				require.Positive(t, r.Recovery.Waits, id)
				require.Zero(t, r.Recovery.Attempts, id)
			}
		})
	}
}

// A cooldown that ends before it said (jetpool limits reset) while its
// records are parked lets them call when they come back at max_wait:
// waiting up to max_wait, rather than dead-lettering at once, is what lets
// them succeed.
func TestMaxWaitCooldownResetEarly(t *testing.T) {
	t.Parallel()
	h := &arrivals{next: func(int) providertest.Reply {
		return providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 5, 1)}
	}}
	srv := providertest.NewServer(t, h)
	b := testenv.Broker(t)
	store, err := ratelimit.NewKVStore(context.Background(), b)
	require.NoError(t, err)
	coolDown(t, store, "lim", 9*time.Minute)
	wf := testenv.Workflow(t, limitWorkflow(t, srv.URL+"/v1", "", "{max_attempts: 2, max_wait: 4s}"))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 2})
	ctx := context.Background()
	testenv.Eventually(t, 20*time.Second, func() bool {
		for i := 1; i <= 3; i++ {
			st, err := b.LoadState(ctx, res.Job.ID, "act", fmt.Sprintf("r%d", i), 0)
			if err != nil || st == nil || st.Waits == 0 {
				return false
			}
		}
		return true
	}, "every record parked for the cooldown")
	cleared, err := ratelimit.Reset(ctx, store, "lim", time.Now())
	require.NoError(t, err)
	require.Len(t, cleared, 1)
	job, prog := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	require.EqualValues(t, 3, prog.OK, "called once the cooldown was reset: %+v", prog)
	at, _ := h.snapshot()
	require.Len(t, at, 3, "one call a record")
	for id, r := range testenv.Results(t, b, job) {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Positive(t, r.Recovery.Waits, id)
		require.Equal(t, 1, r.Recovery.Attempts, id)
	}
}
