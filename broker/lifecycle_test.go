package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// faultyWorkflow is one action on the sim with a share of records that fail
// with "invalid api key" (dead-lettered at once).
const faultyWorkflow = `providers:
  sim: {kind: sim, sim: {seed: 3, faults: {auth: 0.3}}}
defaults: {provider: sim}
actions:
  - name: a
    prompt: "{{ .text }}"
`

// workedJob dispatches n records as job id and works them to the end.
func workedJob(t *testing.T, b *broker.Broker, id string, n int) *broker.Job {
	t.Helper()
	wf := testenv.Workflow(t, faultyWorkflow)
	testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{JobID: id})
	pool := testenv.Pool(t, b, worker.Config{Jobs: []string{id}})
	j, p := testenv.WaitFinished(t, b, id, 20*time.Second)
	require.Positive(t, p.Failed, "the sim's auth fault dead-letters some records")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, pool.Stop(ctx))
	return j
}

// queuedJob dispatches n records as job id, with no worker to serve it.
func queuedJob(t *testing.T, b *broker.Broker, id string, n int) {
	t.Helper()
	testenv.Dispatch(t, b, testenv.Workflow(t, faultyWorkflow), testenv.Records(t, n), dispatcher.Options{JobID: id})
}

// setJob rewrites a job's entry as if its status had been set ago ago
// (PutJob would stamp it now).
func setJob(t *testing.T, b *broker.Broker, id, status string, ago time.Duration) {
	t.Helper()
	ctx := context.Background()
	j, _, err := b.GetJob(ctx, id)
	require.NoError(t, err)
	j.Status, j.Updated = status, time.Now().Add(-ago).UTC()
	data, err := json.Marshal(j)
	require.NoError(t, err)
	kv, err := b.KV(ctx, broker.BucketJobs)
	require.NoError(t, err)
	_, err = kv.Put(ctx, id, data)
	require.NoError(t, err)
	// The status lives in the job's state entry.
	data, err = json.Marshal(map[string]any{"status": status, "updated": j.Updated})
	require.NoError(t, err)
	states, err := b.KV(ctx, broker.BucketJobState)
	require.NoError(t, err)
	_, err = states.Put(ctx, id, data)
	require.NoError(t, err)
}

func count(t *testing.T, b *broker.Broker, stream, filter string) uint64 {
	t.Helper()
	n, err := b.Count(context.Background(), stream, filter)
	require.NoError(t, err)
	return n
}

func hasConsumer(t *testing.T, b *broker.Broker, stream, name string) bool {
	t.Helper()
	_, err := b.JS.Consumer(context.Background(), stream, name)
	if err != nil {
		require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
	}
	return err == nil
}

// job delete removes every trace of one job and nothing of another; a
// second delete finds nothing.
func TestDeleteJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	gone := workedJob(t, b, "gone", 40)
	workedJob(t, b, "kept", 40)
	keptResults := count(t, b, broker.StreamResults, "jetpool.results.kept.>")
	keptDead := count(t, b, broker.StreamDLQ, broker.DLQFilter("kept", ""))
	// What a record waiting for redelivery and a batch leave behind.
	for bucket, key := range map[string]string{broker.BucketAttempts: "gone.a.r1", broker.BucketBatches: "rec.gone.a.r1"} {
		kv, err := b.KV(ctx, bucket)
		require.NoError(t, err)
		_, err = kv.Put(ctx, key, []byte(`{}`))
		require.NoError(t, err)
	}
	// A record queued again (a replay) that nobody worked yet.
	_, err := b.JS.Publish(ctx, broker.WorkSubject("gone", "a"), []byte(`{"id":"late","record":{}}`))
	require.NoError(t, err)

	rep, err := b.DeleteJob(ctx, "gone")
	require.NoError(t, err)
	assert.Equal(t, &broker.DeleteReport{Job: "gone", Work: 1, Results: uint64(gone.Total), DeadLetter: rep.DeadLetter,
		Attempts: 1, Batches: 1, Consumers: 4, Entry: true}, rep)
	assert.Positive(t, rep.DeadLetter)

	_, _, err = b.GetJob(ctx, "gone")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
	assert.Zero(t, count(t, b, broker.StreamResults, "jetpool.results.gone.>"))
	assert.Zero(t, count(t, b, broker.StreamDLQ, broker.DLQFilter("gone", "")))
	assert.Zero(t, count(t, b, broker.StreamWork, broker.WorkFilter("gone")))
	for _, c := range []struct{ stream, name string }{{broker.StreamWork, broker.ConsumerName("gone")},
		{broker.StreamResults, broker.CounterName("gone", "ok")}, {broker.StreamResults, broker.CounterName("gone", "failed")},
		{broker.StreamResults, broker.CounterName("gone", "cancelled")}} {
		assert.False(t, hasConsumer(t, b, c.stream, c.name), c.name)
	}
	for bucket, key := range map[string]string{broker.BucketAttempts: "gone.a.r1", broker.BucketBatches: "rec.gone.a.r1"} {
		kv, err := b.KV(ctx, bucket)
		require.NoError(t, err)
		_, err = kv.Get(ctx, key)
		require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "%s %s", bucket, key)
	}
	unseen, err := b.JobUnseen(ctx, "gone")
	require.NoError(t, err)
	assert.True(t, unseen, "a dispatch of the same id would start afresh")

	// The other job is whole.
	assert.Equal(t, keptResults, count(t, b, broker.StreamResults, "jetpool.results.kept.>"))
	assert.Equal(t, keptDead, count(t, b, broker.StreamDLQ, broker.DLQFilter("kept", "")))
	assert.True(t, hasConsumer(t, b, broker.StreamWork, broker.ConsumerName("kept")))

	_, err = b.DeleteJob(ctx, "gone")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
	_, err = b.DeleteJob(ctx, "bad.id")
	require.Error(t, err)
}

// Sweep touches finished jobs only: deletes those finished longer ago than
// the retention, removes the consumer of those finished longer ago than the
// grace, marks completed a job that finished unwatched; a queued job, or a
// failed one with records still queued, keeps everything whatever its age.
func TestSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	const day = 24 * time.Hour
	for _, id := range []string{"old", "recent", "fresh", "unmarked"} {
		workedJob(t, b, id, 20)
	}
	setJob(t, b, "old", broker.JobCompleted, 40*day)
	setJob(t, b, "recent", broker.JobFailed, 2*time.Hour)
	setJob(t, b, "fresh", broker.JobCompleted, time.Minute)
	setJob(t, b, "unmarked", broker.JobRunning, 40*day) // finished, nobody ran status
	queuedJob(t, b, "queued", 5)
	setJob(t, b, "queued", broker.JobRunning, 40*day)
	queuedJob(t, b, "raised", 5)
	setJob(t, b, "raised", broker.JobFailed, 40*day)

	o := broker.SweepOptions{Retention: 30 * day, Grace: time.Hour, DryRun: true}
	byJob := func(swept []broker.Swept) map[string]broker.Swept {
		m := map[string]broker.Swept{}
		for _, s := range swept {
			m[s.Job] = s
		}
		return m
	}
	check := func(swept []broker.Swept) {
		t.Helper()
		m := byJob(swept)
		require.Len(t, m, 3, "%+v", swept)
		assert.NotNil(t, m["old"].Deleted)
		assert.True(t, m["recent"].ConsumerRemoved)
		assert.Nil(t, m["recent"].Deleted)
		assert.True(t, m["unmarked"].Completed)
		assert.False(t, m["unmarked"].ConsumerRemoved, "its grace starts when it is marked")
	}
	plan, err := b.Sweep(ctx, o)
	require.NoError(t, err)
	check(plan)
	j, _, err := b.GetJob(ctx, "old")
	require.NoError(t, err, "a dry run deletes nothing")
	assert.Equal(t, broker.JobCompleted, j.Status)
	assert.True(t, hasConsumer(t, b, broker.StreamWork, broker.ConsumerName("recent")))

	o.DryRun = false
	done, err := b.Sweep(ctx, o)
	require.NoError(t, err)
	check(done)
	assert.Equal(t, uint64(20), byJob(done)["old"].Deleted.Results)
	_, _, err = b.GetJob(ctx, "old")
	require.ErrorIs(t, err, broker.ErrJobNotFound)

	assert.False(t, hasConsumer(t, b, broker.StreamWork, broker.ConsumerName("recent")))
	assert.Equal(t, uint64(20), count(t, b, broker.StreamResults, "jetpool.results.recent.>"), "results stay until the retention")
	p, err := b.Backlog(ctx, "recent")
	require.NoError(t, err, "a job without its consumer reads as drained")
	assert.True(t, p.Drained())

	j, _, err = b.GetJob(ctx, "unmarked")
	require.NoError(t, err)
	assert.Equal(t, broker.JobCompleted, j.Status)
	assert.WithinDuration(t, time.Now(), j.Updated, time.Minute)
	for _, id := range []string{"fresh", "unmarked", "queued", "raised"} {
		assert.True(t, hasConsumer(t, b, broker.StreamWork, broker.ConsumerName(id)), id)
	}
	for _, id := range []string{"queued", "raised"} {
		assert.Equal(t, uint64(5), count(t, b, broker.StreamWork, broker.WorkFilter(id)), id)
	}

	// Nothing is left to do.
	again, err := b.Sweep(ctx, o)
	require.NoError(t, err)
	assert.Empty(t, again)
}

// A replay into a finished job whose consumer was removed makes the
// consumer again, so the replayed records are worked.
func TestReplayRestoresConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	j := workedJob(t, b, "again", 30)
	setJob(t, b, "again", broker.JobCompleted, 2*time.Hour)
	_, err := b.Sweep(ctx, broker.SweepOptions{Grace: time.Hour})
	require.NoError(t, err)
	require.False(t, hasConsumer(t, b, broker.StreamWork, broker.ConsumerName("again")))
	dead := count(t, b, broker.StreamDLQ, broker.DLQFilter("again", ""))

	res, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: "again"}})
	require.NoError(t, err)
	require.EqualValues(t, dead, res.Replayed)
	require.True(t, hasConsumer(t, b, broker.StreamWork, broker.ConsumerName("again")))
	testenv.Pool(t, b, worker.Config{Jobs: []string{"again"}})
	// The sim's key is still wrong: they are worked, and dead-lettered again.
	testenv.Eventually(t, 20*time.Second, func() bool {
		return count(t, b, broker.StreamDLQ, broker.DLQFilter("again", "")) == dead
	}, "replayed records worked")
	_, p := testenv.WaitFinished(t, b, "again", 20*time.Second)
	assert.Equal(t, j.Total, p.Done)
}

// A store made by the version before retention settings keeps working:
// Ensure updates the results and DLQ streams in place (compression,
// discard new), keeps their messages, and leaves an operator's cap alone
// unless JETPOOL_RESULTS_MAX_BYTES says otherwise.
func TestEnsureUpdatesOldStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testenv.Config(t, testenv.Options{})
	b, err := broker.StartEmbedded(ctx, cfg, testenv.Logger(t), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	// The two streams exactly as the previous Ensure made them, with an
	// operator's cap on the results (nats stream edit).
	old := []jetstream.StreamConfig{
		{Name: broker.StreamDLQ, Description: "jetpool dead letters: the record as it was for the action, Jetpool-* headers explain",
			Subjects: []string{"jetpool.dlq.>"}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			Replicas: 1, Duplicates: time.Hour, AllowDirect: true},
		{Name: broker.StreamResults, Description: "jetpool results: one final result per record, action and outcome",
			Subjects: []string{"jetpool.results.>"}, Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage,
			Replicas: 1, MaxMsgsPerSubject: 1, Duplicates: time.Hour, AllowDirect: true, MaxBytes: 1 << 30},
	}
	for _, sc := range old {
		_, err := b.JS.CreateStream(ctx, sc)
		require.NoError(t, err)
	}
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r1", Job: "j", Action: "a", Status: broker.StatusOK}))
	_, err = b.JS.Publish(ctx, broker.DLQSubject("j", "a"), []byte(`{"id":"r2"}`))
	require.NoError(t, err)

	require.NoError(t, b.Ensure(ctx))
	info := func(name string) jetstream.StreamConfig {
		t.Helper()
		s, err := b.JS.Stream(ctx, name)
		require.NoError(t, err)
		return s.CachedInfo().Config
	}
	for _, name := range []string{broker.StreamDLQ, broker.StreamResults} {
		c := info(name)
		assert.Equal(t, jetstream.NoCompression, c.Compression, name) // the default: broker.CompressionDefault
		assert.Equal(t, jetstream.DiscardNew, c.Discard, name)
	}
	assert.EqualValues(t, 1<<30, info(broker.StreamResults).MaxBytes, "the operator's cap stays")
	assert.EqualValues(t, -1, info(broker.StreamDLQ).MaxBytes)
	r, err := b.HasOK(ctx, "j", "a", "r1")
	require.NoError(t, err)
	require.NotNil(t, r, "the old result is still there")
	assert.EqualValues(t, 1, count(t, b, broker.StreamDLQ, broker.DLQFilter("j", "")))
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r3", Job: "j", Action: "a", Status: broker.StatusOK}))

	// Nothing to change the second time: the stream is not updated.
	before := info(broker.StreamResults)
	require.NoError(t, b.Ensure(ctx))
	assert.Equal(t, before, info(broker.StreamResults))

	// Settings given are applied.
	cfg.ResultsMaxBytes, cfg.DLQMaxBytes, cfg.Compression = -1, 64<<20, "s2"
	b2 := reconfigured(t, b, cfg)
	require.NoError(t, b2.Ensure(ctx))
	assert.EqualValues(t, -1, info(broker.StreamResults).MaxBytes)
	assert.EqualValues(t, 64<<20, info(broker.StreamDLQ).MaxBytes)
	assert.Equal(t, jetstream.S2Compression, info(broker.StreamResults).Compression)
	assert.EqualValues(t, 2, count(t, b, broker.StreamResults, broker.ResultFilter("j", "", "")))
}

// reconfigured is a second connection to b's server with another config.
func reconfigured(t *testing.T, b *broker.Broker, cfg broker.Config) *broker.Broker {
	t.Helper()
	cfg.NATSURL = b.Server().ClientURL()
	c, err := broker.Connect(context.Background(), cfg, testenv.Logger(t))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// Results at the cap are refused, not the oldest dropped.
func TestResultsCapRefusesNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testenv.Config(t, testenv.Options{})
	cfg.ResultsMaxBytes = 4 << 10
	b, err := broker.StartEmbedded(ctx, cfg, testenv.Logger(t), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.Ensure(ctx))
	var werr error
	n := 0
	for ; n < 100 && werr == nil; n++ {
		werr = b.WriteResult(ctx, &broker.Result{ID: fmt.Sprintf("r%d", n), Job: "j", Action: "a", Status: broker.StatusOK,
			Output: "an answer of some length, to fill the stream up a little faster than an empty one would"})
	}
	require.Error(t, werr, "the cap is reached")
	assert.Contains(t, werr.Error(), "maximum bytes")
	r, err := b.HasOK(ctx, "j", "a", "r0")
	require.NoError(t, err)
	assert.NotNil(t, r, "the first result is kept")
	assert.EqualValues(t, n-1, count(t, b, broker.StreamResults, broker.ResultFilter("j", "", "")))
}

func TestLifecycleConfig(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]broker.ByteSize{"": 0, "-1": -1, "1000": 1000, "20GB": 20e9, "512MiB": 512 << 20, "1 KiB": 1024} {
		var s broker.ByteSize
		require.NoError(t, s.Decode(in), in)
		assert.Equal(t, want, s, in)
	}
	for _, in := range []string{"lots", "-2", "1.5GB", "10XB"} {
		var s broker.ByteSize
		assert.Error(t, s.Decode(in), in)
	}
	base := testenv.Config(t, testenv.Options{})
	for _, tc := range []struct {
		edit func(*broker.Config)
		want string
	}{
		{func(c *broker.Config) { c.JobRetention = -time.Hour }, "JETPOOL_JOB_RETENTION"},
		{func(c *broker.Config) { c.ConsumerGrace = -time.Hour }, "JETPOOL_CONSUMER_GRACE"},
		{func(c *broker.Config) { c.Compression = "zstd" }, `JETPOOL_COMPRESSION: "zstd" is not s2 or none`},
		{func(c *broker.Config) { c.DLQMaxBytes = -5 }, "JETPOOL_DLQ_MAX_BYTES"},
	} {
		c := base
		tc.edit(&c)
		err := c.Validate()
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	require.NoError(t, base.Validate())
}

// The lifecycle settings are read from their JETPOOL_ names.
func TestLifecycleFromEnvironment(t *testing.T) {
	for k, v := range map[string]string{"JETPOOL_JOB_RETENTION": "48h", "JETPOOL_CONSUMER_GRACE": "10m",
		"JETPOOL_RESULTS_MAX_BYTES": "20GB", "JETPOOL_DLQ_MAX_BYTES": "512MiB", "JETPOOL_COMPRESSION": "s2"} {
		t.Setenv(k, v)
	}
	c, err := broker.LoadConfig()
	require.NoError(t, err)
	assert.Equal(t, 48*time.Hour, c.JobRetention)
	assert.Equal(t, 10*time.Minute, c.ConsumerGrace)
	assert.Equal(t, broker.ByteSize(20e9), c.ResultsMaxBytes)
	assert.Equal(t, broker.ByteSize(512<<20), c.DLQMaxBytes)
	assert.Equal(t, "s2", c.Compression)

	for _, k := range []string{"JETPOOL_JOB_RETENTION", "JETPOOL_CONSUMER_GRACE", "JETPOOL_RESULTS_MAX_BYTES", "JETPOOL_DLQ_MAX_BYTES", "JETPOOL_COMPRESSION"} {
		require.NoError(t, os.Unsetenv(k)) // t.Setenv above restores it
	}
	c, err = broker.LoadConfig()
	require.NoError(t, err)
	assert.Equal(t, broker.JobRetentionDefault, c.JobRetention)
	assert.Equal(t, broker.ConsumerGraceDefault, c.ConsumerGrace)
	assert.Equal(t, broker.CompressionDefault, c.Compression)
	assert.Zero(t, c.ResultsMaxBytes)

	t.Setenv("JETPOOL_RESULTS_MAX_BYTES", "plenty")
	_, err = broker.LoadConfig()
	require.ErrorContains(t, err, "RESULTS_MAX_BYTES")
}
