package jobstatus

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
)

// A pipeline's progress moves as records pass each action, before any
// finishes its last one; one action counts records as before.
func TestSteps(t *testing.T) {
	acts := []string{"extract", "classify", "summarize"}
	// 100 records: 60 queued at extract, 30 at classify, 10 at summarize,
	// none finished: 30 + 20 steps of 300.
	steps, all := Steps(100, 0, acts, map[string]uint64{"extract": 60, "classify": 30, "summarize": 10})
	require.EqualValues(t, 50, steps)
	require.EqualValues(t, 300, all)
	// 40 finished (ok or failed at any action) count every step.
	steps, _ = Steps(100, 40, acts, map[string]uint64{"extract": 20, "classify": 30, "summarize": 10})
	require.EqualValues(t, 120+30+20, steps)
	// Counts read at two moments never pass the whole.
	steps, all = Steps(10, 10, acts, map[string]uint64{"summarize": 5})
	require.Equal(t, all, steps)
	steps, all = Steps(10, 4, []string{"one"}, map[string]uint64{"one": 6})
	require.EqualValues(t, 4, steps)
	require.EqualValues(t, 10, all)
}

// A pipeline whose records have all done their first action and wait at
// the second: no record is finished, and half the work is done.
func TestReadCountsPipelineSteps(t *testing.T) {
	const n = 6
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, "providers:\n  sim: {kind: sim}\ndefaults:\n  provider: sim\nactions:\n  - name: first\n    prompt: \"{{ .text }}\"\n  - name: second\n    prompt: \"then {{ .first }}\"\n")
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	hold := make(chan struct{})
	defer close(hold)
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		if strings.HasPrefix(req.Messages[0].Content, "then ") {
			<-hold
		}
		return next()
	}
	testenv.Pool(t, b, worker.Config{Concurrency: 2, NewProvider: counter.New})
	var s Job
	testenv.Eventually(t, 20*time.Second, func() bool {
		j, _, err := b.GetJob(ctx, res.Job.ID)
		require.NoError(t, err)
		out, _, err := Read(ctx, b, []*broker.Job{j}, false)
		require.NoError(t, err)
		s = out[0]
		return s.Steps == n
	}, "every record at its second action: %+v", &s)
	require.EqualValues(t, 2*n, s.StepsTotal)
	require.Zero(t, s.Succeeded+s.Failed, "no record has finished")
}
