package jobstatus

import (
	"context"
	"github.com/rs/zerolog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// Wait returns once every record has its final result, with the job marked
// completed; the progress callback saw the job on its way there. A context
// that ends first ends the wait with its error.
func TestWait(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 5), dispatcher.Options{})

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := Wait(short, b, res.Job.ID, 10*time.Millisecond, nil, zerolog.Nop())
	require.ErrorIs(t, err, context.DeadlineExceeded, "no worker: the job does not finish")

	testenv.Pool(t, b, worker.Config{Concurrency: 4})
	polls := 0
	job, err := Wait(t.Context(), b, res.Job.ID, 10*time.Millisecond, func(j *broker.Job, st broker.Progress) {
		polls++
		require.Equal(t, res.Job.ID, j.ID)
	}, zerolog.Nop())
	require.NoError(t, err)
	require.Positive(t, polls)
	require.Equal(t, broker.JobCompleted, job.Status)
	counts, err := b.JobCounts(t.Context(), job, false)
	require.NoError(t, err)
	require.EqualValues(t, 5, counts.OK)
}
