package worker_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// A record runs under the revision its work message names, from action to
// action: records published under revision 1 are not switched when a
// revision 2 is added, and one published under revision 2 runs its
// definitions at every action. Each result and account names its revision.
func TestRecordsRunUnderTheirRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, pipelineWorkflow)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	rev2 := testenv.Workflow(t, strings.NewReplacer("A(", "C(", "B(", "D(").Replace(pipelineWorkflow))
	enc, err := rev2.Encode()
	require.NoError(t, err)
	j, err := b.AddRevision(ctx, res.Job.ID, enc, "rev2.yaml")
	require.NoError(t, err)
	require.Equal(t, 2, j.Revision())

	env := &broker.Envelope{ID: "new", RawRecord: []byte(`{"id":"new","text":"fresh"}`)}
	m, err := broker.NewWorkMsg(res.Job.ID, "upper", env, 0)
	require.NoError(t, err)
	m.Header.Set(broker.HeaderRevision, "2")
	_, err = b.JS.PublishMsg(ctx, m)
	require.NoError(t, err)
	_, err = b.UpdateJob(ctx, res.Job.ID, func(j *broker.Job) bool { j.Total++; return true })
	require.NoError(t, err)

	testenv.Pool(t, b, worker.Config{Concurrency: 4})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 4, p.OK)
	results := testenv.Results(t, b, job)
	require.Equal(t, "B(A(record 1)!)!", results["r1"].Output, "published under revision 1: run under it")
	require.Equal(t, 1, results["r1"].Revision)
	r := results["new"]
	require.Equal(t, "D(C(fresh)!)!", r.Output, "revision 2 at both actions")
	require.Equal(t, 2, r.Revision)
	require.Len(t, r.Actions, 2)
	for _, a := range r.Actions {
		require.Equal(t, 2, a.Revision, a.Action)
		require.Equal(t, 1, a.Calls)
	}
	require.Equal(t, 2, r.Totals.Calls)
}
