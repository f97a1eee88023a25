package jetpool_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// keyed fails every call with "invalid api key" until SIM_API_KEY holds
// the sim's valid key (a key the default policy binds to the sim).
const keyed = `
providers:
  sim:
    kind: sim
    api_key_env: SIM_API_KEY
    sim: {valid_key: sk-fixed, faults: {auth: 1}}
defaults: {provider: sim, model: sim-1}
actions:
  - name: answer
    prompt: "hello {{ .name }}"
`

// A retry through a Client of a store that another process hosts (as
// `jetpool ui` hosts the embedded one), with no worker anywhere: Retry
// names the job as unserved (a worker limited to another job does not
// count), this Client could work it (WorkableHere), and Work does: every
// replayed record succeeds. Without the key, WorkableHere says why not.
func TestRetryWithNoWorkerOnAHostedStore(t *testing.T) {
	t.Setenv("SIM_API_KEY", "sk-wrong")
	ctx := t.Context()
	dir := t.TempDir()
	host, err := jetpool.Open(ctx, dir, &jetpool.Config{Logger: ptr(testenv.Logger(t))})
	require.NoError(t, err)
	t.Cleanup(host.Close)
	require.NoError(t, host.Broker().WriteServerFile(host.Broker().Server().ClientURL()))
	wf, err := workflow.Parse("keyed.yaml", []byte(keyed))
	require.NoError(t, err)
	d, err := host.Dispatch(ctx, wf, jetpool.DispatchParams{Records: slices.Values(records(4))})
	require.NoError(t, err)
	w, err := host.Work(ctx, d.Job.ID, jetpool.WorkParams{Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, broker.JobCompleted, w.Job.Status)

	c, err := jetpool.Open(ctx, dir, nil) // the data dir is taken: the host's server, through its file
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.False(t, c.Embedded())
	busy := worker.New(host.Broker(), worker.Config{Concurrency: 1, Jobs: []string{"another-job"}})
	require.NoError(t, busy.Start(ctx))
	defer func() { require.NoError(t, busy.Stop(context.Background())) }()
	testenv.Eventually(t, 10*time.Second, func() bool {
		stats, err := c.Workers(ctx)
		return err == nil && len(stats) == 1
	}, "a worker answers")
	serving, err := c.Serving(ctx, d.Job.ID)
	require.NoError(t, err)
	require.Empty(t, serving, "but it works another job only")

	// A job whose key this process may not send where its workflow does
	// (the operator's policy: a `jetpool worker`'s) it could not work.
	far, err := workflow.Parse("far.yaml", []byte("providers:\n  far: {kind: openai, base_url: 'http://127.0.0.1:9/v1', api_key_env: FAR_KEY}\n"+
		"defaults: {provider: far, model: m}\nactions:\n  - name: a\n    prompt: \"{{ .name }}\"\n"))
	require.NoError(t, err)
	enc, err := far.Encode()
	require.NoError(t, err)
	t.Setenv("FAR_KEY", "k")
	err = c.WorkableHere(&broker.Job{ID: "far", Workflow: enc, Actions: []string{"a"}})
	require.ErrorIs(t, err, jetpool.ErrInvalid)
	require.Contains(t, err.Error(), "job far: no live worker serves it, and this process could not work it either")
	require.Contains(t, err.Error(), "FAR_KEY")

	t.Setenv("SIM_API_KEY", "sk-fixed")
	j, err := c.Job(ctx, d.Job.ID)
	require.NoError(t, err)
	require.NoError(t, c.WorkableHere(j))
	res, err := c.Retry(ctx, jetpool.RetryParams{Filter: deadletter.Filter{Job: d.Job.ID}})
	require.NoError(t, err)
	require.Equal(t, 4, res.Replayed)
	require.Equal(t, []string{d.Job.ID}, res.Unserved)

	w, err = c.Work(ctx, d.Job.ID, jetpool.WorkParams{Concurrency: 2})
	require.NoError(t, err)
	require.Equal(t, broker.JobCompleted, w.Job.Status)
	st, err := c.Status(ctx, d.Job.ID)
	require.NoError(t, err)
	require.EqualValues(t, 4, st.Succeeded)
	require.Zero(t, st.Failed)
	require.NotNil(t, st.DeadLetters)
	require.Zero(t, *st.DeadLetters)
	for en, err := range c.DeadLetters(ctx, deadletter.Filter{}) {
		t.Fatalf("a dead letter is left: %+v %v", en, err)
	}
}

func ptr[T any](v T) *T { return &v }
