package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// Browse pages through the results matching a filter, oldest first, each
// page from the sequence the last one ended at; a record's filter finds
// its results across actions and outcomes.
func TestBrowsePages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	for i := 1; i <= 7; i++ {
		require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: fmt.Sprintf("r%d", i), Job: "br", Action: "a", Status: broker.StatusOK}))
	}
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r3", Job: "br", Action: "b", Status: broker.StatusFailed, Reason: "permanent"}))
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "x", Job: "other", Action: "a", Status: broker.StatusOK}))

	var ids []string
	after, pages := uint64(0), 0
	for {
		page, next, err := b.Browse(ctx, broker.StreamResults, broker.ResultFilter("br", "", ""), after, 3)
		require.NoError(t, err)
		pages++
		for _, m := range page {
			var r broker.Result
			require.NoError(t, json.Unmarshal(m.Data, &r))
			ids = append(ids, r.ID+"/"+r.Action)
		}
		if next == 0 {
			break
		}
		after = next
	}
	require.Equal(t, []string{"r1/a", "r2/a", "r3/a", "r4/a", "r5/a", "r6/a", "r7/a", "r3/b"}, ids)
	require.Equal(t, 3, pages)

	page, next, err := b.Browse(ctx, broker.StreamResults, broker.RecordFilter("br", "r3"), 0, 50)
	require.NoError(t, err)
	require.Zero(t, next)
	require.Len(t, page, 2, "r3's result of each action")
	page, _, err = b.Browse(ctx, broker.StreamResults, broker.RecordFilter("br", "nobody"), 0, 50)
	require.NoError(t, err)
	require.Empty(t, page)
}

// JobActionCounts splits a job by action: ok and failed results, and what
// the work stream still holds.
func TestJobActionCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	j := &broker.Job{ID: "acts", Actions: []string{"a1", "a2"}, Total: 3}
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r1", Job: j.ID, Action: "a1", Status: broker.StatusOK}))
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r2", Job: j.ID, Action: "a1", Status: broker.StatusOK}))
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r3", Job: j.ID, Action: "a1", Status: broker.StatusFailed, Reason: "permanent"}))
	require.NoError(t, b.WriteResult(ctx, &broker.Result{ID: "r1", Job: j.ID, Action: "a2", Status: broker.StatusOK}))
	_, err := b.JS.Publish(ctx, broker.WorkSubject(j.ID, "a2"), []byte(`{"id":"r2","record":{}}`))
	require.NoError(t, err)

	c, err := b.JobActionCounts(ctx, j)
	require.NoError(t, err)
	require.Equal(t, []broker.ActionCounts{
		{Action: "a1", OK: 2, Failed: 1, Queued: 0},
		{Action: "a2", OK: 1, Failed: 0, Queued: 1},
	}, c)
}
