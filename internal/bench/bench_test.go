package bench

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// The bench on a tiny job: every measure runs and lands in the table. Its
// figures are not checked here (they belong to the README's run); that it
// keeps working is. With CI set, the raw rows must come from the real nats
// CLI, which CI installs.
func TestRunSmoke(t *testing.T) {
	dir := t.TempDir()
	var progress strings.Builder
	// The external rows need the nats-server binary, which CI installs.
	external := os.Getenv("CI") != "" || findNatsServer("") != ""
	rows, err := Run(t.Context(), testenv.Config(t, testenv.Options{}), Options{Records: 300, Concurrency: 16,
		LatencyConcurrency: []int{2}, LatencyRecords: 2, RetryRecords: 30, Repeat: 2, WorkProcess: true, External: external, Dir: dir,
		Self: jetpoolBin, Progress: &progress})
	require.NoError(t, err, progress.String())
	var table strings.Builder
	WriteTable(&table, rows)
	stdout, stderr := table.String(), progress.String()
	for _, row := range []string{
		"| raw floor: nats.go work-queue pull + result publish + ack |",
		"| jetpool dispatch (validated as published) |",
		"| jetpool work, 0 ms latency, concurrency 16 |",
		"| jetpool work, 0 ms latency, concurrency 16, worker process of its own (loopback TCP, as the nats CLI) |",
		"| jetpool dispatch + work + result + ack, overlapped |",
		"| 100 ms latency, concurrency 2 (4 records), sustained |",
		"| 100 ms latency, concurrency 2 (4 records), whole run |",
		"| 100 ms latency, concurrency 2 (4 records), sustained, limits: {adaptive: false} |",
		"| 100 ms latency, concurrency 2 (4 records), sustained, worker process of its own |",
		"| retry: 10% transient faults, extra calls |",
		"| raw work loop: plain nats.go, 16 goroutines: pull, publish the result and wait for its ack, ack |",
		"| raw work loop with jetpool's record work: the same 16 goroutines, each also doing jetpool's work on its record (envelope, template, call, result JSON) |",
	} {
		require.Contains(t, stdout, row)
	}
	require.Regexp(t, `\| jetpool dispatch \(validated as published\) \|[^\n]* of nats.go async pub \+ Nats-Msg-Id \|`, stdout)
	require.Regexp(t, `\| jetpool work, 0 ms latency, concurrency 16 \|[^\n]* of the raw work loop, [^\n]* of the raw work loop with the record work; CPU `, stdout)
	if external {
		for _, row := range []string{
			"| raw work loop: plain nats.go, 16 goroutines: pull, publish the result and wait for its ack, ack — external nats-server (loopback TCP) |",
			"| jetpool dispatch (validated as published) — external nats-server (loopback TCP) |",
			"| jetpool work, 0 ms latency, concurrency 16 — external nats-server (loopback TCP) |",
			"| jetpool work, 0 ms latency, concurrency 16, worker process of its own (loopback TCP, as the nats CLI) — external nats-server (loopback TCP) |",
		} {
			require.Contains(t, stdout, row)
		}
		require.Regexp(t, `\| jetpool work, 0 ms latency, concurrency 16 — external [^|]*\| [0-9]+/s [^\n]*; CPU [0-9]+ \([0-9]+–[0-9]+\) µs a message`, stdout,
			"the CPU counts the external server's process")
	}
	require.True(t, strings.HasPrefix(stdout, "| measure | value | note |\n|---|---|---|\n"), stdout)
	require.Contains(t, stdout, "of the raw floor")
	require.Regexp(t, `\| jetpool work, 0 ms latency, concurrency 16 \|[^\n]*%\) of raw consume, [0-9]+% \([0-9]+–[0-9]+%\) of raw work-queue consume, `, stdout)
	require.Regexp(t, `\| jetpool work, 0 ms latency, concurrency 16 \|[^\n]*; CPU [0-9]+ \([0-9]+–[0-9]+\) µs a message, [0-9.]+ \([0-9.]+–[0-9.]+\) cores busy, [0-9.]+ \([0-9.]+–[0-9.]+\) KiB allocated a message \|`, stdout)
	require.Regexp(t, `\| raw floor: [^\n]*; CPU [0-9]+ [^\n]* µs a message`, stdout)
	require.Regexp(t, `\| raw inline: [^\n]*\| [0-9]+/s [^\n]*jetpool without its machinery, [0-9]+% [^\n]* of raw consume; CPU [0-9]+ `, stdout)
	require.Contains(t, stdout, "limits: {adaptive: false}")
	require.Regexp(t, `\| 100 ms latency, concurrency 2 \(4 records\), whole run \|[^\n]*; CPU [0-9]+ \([0-9]+–[0-9]+\) µs a record, [0-9.]+ \([0-9.]+–[0-9.]+\) cores busy \|`, stdout)
	require.Equal(t, 2, strings.Count(stderr, " round "), "two rounds of the throughput measures")
	require.Regexp(t, `^jetpool bench: 300 records of 1024 B, go[0-9.]+, [0-9]+ CPUs, fsync 1s, GOGC [0-9]+\n`, stderr)
	if os.Getenv("CI") != "" {
		require.Contains(t, stdout, "| raw: nats bench js consume (explicit ack) |", "CI installs the nats CLI")
		require.Regexp(t, `\| raw: nats bench js consume, work-queue stream [^\n]*\| [0-9]+/s [^\n]*msgs/s; CPU [0-9]+ `, stdout)
	}
}

// A `nats bench` that never finishes is ended and run once more; a second
// stall fails the bench with the CLI's goroutine dump kept, instead of
// hanging it (the real CLI hung once here, in `bench js consume`).
func TestNatsBenchStall(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	orig := natsBenchTimeout
	natsBenchTimeout = func(int) time.Duration { return 300 * time.Millisecond }
	t.Cleanup(func() { natsBenchTimeout = orig })
	// A fake CLI: it hangs (until SIGQUIT, when it prints a "dump") for as
	// many runs as the file "hangs" says, then reports a rate.
	cli := filepath.Join(dir, "nats")
	require.NoError(t, os.WriteFile(cli, []byte(`#!/bin/sh
n=$(cat "$(dirname "$0")/hangs")
if [ "$n" -gt 0 ]; then
  echo $((n - 1)) > "$(dirname "$0")/hangs"
  trap 'echo "goroutine 1 [select]:"; exit 2' QUIT
  while :; do sleep 0.05; done
fi
echo "NATS JetStream ordered consumer stats: 12,345 msgs/sec ~ 12 MiB/sec"
`), 0o755))
	hangs := func(n int) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "hangs"), []byte(strconv.Itoa(n)+"\n"), 0o644))
	}

	var out strings.Builder
	resets := 0
	hangs(1)
	rate, err := natsBench(t.Context(), &out, cli, "nats://127.0.0.1:1", 10, func() error { resets++; return nil }, "consume", "", "")
	require.NoError(t, err)
	require.Equal(t, 12345.0, rate)
	require.Equal(t, 2, resets, "reset before each run")
	require.Contains(t, out.String(), "no result after 300ms (the CLI stalled; its goroutine dump is in ")
	require.Contains(t, out.String(), "running it again")

	_, err = natsBench(t.Context(), io.Discard, cli, "nats://127.0.0.1:1", 10, func() error { return errors.New("refill: no room") }, "consume", "", "")
	require.EqualError(t, err, "refill: no room", "a reset that fails fails the run, before the CLI runs")

	hangs(2)
	_, err = natsBench(t.Context(), io.Discard, cli, "nats://127.0.0.1:1", 10, nil, "consume", "", "")
	require.ErrorContains(t, err, "the CLI stalled")
	dumps, _ := filepath.Glob(filepath.Join(dir, "jetpool-bench-nats-stall-*.txt"))
	require.Len(t, dumps, 3)
	data, err := os.ReadFile(dumps[0])
	require.NoError(t, err)
	require.Contains(t, string(data), "goroutine 1 [select]:")
}

// A worker process that dies before its job is done fails the bench run at
// once, instead of leaving it waiting for counts that never move. (Here the
// child, the real jetpool binary, exits on a bad setting.) Not parallel: it
// sets the environment.
func TestChildWorkerExit(t *testing.T) {
	b := testenv.Broker(t)
	wf, err := writeWorkflow(t.TempDir(), "exit", "reply: ok", "", "")
	require.NoError(t, err)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, 3), dispatcher.Options{})
	t.Setenv("JETPOOL_ACK_WAIT", "soon") // the child's config does not load
	var stderr strings.Builder
	s := &server{b: b, url: b.Server().ClientURL()}
	h := &harness{o: Options{Self: jetpoolBin}, out: &stderr, emb: s, log: testenv.Logger(t)}
	_, err = h.childWork(context.Background(), s, res.Job.ID, 2, 3)
	require.ErrorContains(t, err, "worker child exited with job "+res.Job.ID+" at 0 of 3 records")
	require.Contains(t, stderr.String(), "ACK_WAIT", "the child said why")
}

// An external round's figures survive the trip from its child process.
func TestRoundJSON(t *testing.T) {
	t.Parallel()
	in := round{rawPub: 1, goPub: 2, floor: 3, loop: 4, loopWork: 4.5, loopWhole: 4.25, dispatch: 5, work: 6, workChild: 7, e2e: 8,
		floorCPU: cpuUse{perMsg: 31 * time.Microsecond, cores: 1.5}, workCPU: cpuUse{perMsg: 64 * time.Microsecond, cores: 1.8},
		loopWorkCPU: cpuUse{perMsg: 40 * time.Microsecond, cores: 1.7, alloc: 2048}, loopWholeCPU: cpuUse{perMsg: 42 * time.Microsecond, cores: 1.7}}
	data, err := in.MarshalJSON()
	require.NoError(t, err)
	var out round
	require.NoError(t, out.UnmarshalJSON(data))
	require.Equal(t, in, out)
}

// The pairs on a tiny job: each pair runs the loop with the record work,
// the same loop storing jetpool's whole result and jetpool's work in turn
// (the order turned), on the embedded server and, where nats-server is
// installed, on an external one; jetpool's row carries its share of each
// loop pair by pair, and each embedded pair the bytes the server took in
// (a pair's job is deleted after it: a failure there fails the run); the
// first pair's CPU profiles are written, the loop's and jetpool's.
func TestRunPairs(t *testing.T) {
	dir := t.TempDir()
	var progress strings.Builder
	external := os.Getenv("CI") != "" || findNatsServer("") != ""
	prof := filepath.Join(dir, "work.prof")
	rows, err := Run(t.Context(), testenv.Config(t, testenv.Options{}), Options{Records: 200, Concurrency: 8, Pairs: 3,
		External: external, Dir: dir, Self: jetpoolBin, Progress: &progress, CPUProfile: prof})
	require.NoError(t, err, progress.String())
	var table strings.Builder
	WriteTable(&table, rows)
	stdout, stderr := table.String(), progress.String()
	require.Regexp(t, `\| pairs: raw work loop with jetpool's record work, 8 goroutines \| [0-9]+/s \([0-9]+–[0-9]+\) \| msgs/s; CPU `, stdout)
	require.Regexp(t, `\| pairs: raw work loop with jetpool's record work, storing jetpool's whole result, 8 goroutines \| [0-9]+/s \([0-9]+–[0-9]+\) \| msgs/s; CPU `, stdout)
	require.Regexp(t, `\| pairs: jetpool work, 0 ms latency, concurrency 8 \| [0-9]+/s \([0-9]+–[0-9]+\) \| [0-9]+% \([0-9]+–[0-9]+%\) of the raw work loop with the record work, pair by pair, [0-9]+% \([0-9]+–[0-9]+%\) of the loop storing the whole result; CPU `, stdout)
	require.Regexp(t, `(?m)^   pair 1 of 3: the loop with the record work [0-9]+/s \([^)]*\), storing jetpool's whole result [0-9]+/s \([^)]*\), jetpool [0-9]+/s \([^)]*\): [0-9]+%, [0-9]+% \(the server took in [0-9]+, [0-9]+ and [0-9]+ B a record\)$`, stderr)
	require.NotContains(t, stdout, "raw floor", "the pairs replace the throughput rounds")
	require.Len(t, regexp.MustCompile(`(?m)^   pair [1-3] of 3: `).FindAllString(stderr, -1), 3, "three pairs on the embedded server")
	if external {
		require.Regexp(t, `\| pairs: jetpool work, 0 ms latency, concurrency 8 — external nats-server \(loopback TCP\) \| [0-9]+/s [^\n]* pair by pair, [^\n]* of the loop storing the whole result; CPU [0-9]+ \([0-9]+–[0-9]+\) µs a message \([0-9]+ `, stdout)
		require.Contains(t, stdout, "| pairs: raw work loop with jetpool's record work, storing jetpool's whole result, 8 goroutines — external nats-server (loopback TCP) |")
		require.FileExists(t, prof+".external")
	}
	for _, f := range []string{prof, prof + ".loop"} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		require.Positive(t, st.Size(), f)
	}
}

// The loop that stores jetpool's whole result (inlineWork.whole) stores
// what jetpool does: its result has every field, nested ones too, of the
// result jetpool's worker stores for the same record answered at its first
// try, and as many bytes but for the job's id; and the loops' work messages
// carry what a dispatch's do.
func TestWholeResultIsJetpools(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := testenv.Broker(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "records.jsonl")
	require.NoError(t, writeRecords(in, 1, 1024))
	wf, err := writeWorkflow(dir, "whole", "reply: ok", "", "")
	require.NoError(t, err)
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	job := res.Job.ID
	stream, err := b.JS.Stream(ctx, broker.StreamWork)
	require.NoError(t, err)
	dispatched, err := stream.GetLastMsgForSubject(ctx, broker.WorkSubject(job, "act"))
	require.NoError(t, err)

	s := &server{b: b}
	h := &harness{o: Options{}, out: io.Discard, emb: s, log: testenv.Logger(t)}
	_, err = h.work(ctx, s, job, 1, 1)
	require.NoError(t, err)
	results, err := b.JS.Stream(ctx, broker.StreamResults)
	require.NoError(t, err)
	stored, err := results.GetLastMsgForSubject(ctx, broker.ResultSubject(job, "act", broker.OutcomeOK, "r0"))
	require.NoError(t, err)

	iw, err := newInlineWork(wf)
	require.NoError(t, err)
	iw.whole = true
	m, err := iw.message(1024)("x", 0)
	require.NoError(t, err)
	require.Equal(t, keyPaths(t, dispatched.Data), keyPaths(t, m.Data), "the loops' work message is a dispatched one")
	require.ElementsMatch(t, slices.Collect(maps.Keys(dispatched.Header)), slices.Collect(maps.Keys(m.Header)), "with a dispatch's headers")
	whole, err := iw.result(ctx, m.Data)
	require.NoError(t, err)
	require.Equal(t, keyPaths(t, stored.Data), keyPaths(t, whole), "jetpool stored %s", stored.Data)
	idGap := len(inlineJob.ID) - len(job)
	require.InDelta(t, len(stored.Data), len(whole)-idGap, 8, "jetpool stored %s\nthe loop %s", stored.Data, whole)

	iw.whole = false
	part, err := iw.result(ctx, m.Data)
	require.NoError(t, err)
	require.Less(t, len(part)+200, len(stored.Data), "without whole, the loop stores less")
}

// keyPaths lists every key of the JSON object data, nested ones as a.b
// (an array's members as a[]).
func keyPaths(t *testing.T, data []byte) []string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(data, &v))
	var out []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				out = append(out, prefix+k)
				walk(prefix+k+".", e)
			}
		case []any:
			for _, e := range v {
				walk(strings.TrimSuffix(prefix, ".")+"[].", e)
			}
		}
	}
	walk("", v)
	slices.Sort(out)
	return slices.Compact(out)
}
