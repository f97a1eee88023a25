package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/ui"
	"github.com/jetpool/jetpool/worker"
)

// One dead letter replayed and another purged by their sequences: the
// replayed record is worked and its result replaces the failure; the
// purged one is gone from the DLQ and stays counted failed, and status
// says how many failed are no longer in the DLQ. Asked again, both are
// gone (404), and the other dead letters are untouched.
func TestReplayAndPurgeOne(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	token := tb.c.csrf()
	ctx := context.Background()
	keyed := dlq(t, tb.b, deadletter.Filter{Job: "keyed"})
	require.Len(t, keyed, records)
	replayed, purged := keyed[0], keyed[1]

	var rep struct {
		Matched, Replayed int
		Jobs              []string
		Note              string
	}
	require.Equal(t, http.StatusOK, tb.c.post(fmt.Sprintf("/api/dlq/%d/replay", replayed.Seq), token, map[string]any{}, &rep))
	require.Equal(t, 1, rep.Matched)
	require.Equal(t, 1, rep.Replayed)
	require.Equal(t, []string{"keyed"}, rep.Jobs)
	require.Equal(t, "noted", rep.Note)
	n, err := tb.b.Count(ctx, broker.StreamWork, broker.WorkFilter("keyed"))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "that one record is back in the work stream")

	var p struct{ Purged int }
	require.Equal(t, http.StatusOK, tb.c.post(fmt.Sprintf("/api/dlq/%d/purge", purged.Seq), token, nil, &p))
	require.Equal(t, 1, p.Purged)

	var e apiError
	for _, path := range []string{fmt.Sprintf("/api/dlq/%d/replay", replayed.Seq), fmt.Sprintf("/api/dlq/%d/purge", purged.Seq),
		fmt.Sprintf("/api/dlq/%d/purge", replayed.Seq)} {
		require.Equal(t, http.StatusNotFound, tb.c.post(path, token, map[string]any{}, &e), path)
		require.Contains(t, e.Error, "replayed or purged?")
	}
	require.Equal(t, http.StatusBadRequest, tb.c.post("/api/dlq/x/purge", token, nil, &e))
	require.Equal(t, http.StatusBadRequest, tb.c.post(fmt.Sprintf("/api/dlq/%d/replay", keyed[2].Seq), token, map[string]any{"mode": "batch"}, &e))
	require.Contains(t, e.Error, `mode "batch"`)

	left := dlq(t, tb.b, deadletter.Filter{})
	require.Len(t, left, records-1, "the other dead letters stay")
	for _, en := range left {
		require.NotContains(t, []uint64{replayed.Seq, purged.Seq}, en.Seq)
	}

	// The replayed record, worked with the key fixed, succeeds; its
	// failure is gone. The purged one stays failed, not in the DLQ.
	require.NoError(t, os.WriteFile(tb.keyFile, []byte("sk-fixed"), 0o600))
	testenv.Pool(t, tb.b, worker.Config{Concurrency: 2, Jobs: []string{"keyed"}, Trust: tb.trust})
	_, prog := testenv.WaitFinished(t, tb.b, "keyed", 30*time.Second)
	require.EqualValues(t, 1, prog.OK)
	require.EqualValues(t, records-1, prog.Failed)
	var story struct {
		Results []struct {
			Data struct{ Status string }
		}
		DeadLetters []any `json:"dead_letters"`
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/records/"+replayed.Record, &story))
	require.Len(t, story.Results, 1, "one result: the failure was replaced")
	require.Equal(t, "ok", story.Results[0].Data.Status)
	require.Empty(t, story.DeadLetters)

	st, err := jetpool.NewClient(tb.b, nil).Status(ctx, "keyed")
	require.NoError(t, err)
	require.EqualValues(t, records-1, st.Failed, "the purged record stays failed")
	require.NotNil(t, st.DeadLetters)
	require.EqualValues(t, records-2, *st.DeadLetters, "and is no longer in the DLQ")
}

// Filters by record and by sequence select as `--record` and `--seq` do,
// on the listing and on the bulk replay and purge.
func TestDeadLetterBySeqAndRecord(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	keyed := dlq(t, tb.b, deadletter.Filter{Job: "keyed"})
	var l listing
	require.Equal(t, http.StatusOK, tb.c.get("/api/dlq?record="+keyed[2].Record, &l))
	require.Equal(t, 1, l.Matched)
	require.Equal(t, keyed[2].Record, l.Entries[0].Record)
	require.Equal(t, http.StatusOK, tb.c.get(fmt.Sprintf("/api/dlq?seq=%d", keyed[1].Seq), &l))
	require.Equal(t, 1, l.Matched)
	require.Equal(t, keyed[1].Record, l.Entries[0].Record)
	require.Equal(t, http.StatusOK, tb.c.get(fmt.Sprintf("/api/dlq?seq=%d&job=other", keyed[1].Seq), &l))
	require.Zero(t, l.Matched, "a sequence of another job's dead letter matches nothing")

	var p struct{ Purged int }
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/purge", tb.c.csrf(), map[string]any{"seq": keyed[3].Seq}, &p))
	require.Equal(t, 1, p.Purged)
	require.Len(t, dlq(t, tb.b, deadletter.Filter{}), records)
}

// Without the Replayed hook (`jetpool server --ui`, a store another
// process hosts), a replay's note names the jobs no live worker serves;
// a worker limited to another job does not serve it, one that serves
// every job does.
func TestReplayNoteNamesUnservedJobs(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	h, err := ui.New(ui.Config{B: tb.b, Log: testenv.Logger(t)})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL)
	token := c.csrf()
	keyed := dlq(t, tb.b, deadletter.Filter{Job: "keyed"})
	var rep struct{ Note string }

	testenv.Pool(t, tb.b, worker.Config{Concurrency: 1, Jobs: []string{"another"}})
	workers := func(n int) {
		testenv.Eventually(t, 10*time.Second, func() bool {
			stats, err := jetpool.NewClient(tb.b, nil).Workers(context.Background())
			return err == nil && len(stats) == n
		}, "%d workers answer", n)
	}
	workers(1)
	require.Equal(t, http.StatusOK, c.post(fmt.Sprintf("/api/dlq/%d/replay", keyed[0].Seq), token, nil, &rep))
	require.Contains(t, rep.Note, "no live worker serves keyed: nothing runs them until you start `jetpool worker`")

	testenv.Pool(t, tb.b, worker.Config{Concurrency: 1, Trust: tb.trust})
	workers(2)
	require.Equal(t, http.StatusOK, c.post(fmt.Sprintf("/api/dlq/%d/replay", keyed[1].Seq), token, nil, &rep))
	require.Equal(t, "live workers serve them and will work them", rep.Note)
}
