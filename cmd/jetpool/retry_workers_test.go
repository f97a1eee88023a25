package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
)

// hostedStore runs a job whose two records fail (auth) on the embedded
// store, then serves that store from a server of the test's, where no
// worker runs, and names it in the data dir's server file: a store
// another process hosts (as `jetpool ui` does).
func hostedStore(t *testing.T) *broker.Broker {
	srv := storeOfFailures(t)
	require.NoError(t, srv.WriteServerFile(srv.Server().ClientURL()))
	return srv
}

// storeOfFailures is hostedStore's store, served by the test, named in
// no server file.
func storeOfFailures(t *testing.T) *broker.Broker {
	dir := setEnv(t)
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte("providers:\n  sim: {kind: sim, sim: {fail_first: 100, fail_class: auth}}\n"+
		"defaults: {provider: sim}\nactions:\n  - name: a\n    prompt: \"{{ .text }}\"\n"), 0o600))
	code, _, stderr := jetpool(t, "run", wf, "--input", testenv.Records(t, 2), "--no-progress", "--no-preflight")
	require.Equal(t, exitFailedRecords, code, stderr)
	cfg := testenv.Config(t, testenv.Options{DataDir: filepath.Join(dir, "data")})
	srv, err := broker.StartEmbedded(context.Background(), cfg, testenv.Logger(t), broker.ServerOptions{Port: -1})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv
}

// `retry` on a store no live worker serves works the replayed records
// itself, as a worker would, instead of leaving them for nobody (here
// they fail again: the sim's key is still wrong, exit 4).
func TestRetryWithoutWorkersWorksHere(t *testing.T) {
	hostedStore(t)
	code, stdout, stderr := jetpool(t, "retry", "--no-progress")
	require.Equal(t, exitFailedRecords, code, stderr)
	require.Contains(t, stderr, "2 dead letters replayed")
	require.Regexp(t, `no live worker serves job \S+: working its replayed records here`, stderr)
	require.NotContains(t, stderr, "will run them")
	require.Contains(t, stdout, "2 records, 0 succeeded, 2 failed")
}

// On an external server (JETPOOL_NATS_URL) no live worker serving the job
// leaves the replayed records queued for one, and `retry` says so: the
// operator's own keys do not stand in for the fleet's workers.
func TestRetryWithoutWorkersOnExternalServer(t *testing.T) {
	srv := storeOfFailures(t)
	t.Setenv("JETPOOL_NATS_URL", srv.Server().ClientURL())
	code, _, stderr := jetpool(t, "retry", "--no-progress")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "2 dead letters replayed")
	require.Regexp(t, `no live worker serves job \S+: its replayed records wait in the queue until one does`, stderr)
	require.NotContains(t, stderr, "will run them")
	jobs, err := srv.ListJobs(context.Background())
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	bl, err := srv.Backlog(context.Background(), jobs[0].ID)
	require.NoError(t, err)
	require.EqualValues(t, 2, bl.Queued, "queued for a worker")
}

// hanging is a provider whose calls last until released: a live worker
// that serves the job and finishes nothing while the test looks.
type hanging struct{ release chan struct{} }

func (h hanging) New(provider.Config) (provider.Provider, error) { return h, nil }
func (hanging) Name() string                                     { return "sim" }
func (hanging) Kind() string                                     { return provider.KindSim }
func (hanging) Preflight(context.Context, string) error          { return nil }
func (h hanging) Call(ctx context.Context, _ provider.Request) (provider.Response, error) {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	return provider.Response{}, context.Canceled
}

// With a live worker serving the job, `retry` leaves the records to it;
// --wait follows them and --timeout ends the wait.
func TestRetryWaitFollowsLiveWorkers(t *testing.T) {
	srv := hostedStore(t)
	h := hanging{release: make(chan struct{})}
	testenv.Pool(t, srv, worker.Config{Concurrency: 2, NewProvider: h.New})
	t.Cleanup(func() { close(h.release) }) // before the pool's stop (cleanups run last first)
	testenv.Eventually(t, 10*time.Second, func() bool {
		stats, err := worker.Gather(srv)
		return err == nil && len(stats) == 1
	}, "the worker answers")

	begin := time.Now()
	code, _, stderr := jetpool(t, "retry", "--wait", "--timeout", "1s", "--no-progress")
	require.Equal(t, 1, code, stderr)
	require.GreaterOrEqual(t, time.Since(begin), time.Second)
	require.Contains(t, stderr, "2 dead letters replayed")
	require.NotContains(t, stderr, "working its replayed records here")
	require.Contains(t, stderr, "--timeout 1s passed before job")
}
