package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// unanswered is a real bucket whose first fails watch starts get no answer
// in time (as on a cluster electing the bucket stream's leader).
type unanswered struct {
	jetstream.KeyValue
	fails, tries int
	err          error
}

func (u *unanswered) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	u.tries++
	if u.tries <= u.fails {
		return nil, u.err
	}
	return u.KeyValue.WatchAll(ctx, opts...)
}

// A watch start that gets no answer is tried again until one is answered;
// an error that is an answer is returned at once; past the wait, the last
// error is returned, saying so.
func TestWatchAllRetriesUnanswered(t *testing.T) {
	ctx := context.Background()
	b := testenv.Broker(t)
	kv, err := b.KV(ctx, broker.BucketJobs)
	require.NoError(t, err)

	u := &unanswered{KeyValue: kv, fails: 2, err: context.DeadlineExceeded}
	w, err := broker.WatchAll(ctx, u)
	require.NoError(t, err)
	defer w.Stop()
	require.Equal(t, 3, u.tries)
	_, err = kv.Put(ctx, "k", []byte("v"))
	require.NoError(t, err)
	testenv.Eventually(t, 10*time.Second, func() bool {
		for {
			select {
			case e := <-w.Updates():
				if e != nil && e.Key() == "k" {
					return true
				}
			default:
				return false
			}
		}
	}, "the watch that started sees a put")

	refused := errors.New("nats: API error: code=400 err_code=10000 description=refused")
	u = &unanswered{KeyValue: kv, fails: 1, err: refused}
	_, err = broker.WatchAll(ctx, u)
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, u.tries, "an answer is not retried")

	defer broker.SetWatchStartWait(300 * time.Millisecond)()
	u = &unanswered{KeyValue: kv, fails: 100, err: context.DeadlineExceeded}
	_, err = broker.WatchAll(ctx, u)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "no answer to starting a watch of JETPOOL_JOBS for 300ms")
	require.Greater(t, u.tries, 1)
}

// A watch started on a job cancelled since its entry was written passes
// the job cancelled from the first: never running, which a new worker
// would have called for.
func TestWatchJobsPassesStateWithTheFirst(t *testing.T) {
	ctx := context.Background()
	b := testenv.Broker(t)
	for _, id := range []string{"a", "b", "c"} {
		require.NoError(t, b.PutJob(ctx, &broker.Job{ID: id, Status: broker.JobRunning}))
		_, err := b.UpdateJob(ctx, id, func(j *broker.Job) bool { j.Status = broker.JobCancelled; return true })
		require.NoError(t, err)
	}
	for range 20 {
		w, err := b.WatchJobs(ctx)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		seen := map[string]string{}
		w.Each(wctx, func(j *broker.Job) {
			if _, ok := seen[j.ID]; !ok {
				seen[j.ID] = j.Status
			}
			if len(seen) == 3 {
				cancel()
			}
		})
		cancel()
		w.Stop()
		require.Equal(t, map[string]string{"a": "cancelled", "b": "cancelled", "c": "cancelled"}, seen)
	}
}
