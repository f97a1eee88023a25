package jetpool_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/workflow"
)

// setup opens a Client on an embedded server with its store in a temp dir.
func setup(t *testing.T) (context.Context, *jetpool.Client, *workflow.Workflow) {
	t.Helper()
	ctx := t.Context()
	c, err := jetpool.Open(ctx, t.TempDir(), nil)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	wf, err := workflow.Parse("greet.yaml", []byte(greet))
	require.NoError(t, err)
	return ctx, c, wf
}

func records(n int) []any {
	out := make([]any, n)
	for i := range out {
		out[i] = map[string]any{"id": string(rune('a' + i)), "name": "n"}
	}
	return out
}

func TestDispatchRecordsThenResults(t *testing.T) {
	ctx, c, wf := setup(t)
	d, err := c.Dispatch(ctx, wf, jetpool.DispatchParams{Records: slices.Values(records(5))})
	require.NoError(t, err)
	require.EqualValues(t, 5, d.Published)
	w, err := c.Work(ctx, d.Job.ID, jetpool.WorkParams{Concurrency: 4})
	require.NoError(t, err)
	require.Equal(t, broker.JobCompleted, w.Job.Status)

	var ids []string
	for r, err := range c.Results(ctx, d.Job.ID, jetpool.ResultsParams{Sorted: true}) {
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	require.Equal(t, []string{"a", "b", "c", "d", "e"}, ids)

	// A caller that stops ranging stops the read.
	n := 0
	for _, err := range c.Results(ctx, d.Job.ID, jetpool.ResultsParams{}) {
		require.NoError(t, err)
		n++
		break
	}
	require.Equal(t, 1, n)

	// The same records again resume the job: nothing is published.
	again, err := c.Dispatch(ctx, wf, jetpool.DispatchParams{Records: slices.Values(records(5))})
	require.NoError(t, err)
	require.Equal(t, d.Job.ID, again.Job.ID)
	require.True(t, again.Existing)
}

func TestDispatchRefusals(t *testing.T) {
	ctx, c, wf := setup(t)
	bad := filepath.Join(t.TempDir(), "in.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte("{\"id\":\"1\",\"name\":\"a\"}\n{not json\n"), 0o600))
	for name, p := range map[string]jetpool.DispatchParams{
		"bad line":           {Input: bad, JobID: "bad"},
		"no input":           {},
		"input and records":  {Input: bad, Records: slices.Values(records(1))},
		"job and new job":    {Input: bad, JobID: "x", NewJob: true},
		"unknown duplicates": {Input: bad, JobID: "x", Duplicates: "last"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Dispatch(ctx, wf, p)
			require.ErrorIs(t, err, jetpool.ErrInvalid)
		})
	}
	_, err := c.Dispatch(ctx, wf, jetpool.DispatchParams{Input: bad, JobID: "bad"})
	require.ErrorContains(t, err, "in.jsonl:2")
	_, err = c.Status(ctx, "bad")
	require.True(t, errors.Is(err, broker.ErrJobNotFound), "a refused input leaves no job: %v", err)
}

func TestRetryWithNothingToReplay(t *testing.T) {
	ctx, c, _ := setup(t)
	res, err := c.Retry(ctx, jetpool.RetryParams{Filter: deadletter.Filter{Reason: "permanent"}})
	require.NoError(t, err)
	require.Zero(t, res.Replayed)
	require.Empty(t, res.Jobs)

	for _, err := range c.DeadLetters(ctx, deadletter.Filter{Reason: "nonsense"}) {
		require.ErrorIs(t, err, jetpool.ErrInvalid)
	}

	_, err = c.Retry(ctx, jetpool.RetryParams{Filter: deadletter.Filter{Job: "none"}})
	require.ErrorIs(t, err, broker.ErrJobNotFound)

	_, err = c.Retry(ctx, jetpool.RetryParams{MaxCost: 5})
	require.ErrorIs(t, err, jetpool.ErrInvalid, "a budget names its job")
}
