// Package testenv starts a real embedded JetStream per test and offers the
// helpers every end-to-end test needs: workflows, inputs, pools, waiting.
// Nothing here mocks the broker.
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// Options of Broker.
type Options struct {
	AckWait time.Duration // default 5s
	DataDir string        // default t.TempDir()
	// SyncInterval is the embedded server's fsync policy (default 1s;
	// "always" turns the dispatcher's atomic batches on).
	SyncInterval string
}

// Broker starts an embedded nats-server (loopback, random port, temp store)
// and returns a broker with every stream and bucket ensured. It is closed
// when the test ends.
func Broker(t testing.TB, opts ...Options) *broker.Broker {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	cfg := Config(t, o)
	b, err := broker.StartEmbedded(context.Background(), cfg, Logger(t), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	require.NoError(t, b.Ensure(context.Background()))
	return b
}

// Config is a broker config for tests.
func Config(t testing.TB, o Options) broker.Config {
	if o.AckWait == 0 {
		o.AckWait = 5 * time.Second
	}
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.SyncInterval == "" {
		o.SyncInterval = "1s"
	}
	return broker.Config{DataDir: o.DataDir, Replicas: 1, LogLevel: "warn", Concurrency: 16,
		SyncInterval: o.SyncInterval, AckWait: o.AckWait, MaxAckPending: 20000, DedupeWindow: time.Hour}
}

// Connect opens a second connection to b's server (as another process would).
func Connect(t testing.TB, b *broker.Broker) *broker.Broker {
	t.Helper()
	cfg := b.Cfg
	cfg.NATSURL = b.Server().ClientURL()
	c, err := broker.Connect(context.Background(), cfg, Logger(t))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	require.NoError(t, c.Ensure(context.Background()))
	return c
}

// Logger writes warnings and errors to the test log.
func Logger(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.ConsoleWriter{Out: testWriter{t}, NoColor: true}).Level(zerolog.WarnLevel)
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// WriteFile writes content to name in a temp dir and returns its path.
func WriteFile(t testing.TB, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

// Workflow parses a workflow from YAML text.
func Workflow(t testing.TB, yaml string) *workflow.Workflow {
	t.Helper()
	wf, err := workflow.Load(WriteFile(t, "workflow.yaml", yaml))
	require.NoError(t, err)
	return wf
}

// Records writes n JSONL records {"id":"r<i>","text":"record <i>"} and returns the path.
func Records(t testing.TB, n int) string {
	t.Helper()
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":\"record %d\"}\n", i, i)
	}
	return WriteFile(t, "records.jsonl", sb.String())
}

// Dispatch publishes the job and returns its id.
func Dispatch(t testing.TB, b *broker.Broker, wf *workflow.Workflow, input string, o dispatcher.Options) *dispatcher.Result {
	t.Helper()
	o.Input = input
	if o.IDField == "" {
		o.IDField = "id"
	}
	d := &dispatcher.Dispatcher{B: b, Log: Logger(t)}
	res, err := d.Dispatch(context.Background(), wf, o)
	require.NoError(t, err)
	return res
}

// Pool starts a worker pool, stopped when the test ends.
func Pool(t testing.TB, b *broker.Broker, cfg worker.Config) *worker.Pool {
	t.Helper()
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 16
	}
	if cfg.Limits == nil && cfg.LimitsConfig.Breaker == (ratelimit.BreakerConfig{}) {
		// Tests that inject failures on purpose would trip the circuit
		// breaker; the tests of the breaker turn it on explicitly.
		cfg.LimitsConfig.Breaker.Off = true
	}
	cfg.Log = Logger(t)
	p := worker.New(b, cfg)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Stop(ctx)
	})
	return p
}

// WaitFinished waits until the job is finished and returns its progress.
func WaitFinished(t testing.TB, b *broker.Broker, job string, timeout time.Duration) (*broker.Job, broker.Progress) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(timeout)
	var last broker.Progress
	for {
		j, _, err := b.GetJob(ctx, job)
		require.NoError(t, err)
		p, err := b.JobProgress(ctx, j, true)
		require.NoError(t, err)
		last = p
		if p.Finished(j) {
			return j, p
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s not finished after %s: %+v (total %d, status %s)", job, timeout, last, j.Total, j.Status)
		}
		Tick()
	}
}

// Tick is the polling interval of wait helpers: they poll a condition
// with a deadline; no test sleeps to synchronise.
func Tick() { time.Sleep(20 * time.Millisecond) }

// Eventually waits for cond up to timeout.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s: "+msg, append([]any{timeout}, args...)...)
		}
		Tick()
	}
}

// Results returns the job's final results by record id (and fails on a
// record with two final results).
func Results(t testing.TB, b *broker.Broker, job *broker.Job) map[string]*broker.Result {
	t.Helper()
	last := job.Actions[len(job.Actions)-1]
	out := map[string]*broker.Result{}
	err := b.EachResult(context.Background(), job.ID, func(r *broker.Result) error {
		if r.Status != broker.StatusOK || r.Action == last {
			if prev, dup := out[r.ID]; dup {
				return fmt.Errorf("record %s has two final results: %s/%s and %s/%s", r.ID, prev.Action, prev.Status, r.Action, r.Status)
			}
			out[r.ID] = r
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// Counter wraps provider.New and counts calls per record and in total.
type Counter struct {
	mu    sync.Mutex
	calls map[string]int
	total int
	// Wrap, when set, may replace a provider's behaviour per call.
	Wrap func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error)
}

// NewCounter makes a Counter.
func NewCounter() *Counter { return &Counter{calls: map[string]int{}} }

// New is a worker.Config.NewProvider.
func (c *Counter) New(cfg provider.Config) (provider.Provider, error) {
	p, err := provider.New(cfg)
	if err != nil {
		return nil, err
	}
	return &counted{Provider: p, c: c}, nil
}

// Calls returns the calls made for record (all actions).
func (c *Counter) Calls(record string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[record]
}

// Total returns every call made.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

type counted struct {
	provider.Provider
	c *Counter
}

func (p *counted) Call(ctx context.Context, req provider.Request) (provider.Response, error) {
	p.c.mu.Lock()
	p.c.calls[req.RecordID]++
	p.c.total++
	wrap := p.c.Wrap
	p.c.mu.Unlock()
	if wrap != nil {
		return wrap(req, func() (provider.Response, error) { return p.Provider.Call(ctx, req) })
	}
	return p.Provider.Call(ctx, req)
}

// Embed counts an embeddings request once in Total and once for each
// record it carries; the provider must be an Embedder.
func (p *counted) Embed(ctx context.Context, req provider.EmbedRequest) (provider.EmbedResponse, error) {
	e, ok := p.Provider.(provider.Embedder)
	if !ok {
		return provider.EmbedResponse{}, fmt.Errorf("provider %s (kind %s) has no embeddings API", p.Name(), p.Kind())
	}
	p.c.mu.Lock()
	for _, id := range req.RecordIDs {
		p.c.calls[id]++
	}
	p.c.total++
	p.c.mu.Unlock()
	return e.Embed(ctx, req)
}
