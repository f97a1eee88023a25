package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/worker"
)

// deploymentsAt is one action on provider p with the deployments given
// (YAML flow mappings).
func deploymentsAt(deps ...string) string {
	list := ""
	for _, d := range deps {
		list += "      - " + d + "\n"
	}
	return fmt.Sprintf(`
providers:
  p:
    kind: openai
    timeout: 5s
    deployments:
%sactions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: {max_attempts: 2, backoff: 10ms}
`, list)
}

// A revision's deployments are its records' (`retry --workflow` with
// another list): the replayed records call the revision's deployments — one
// kept by name but moved to another URL, one new — and never the first
// revision's endpoint again; each result names the revision's deployment.
func TestRevisionDeploymentsApply(t *testing.T) {
	t.Parallel()
	const n = 6
	ctx := context.Background()
	refuse := providertest.Reply{Status: 400, Body: providertest.OpenAIError("bad request", "invalid_request_error", "")}
	ok := providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 3, 1)}
	old := providertest.NewServer(t, refuse)
	moved, added := providertest.NewServer(t, ok), providertest.NewServer(t, ok)
	b := testenv.Broker(t)
	res := testenv.Dispatch(t, b, testenv.Workflow(t, deploymentsAt("{name: d1, base_url: "+old.URL+"/v1}")),
		testenv.Records(t, n), dispatcher.Options{})
	p1 := testenv.Pool(t, testenv.Connect(t, b), worker.Config{Concurrency: 2})
	_, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, n, p.Failed)
	require.NoError(t, p1.Stop(ctx))
	calls := len(old.Requests())

	enc, err := testenv.Workflow(t, deploymentsAt("{name: d1, base_url: "+moved.URL+"/v1}",
		"{name: d2, base_url: "+added.URL+"/v1}")).Encode()
	require.NoError(t, err)
	_, err = b.AddRevision(ctx, res.Job.ID, enc, "fixed.yaml")
	require.NoError(t, err)
	rr, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: deadletter.Filter{Job: res.Job.ID}})
	require.NoError(t, err)
	require.Equal(t, n, rr.Replayed)
	testenv.Pool(t, b, worker.Config{Concurrency: 2})
	j, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, n, p.OK)
	require.Len(t, old.Requests(), calls, "the first revision's endpoint: no call after the revision")
	require.NotEmpty(t, moved.Requests(), "d1 at its new URL")
	require.NotEmpty(t, added.Requests(), "d2, added by the revision")
	by := map[string]int{}
	for id, r := range testenv.Results(t, b, j) {
		require.Equal(t, 2, r.Revision, id)
		by[r.Deployment]++
	}
	require.Equal(t, map[string]int{"d1": len(moved.Requests()), "d2": len(added.Requests())}, by)
}
