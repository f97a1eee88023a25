package ratelimit_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/ratelimit/ratelimittest"
	"github.com/jetpool/jetpool/worker"
)

// Parameters of the rate-limit benchmark: a provider allowing
// benchRate requests/s (429 + whole-second Retry-After), benchLatency per
// call, benchRecords records, benchConcurrency per pool — well above
// 1.5 × rate × latency = 6.
const (
	benchRate        = 20
	benchLatency     = 200 * time.Millisecond
	benchRecords     = 400
	benchConcurrency = 32
)

// benchRow is one line of the benchmark's table.
type benchRow struct {
	Name     string  `json:"name"`
	Calls    int     `json:"calls"`
	Limited  int     `json:"limited"`
	OK       int     `json:"ok"`
	Failed   int     `json:"failed"`
	Elapsed  float64 `json:"elapsed_s"`
	Goodput  float64 `json:"goodput_per_s"`
	MaxInFly int     `json:"max_in_flight"`
}

func (r benchRow) String() string {
	share := 0.0
	if r.Calls > 0 {
		share = float64(r.Limited) / float64(r.Calls) * 100
	}
	return fmt.Sprintf("| %-34s | %5d | %5d (%5.1f%%) | %4d | %4d | %6.1fs | %5.1f/s = %5.1f%% of R |",
		r.Name, r.Calls, r.Limited, share, r.OK, r.Failed, r.Elapsed, r.Goodput, r.Goodput/benchRate*100)
}

// TestBenchRateLimited is the benchmark of docs/ratelimits.md. It runs only
// with JETPOOL_BENCH=1 (about 2 minutes):
//
//	JETPOOL_BENCH=1 go test ./ratelimit -run TestBenchRateLimited -v -timeout 10m
//
// With JETPOOL_BENCH_NODE=1 it also runs bench/ratelimit-node (the npm
// openai SDK in a p-limit pool; `npm ci` there first) against the same
// kind of server, at the SDK's default 2 retries and at 10.
func TestBenchRateLimited(t *testing.T) {
	if os.Getenv("JETPOOL_BENCH") == "" {
		t.Skip("set JETPOOL_BENCH=1 to run the rate-limit benchmark")
	}
	var rows []benchRow
	for _, c := range []struct {
		name            string
		limits, headers bool
		pools           int
	}{
		{"jetpool, no limits (adaptive), 1 pool", false, false, 1},
		{"jetpool, limits rpm 1200, 1 pool", true, false, 1},
		{"jetpool, no limits (adaptive), 2 pools", false, false, 2},
		{"jetpool, limits rpm 1200, 2 pools", true, false, 2},
		{"jetpool, adaptive, x-ratelimit headers, 1 pool", false, true, 1},
		{"jetpool, adaptive, x-ratelimit headers, 2 pools", false, true, 2},
	} {
		if only := os.Getenv("JETPOOL_BENCH_ONLY"); only != "" && !strings.Contains(c.name, only) {
			continue
		}
		row := benchJetpool(t, c.name, c.limits, c.headers, c.pools)
		t.Log(row)
		rows = append(rows, row)
	}
	if os.Getenv("JETPOOL_BENCH_NODE") != "" {
		for _, retries := range []int{2, 10} {
			row := benchNode(t, retries)
			t.Log(row)
			rows = append(rows, row)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nR = %d req/s, latency %s, %d records, concurrency %d per pool\n", benchRate, benchLatency, benchRecords, benchConcurrency)
	sb.WriteString("| run                                | calls | 429s (share)   |   ok | fail | elapsed | goodput                  |\n")
	for _, r := range rows {
		sb.WriteString(r.String() + "\n")
	}
	t.Log(sb.String())
	if out := os.Getenv("JETPOOL_BENCH_OUT"); out != "" {
		data, _ := json.MarshalIndent(rows, "", "  ")
		require.NoError(t, os.WriteFile(out, data, 0o600))
	}
}

func benchJetpool(t *testing.T, name string, limits, headers bool, pools int) benchRow {
	srv := ratelimittest.New(benchRate, benchLatency)
	defer srv.Close()
	srv.SetHeaders(headers)
	b := testenv.Broker(t)
	lim := ""
	if limits {
		lim = ", limits: {rpm: 1200}"
	}
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  bench: {kind: openai, base_url: %q, timeout: 30s%s}
defaults:
  provider: bench
  model: gpt-4o-mini
  retry: {max_attempts: 3}
actions:
  - name: a
    prompt: "Summarise: {{ .text }}"
`, srv.BaseURL(), lim))
	input := testenv.Records(t, benchRecords)
	start := time.Now()
	var ps []*worker.Pool
	for i := range pools {
		bb := b
		if i > 0 {
			bb = testenv.Connect(t, b)
		}
		ps = append(ps, testenv.Pool(t, bb, worker.Config{Concurrency: benchConcurrency}))
	}
	stop := make(chan struct{})
	traced := make(chan struct{})
	go func() { // JETPOOL_BENCH_TRACE: each pool's window twice a second
		defer close(traced)
		if os.Getenv("JETPOOL_BENCH_TRACE") == "" {
			return
		}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			var line []string
			for _, p := range ps {
				for _, l := range p.Limits().Limiters() {
					st := l.Status()
					line = append(line, fmt.Sprintf("%.1f/%d pace %.1f cool %.1fs", st.Limit, st.InFlight, st.Pace, st.Cooldown.Seconds()))
				}
			}
			t.Logf("%5.1fs served %d: %s", time.Since(start).Seconds(), srv.Stats().Served, strings.Join(line, " | "))
		}
	}()
	res := testenv.Dispatch(t, b, wf, input, dispatcher.Options{})
	_, prog := testenv.WaitFinished(t, b, res.Job.ID, 5*time.Minute)
	elapsed := time.Since(start)
	close(stop)
	<-traced
	st := srv.Stats()
	if os.Getenv("JETPOOL_BENCH_TRACE") != "" {
		_, limited := srv.Arrivals()
		var at []string
		for _, x := range limited {
			at = append(at, fmt.Sprintf("%.2f", x.Sub(start).Seconds()))
		}
		t.Logf("429s at: %s", strings.Join(at, " "))
	}
	return benchRow{Name: name, Calls: st.Calls(), Limited: st.Limited, OK: int(prog.OK), Failed: int(prog.Failed),
		Elapsed: elapsed.Seconds(), Goodput: float64(prog.OK) / elapsed.Seconds(), MaxInFly: st.MaxInFlight}
}

// benchNode runs the npm openai SDK in a p-limit pool against a fresh server.
func benchNode(t *testing.T, retries int) benchRow {
	dir, err := filepath.Abs("../bench/ratelimit-node")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules")); err != nil {
		t.Fatalf("run `npm ci` in %s first", dir)
	}
	srv := ratelimittest.New(benchRate, benchLatency)
	defer srv.Close()
	cmd := exec.Command("node", "bench.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BASE_URL="+srv.BaseURL(), "RECORDS="+strconv.Itoa(benchRecords),
		"CONCURRENCY="+strconv.Itoa(benchConcurrency), "MAX_RETRIES="+strconv.Itoa(retries), "OPENAI_API_KEY=sk-bench")
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", out)
	var r struct {
		OK, Failed int
		Elapsed    float64
	}
	require.NoError(t, json.Unmarshal(out, &r), "%s", out)
	st := srv.Stats()
	return benchRow{Name: fmt.Sprintf("openai SDK + p-limit, %d retries", retries), Calls: st.Calls(), Limited: st.Limited,
		OK: r.OK, Failed: r.Failed, Elapsed: r.Elapsed, Goodput: float64(r.OK) / r.Elapsed, MaxInFly: st.MaxInFlight}
}

var _ = broker.StatusOK
