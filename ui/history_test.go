package ui_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/ui"
	"github.com/jetpool/jetpool/worker"
)

type historyView struct {
	Samples int
	Classes []string
	Points  []struct {
		Rate   float64
		Errors map[string]float64
	}
}

// The rate history comes from the page's own polls of the job, sampled
// by the dashboard's process: records done a second, and dead-lettered
// a second by class, between readings at least HistoryGap apart. A
// replay (the counts going down) is no negative rate; the records failing
// again are errors of their class.
func TestHistory(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	class := string(dlq(t, tb.b, deadletter.Filter{Job: "keyed"})[0].Class)
	var h historyView
	// poll reads the job's page, as the page does, until the history has
	// n samples; it returns that history.
	poll := func(n int) historyView {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, func() bool {
			require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed", nil))
			require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/history", &h))
			return h.Samples >= n
		}, "the history has %d samples", n)
		require.Equal(t, n, h.Samples, "one sample per HistoryGap at most")
		return h
	}
	h = poll(1)
	require.Empty(t, h.Points, "one reading is no rate yet")

	var rep struct{ Replayed int }
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/replay", tb.c.csrf(), map[string]any{"job": "keyed"}, &rep))
	require.Equal(t, records, rep.Replayed)
	h = poll(2)
	require.Len(t, h.Points, 1)
	require.Zero(t, h.Points[0].Rate, "replayed records are not done: no negative rate")
	require.Empty(t, h.Points[0].Errors, "dead letters replayed are no errors")

	testenv.Pool(t, tb.b, worker.Config{Concurrency: 4, Jobs: []string{"keyed"}, Trust: tb.trust}) // the key is still wrong
	testenv.WaitFinished(t, tb.b, "keyed", 30*time.Second)
	h = poll(3)
	require.Len(t, h.Points, 2)
	last := h.Points[1]
	require.Positive(t, last.Rate, "four records done again")
	require.Positive(t, last.Errors[class], "four dead-lettered again")
	require.Equal(t, []string{class}, h.Classes)

	// The window is asked in minutes, at most HistoryWindow.
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/history?minutes=1", &h))
	require.Equal(t, 3, h.Samples)
	var e apiError
	require.Equal(t, http.StatusBadRequest, tb.c.get("/api/jobs/keyed/history?minutes=99", &e))
	require.Contains(t, e.Error, "minutes")
	require.Equal(t, http.StatusNotFound, tb.c.get("/api/jobs/nope/history", &e))
}
