package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// A busy job's overlapping pulls give back every slot they do not fill: a
// job of many quick records is worked to its end (each record once), and
// the job after it gets every slot of the pool at once.
func TestOverlappingPullsGiveSlotsBack(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	const slots = 8
	quick := testenv.Workflow(t, `
providers:
  sim: {kind: sim}
actions:
  - {name: act, provider: sim, prompt: "do {{ .text }}"}
`)
	slow := testenv.Workflow(t, `
providers:
  sim: {kind: sim, sim: {latency: 3s}}
actions:
  - {name: act, provider: sim, prompt: "do {{ .text }}"}
`)
	first := testenv.Dispatch(t, b, quick, testenv.Records(t, 3000), dispatcher.Options{})
	counter := testenv.NewCounter()
	pool := testenv.Pool(t, b, worker.Config{Concurrency: slots, NewProvider: counter.New})
	job, p := testenv.WaitFinished(t, b, first.Job.ID, 2*time.Minute)
	require.EqualValues(t, 3000, p.OK)
	results := testenv.Results(t, b, job)
	require.Len(t, results, 3000)
	for id, r := range results {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, 1, counter.Calls(id), "record %s called once", id)
	}

	second := testenv.Dispatch(t, b, slow, testenv.Records(t, 2*slots), dispatcher.Options{})
	testenv.Eventually(t, 30*time.Second, func() bool { return pool.Snapshot().InFlight[second.Job.ID] == slots },
		"every slot on the second job: %d of %d", pool.Snapshot().InFlight[second.Job.ID], slots)
}
