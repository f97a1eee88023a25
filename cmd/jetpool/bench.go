package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"

	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

type benchFlags struct {
	records     int
	size        int
	concurrency int
	latencies   string
	perSlot     int
	big         int
	retryN      int
	natsCLI     string
	sync        string
	dir         string
	profile     string
	repeat      int
	workProcess bool
}

type benchRow struct{ name, value, note string }

func cmdBench(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench", "[flags]",
		"Measure jetpool side by side with the raw JetStream engine on one embedded server (same process, same store):\n"+
			"dispatch vs `nats bench js pub async --dedup`, end to end vs `nats bench js consume` (on its own stream,\n"+
			"and on a work-queue stream, where each ack removes its message, as in jetpool's) and vs a raw floor\n"+
			"(bare nats.go doing jetpool's storage work: work-queue pull, result publish, ack) and a raw inline run\n"+
			"(the floor plus jetpool's work on each record, on one goroutine), with the CPU each takes a message\n"+
			"(with --work-process, jetpool's work in a worker process of its own too, over loopback TCP),\n"+
			"efficiency under 100 ms of simulated latency (adaptive concurrency; limits: {adaptive: false}; and\n"+
			"the pool in a worker process of its own, as deployed), retry overhead with 10% transient faults, and\n"+
			"(with --big N) peak RSS of a dispatcher and a worker process on an N-record job and the time\n"+
			"`jetpool status` takes on it.")
	var f benchFlags
	fs.IntVar(&f.records, "records", 100000, "records (and raw messages) for the throughput runs")
	fs.IntVar(&f.size, "size", 1024, "record size in bytes")
	fs.IntVar(&f.concurrency, "concurrency", 256, "worker concurrency for the zero-latency end-to-end run")
	fs.StringVar(&f.latencies, "latency-concurrency", "10,100,1000", "concurrencies for the 100 ms latency runs (empty: skip)")
	fs.IntVar(&f.perSlot, "latency-records", 50, "records per concurrency slot in the latency runs (50: 5 s of ideal work, ramp-up included)")
	fs.IntVar(&f.big, "big", 0, "records of the memory run (e.g. 1000000; 0: skip)")
	fs.IntVar(&f.retryN, "retry-records", 10000, "records of the retry-overhead run (0: skip)")
	fs.StringVar(&f.natsCLI, "nats", "", "path of the nats CLI for the raw baselines (default: nats on PATH or in $GOPATH/bin)")
	fs.StringVar(&f.sync, "sync", "", "embedded server fsync policy for the run (default: $JETPOOL_SYNC_INTERVAL)")
	fs.StringVar(&f.dir, "dir", "", "work dir (default: a temp dir, removed after)")
	fs.IntVar(&f.repeat, "repeat", 1, "rounds of the throughput measures (raw engine, then jetpool, in turn) and of each latency run: figures are medians, with the range")
	fs.BoolVar(&f.workProcess, "work-process", false, "also run the zero-latency work with the pool in a worker process of its own, over loopback TCP as the nats CLI connects (off by default: its jobs add to the server's state, which the later rows run on)")
	fs.StringVar(&f.profile, "cpuprofile-work", "", "write a CPU profile of the zero-latency work run (pool and embedded server) to this file")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	dir := f.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "jetpool-bench-*"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	cfg := e.cfg
	cfg.NATSURL = ""
	cfg.DataDir = filepath.Join(dir, "store")
	if f.sync != "" {
		cfg.SyncInterval = f.sync
	}
	cfg.LogLevel = "error"
	log := cfg.Logger()
	b, err := broker.StartEmbedded(ctx, cfg, log, broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		return err
	}
	url := b.Server().ClientURL()
	var rows []benchRow
	add := func(name, value, note string) {
		rows = append(rows, benchRow{name, value, note})
		fmt.Fprintf(e.stderr, "  %-52s %-22s %s\n", name, value, note)
	}
	fmt.Fprintf(e.stderr, "jetpool bench: %d records of %d B, %s, %d CPUs, fsync %s, GOGC %d\n", f.records, f.size, runtime.Version(), runtime.NumCPU(), cfg.SyncInterval, gcPercent())

	// 1–3. Throughput: the raw engine, then jetpool, --repeat times in
	// turn, so each ratio compares figures taken minutes apart at most.
	in := filepath.Join(dir, "records.jsonl")
	if err := writeBenchRecords(in, f.records, f.size); err != nil {
		return err
	}
	wf, err := benchWorkflow(dir, "zero", "reply: ok", "", "")
	if err != nil {
		return err
	}
	d := &dispatcher.Dispatcher{B: b, Log: log}
	cli := findNatsCLI(f.natsCLI)
	if cli == "" {
		fmt.Fprintln(e.stderr, "  (nats CLI not found: raw baselines use the equivalent nats.go loops)")
	}
	var rounds []benchRound
	for r := range max(f.repeat, 1) {
		if f.repeat > 1 {
			fmt.Fprintf(e.stderr, " round %d of %d\n", r+1, f.repeat)
		}
		rd, err := throughputRound(ctx, e, b, d, wf, in, cli, url, f, r, log)
		if err != nil {
			return err
		}
		rounds = append(rounds, rd)
	}
	values := func(get func(benchRound) float64) []float64 {
		v := make([]float64, len(rounds))
		for i, rd := range rounds {
			v[i] = get(rd)
		}
		return v
	}
	percent := func(r float64) string { return fmt.Sprintf("%.0f%%", 100*r) }
	// cpuNote is a measure's CPU (this process and the nats CLI): per
	// message, and as cores busy, which tells a CPU-bound run (near the
	// machine's cores) from one that waited.
	cpuNote := func(get func(benchRound) cpuUse) string {
		if get == nil || get(rounds[0]).perMsg == 0 {
			return ""
		}
		return "; " + cpuText(values(func(rd benchRound) float64 { return float64(get(rd).perMsg) / float64(time.Microsecond) }),
			values(func(rd benchRound) float64 { return get(rd).cores }), "message")
	}
	addStat := func(name string, get func(benchRound) float64, note string, cpu func(benchRound) cpuUse, ratios ...benchRatio) {
		for _, q := range ratios {
			ratio := values(func(rd benchRound) float64 { return get(rd) / q.of(rd) })
			note += ", " + spread(ratio, percent) + " of " + q.name
		}
		add(name, spread(values(get), rate), strings.TrimPrefix(note+cpuNote(cpu), ", "))
	}
	rawPub := func(rd benchRound) float64 { return rd.rawPub }
	rawConsume := func(rd benchRound) float64 { return rd.rawConsume }
	if cli != "" {
		addStat("raw: nats bench js pub async --dedup", rawPub, "msgs/s", nil)
		addStat("raw: nats bench js consume (explicit ack)", rawConsume, "msgs/s", func(rd benchRound) cpuUse { return rd.rawConsumeCPU })
	}
	rawConsumeWQ := func(rd benchRound) float64 { return rd.rawConsumeWQ }
	if cli != "" {
		addStat("raw: nats bench js consume, work-queue stream (explicit ack; each ack removes its message, as in jetpool's work stream)",
			rawConsumeWQ, "msgs/s", func(rd benchRound) cpuUse { return rd.rawConsumeWQCPU })
	} else {
		addStat("raw: nats.go pull consume + ack, work-queue stream", rawConsumeWQ, "msgs/s", nil)
	}
	addStat("raw: nats.go PublishMsgAsync + Nats-Msg-Id", func(rd benchRound) float64 { return rd.goPub }, "msgs/s", nil)
	addStat("raw: nats.go pull consume + ack", func(rd benchRound) float64 { return rd.goConsume }, "msgs/s", nil)
	floor := func(rd benchRound) float64 { return rd.floor }
	addStat("raw floor: nats.go work-queue pull + result publish + ack", floor, "msgs/s: jetpool's storage work without jetpool",
		func(rd benchRound) cpuUse { return rd.floorCPU })
	addStat("raw inline: the floor + jetpool's work on a record (envelope, template, call, result JSON), one goroutine",
		func(rd benchRound) float64 { return rd.inline }, "msgs/s: jetpool without its machinery",
		func(rd benchRound) cpuUse { return rd.inlineCPU }, benchRatio{"raw consume", rawConsume})
	addStat("jetpool dispatch (validate pass + publish)", func(rd benchRound) float64 { return rd.dispatch }, "", nil,
		benchRatio{"raw pub", rawPub})
	// Zero-latency work, against each consume-side baseline.
	workRatios := []benchRatio{{"raw consume", rawConsume}, {"raw work-queue consume", rawConsumeWQ}, {"the raw floor", floor}}
	addStat(fmt.Sprintf("jetpool work, 0 ms latency, concurrency %d", f.concurrency), func(rd benchRound) float64 { return rd.work }, "",
		func(rd benchRound) cpuUse { return rd.workCPU }, workRatios...)
	if f.workProcess {
		addStat(fmt.Sprintf("jetpool work, 0 ms latency, concurrency %d, worker process of its own (loopback TCP, as the nats CLI)", f.concurrency),
			func(rd benchRound) float64 { return rd.workChild }, "",
			func(rd benchRound) cpuUse { return rd.workChildCPU }, workRatios...)
	}
	addStat("jetpool dispatch, then work", func(rd benchRound) float64 { return rd.both }, "records/s, one after the other", nil)
	addStat("jetpool dispatch + work + result + ack, overlapped", func(rd benchRound) float64 { return rd.e2e }, "", nil,
		benchRatio{"raw consume", rawConsume},
		benchRatio{"raw pub then consume", func(rd benchRound) float64 { return 1 / (1/rd.rawPub + 1/rd.rawConsume) }})

	// 4. Efficiency under latency.
	for _, cs := range strings.Split(f.latencies, ",") {
		cs = strings.TrimSpace(cs)
		if cs == "" {
			continue
		}
		c, err := strconv.Atoi(cs)
		if err != nil || c <= 0 {
			return usageErr("--latency-concurrency: %q is not a positive number", cs)
		}
		n := c * max(f.perSlot, 1)
		lin := filepath.Join(dir, fmt.Sprintf("lat%d.jsonl", c))
		if err := writeBenchRecords(lin, n, f.size); err != nil {
			return err
		}
		ideal := float64(c) / 0.1
		// Three times: with the shipped adaptive concurrency (no limits);
		// with `limits: {adaptive: false}`, as for a self-hosted endpoint;
		// and adaptive again, with the pool in a worker process of its own
		// (`jetpool worker`, as deployed), so that the embedded server's
		// state, which grows with every job run, is not in the pool's heap.
		// --repeat times each, as the throughput measures.
		for _, mode := range []struct{ adaptive, child bool }{{true, false}, {false, false}, {true, true}} {
			name, limits, label := fmt.Sprintf("lat%d", c), "", "adaptive ramp and drain included"
			sustained := "sustained"
			switch {
			case !mode.adaptive:
				name, limits, label = name+"-fixed", "adaptive: false", "limits: {adaptive: false}, drain included"
				sustained += ", limits: {adaptive: false}"
			case mode.child:
				name, label = name+"-child", "worker process of its own, its start, ramp and drain included"
				sustained += ", worker process of its own"
			}
			lwf, err := benchWorkflow(dir, name, "latency: 100ms", limits, "")
			if err != nil {
				return err
			}
			var steady, whole, us, cores []float64
			for r := range max(f.repeat, 1) {
				job := fmt.Sprintf("bench-%s-%d", name, r)
				if _, err := d.Dispatch(ctx, lwf, dispatcher.Options{Input: lin, JobID: job}); err != nil {
					return err
				}
				var run benchRun
				if mode.child {
					run, err = benchChildWork(ctx, e, b, job, c, n)
				} else {
					run, err = benchWork(ctx, e, b, job, c, n, log)
				}
				if err != nil {
					return err
				}
				steady = append(steady, run.steady)
				whole = append(whole, float64(n)/run.total.Seconds())
				us = append(us, float64(run.cpu.perMsg)/float64(time.Microsecond))
				cores = append(cores, run.cpu.cores)
			}
			add(fmt.Sprintf("100 ms latency, concurrency %d (%d records), %s", c, n, sustained), spread(steady, rate),
				spread(steady, func(v float64) string { return pct(v, ideal) })+" of ideal "+rate(ideal)+" (20–80 % of the job)")
			add(fmt.Sprintf("100 ms latency, concurrency %d (%d records), whole run", c, n), spread(whole, rate),
				spread(whole, func(v float64) string { return pct(v, ideal) })+" of ideal, "+label+"; "+cpuText(us, cores, "record"))
		}
	}

	// 5. Retry overhead.
	if f.retryN > 0 {
		rin := filepath.Join(dir, "retry.jsonl")
		if err := writeBenchRecords(rin, f.retryN, 256); err != nil {
			return err
		}
		rwf, err := benchWorkflow(dir, "retry", "faults: {server: 0.1}", "",
			"    retry: {max_attempts: 3, backoff: 1ms, max_backoff: 5ms, redeliver: {max_deliveries: 3, backoff: 10ms}}\n")
		if err != nil {
			return err
		}
		if _, err := d.Dispatch(ctx, rwf, dispatcher.Options{Input: rin, JobID: "bench-retry"}); err != nil {
			return err
		}
		if _, err := benchWork(ctx, e, b, "bench-retry", 64, f.retryN, log); err != nil {
			return err
		}
		j, _, err := b.GetJob(ctx, "bench-retry")
		if err != nil {
			return err
		}
		s, err := summarize(ctx, b, j, "")
		if err != nil {
			return err
		}
		// With p = 0.1 per call, the expected calls per record are 1/(1-p).
		add("retry: 10% transient faults, extra calls", fmt.Sprintf("%d / %d", s.calls-int64(f.retryN), f.retryN),
			fmt.Sprintf("%.1f%% extra (expected %.1f%%), %d failed", 100*float64(s.calls-int64(f.retryN))/float64(f.retryN), 100*(1/0.9-1), s.failed))
	}

	// 6. Memory on a big job, in separate processes.
	if f.big > 0 {
		if err := benchBig(ctx, e, b, dir, f, add); err != nil {
			return err
		}
	}

	fmt.Fprintln(e.stdout, "| measure | value | note |")
	fmt.Fprintln(e.stdout, "|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(e.stdout, "| %s | %s | %s |\n", r.name, r.value, r.note)
	}
	return nil
}

func rate(r float64) string { return fmt.Sprintf("%.0f/s", r) }

// cpuText gives a measure's CPU over its runs: µs a message (or record),
// and cores busy, each as spread gives it.
func cpuText(us, cores []float64, per string) string {
	return "CPU " + spread(us, func(v float64) string { return fmt.Sprintf("%.0f", v) }) + " µs a " + per + ", " +
		spread(cores, func(v float64) string { return fmt.Sprintf("%.2f", v) }) + " cores busy"
}

// spread is the median of v, with its range when there is more than one:
// "97/s (96–100)", "97% (96–100%)".
func spread(v []float64, format func(float64) string) string {
	v = slices.Sorted(slices.Values(v))
	s := format(v[len(v)/2])
	if len(v) > 1 {
		lo, hi := strings.TrimSuffix(format(v[0]), "/s"), strings.TrimSuffix(format(v[len(v)-1]), "/s")
		s += " (" + strings.TrimSuffix(lo, "%") + "–" + hi + ")"
	}
	return s
}

func pct(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}

func findNatsCLI(p string) string {
	if p != "" {
		return p
	}
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	if gp, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(gp)), "bin", "nats")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

var statsRE = regexp.MustCompile(`stats: ([0-9,]+) msgs/sec`)

// natsBench runs `nats bench js <kind> [<mode>] [subject] …` and returns
// msgs/s. A run that has not finished after natsBenchTimeout is taken for a
// stall of the CLI: it is ended with SIGQUIT (its goroutine dump is kept in
// a file, for the report) and run once more, after reset (if not nil;
// it is called before each run), so one stall does not spoil a long bench,
// and a second fails it instead of hanging.
func natsBench(ctx context.Context, w io.Writer, cli, url string, n int, reset func() error, kind, mode, subject string, args ...string) (float64, error) {
	a := []string{"bench", "js", kind}
	if mode != "" {
		a = append(a, mode)
	}
	if subject != "" {
		a = append(a, subject)
	}
	a = append(a, args...)
	a = append(a, "--no-progress", "-s", url)
	timeout := natsBenchTimeout(n)
	for try := 1; ; try++ {
		if reset != nil {
			if err := reset(); err != nil {
				return 0, err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		cmd := exec.CommandContext(rctx, cli, a...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		stalled := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		if stalled {
			kept := "not kept: "
			if dump, ferr := os.CreateTemp("", "jetpool-bench-nats-stall-*.txt"); ferr != nil {
				kept += ferr.Error()
			} else {
				_, _ = dump.Write(out)
				_ = dump.Close()
				kept = "in " + dump.Name()
			}
			msg := fmt.Sprintf("%s %s: no result after %s (the CLI stalled; its goroutine dump is %s)", cli, strings.Join(a, " "), timeout, kept)
			if try == 2 {
				return 0, errors.New(msg)
			}
			fmt.Fprintf(w, "   %s; running it again\n", msg)
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%s %s: %v\n%s", cli, strings.Join(a, " "), err, out)
		}
		m := statsRE.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("nats bench: no rate in its output:\n%s", out)
		}
		return strconv.ParseFloat(strings.ReplaceAll(string(m[1]), ",", ""), 64)
	}
}

// natsBenchTimeout is how long a `nats bench` run of n messages may take
// before it is taken for a stall: a minute, plus 1 ms a message (100 times
// what the engine needs on a 2-core machine). A variable, for a test.
var natsBenchTimeout = func(n int) time.Duration { return time.Minute + time.Duration(n)*time.Millisecond }

// rawGo is the engine's own speed through nats.go, as jetpool uses it:
// async publish with Nats-Msg-Id, then a pull consumer acking each message,
// on a stream of the given retention.
func rawGo(ctx context.Context, b *broker.Broker, n, size int, retention jetstream.RetentionPolicy) (pub, consume float64, err error) {
	s, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHRAW", Subjects: []string{"benchraw.>"},
		Retention: retention, Storage: jetstream.FileStorage})
	if err != nil {
		return 0, 0, err
	}
	defer b.JS.DeleteStream(context.WithoutCancel(ctx), "BENCHRAW")
	start := time.Now()
	if err := publishRaw(ctx, b, "benchraw.x", "raw-", n, size, nil); err != nil {
		return 0, 0, err
	}
	pub = float64(n) / time.Since(start).Seconds()
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return 0, 0, err
	}
	start = time.Now()
	done := make(chan struct{})
	var got int
	cc, err := c.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		got++
		if got == n {
			close(done)
		}
	}, rawPullOpts...)
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cc.Stop()
	consume = float64(n) / time.Since(start).Seconds()
	return pub, consume, ctx.Err()
}

// publishRaw publishes n messages of size bytes to subject, async with a
// Nats-Msg-Id, waiting for the acks every 500 (nats bench's window); body,
// when set, gives message i's payload instead.
func publishRaw(ctx context.Context, b *broker.Broker, subject, idPrefix string, n, size int, body func(i int) []byte) error {
	payload := make([]byte, size)
	wait := func() error {
		select {
		case <-b.JS.PublishAsyncComplete():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; i < n; i++ {
		m := nats.NewMsg(subject)
		m.Data = payload
		if body != nil {
			m.Data = body(i)
		}
		m.Header.Set(nats.MsgIdHdr, idPrefix+strconv.Itoa(i))
		if _, err := b.JS.PublishMsgAsync(m); err != nil {
			return err
		}
		if i%500 == 499 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// rawPullOpts are the raw consume loops' pull settings: 500 messages a
// pull, renewed every 2 s (a pull of nats.go's Consume stalled rarely, until
// its default 30 s expiry).
var rawPullOpts = []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(500), jetstream.PullExpiry(2 * time.Second)}

// rawFloor is what jetpool's work path stores per record, done with bare
// nats.go: pull from a work-queue stream (an ack removes the message), publish
// a small result to a stream of one message per subject and wait for its
// ack, then ack the work message. `nats bench js consume` does none of the
// storage writes (its stream keeps the messages; nothing is published).
//
// With inline set, the messages are work envelopes and each result is what
// jetpool computes for a record (inlineWork), on nats.go's consume goroutine.
func rawFloor(ctx context.Context, w io.Writer, b *broker.Broker, n, size int, inline *inlineWork) (float64, cpuUse, error) {
	work, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHWQ", Subjects: []string{"benchwq.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		return 0, cpuUse{}, err
	}
	defer b.JS.DeleteStream(context.WithoutCancel(ctx), "BENCHWQ")
	if _, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHRES", Subjects: []string{"benchres.>"},
		MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage}); err != nil {
		return 0, cpuUse{}, err
	}
	defer b.JS.DeleteStream(context.WithoutCancel(ctx), "BENCHRES")
	var body func(int) []byte
	which := "floor"
	if inline != nil {
		body, which = inline.envelope(size), "inline"
	}
	if err := publishRaw(ctx, b, "benchwq.x", "wq-", n, size, body); err != nil {
		return 0, cpuUse{}, err
	}
	c, err := work.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
	if err != nil {
		return 0, cpuUse{}, err
	}
	type pending struct {
		msg jetstream.Msg
		f   jetstream.PubAckFuture
	}
	queue := make(chan pending, 4096)
	result := []byte(`{"id":"r","status":"ok","output":"ok","attempts":1,"usage":{"input_tokens":10,"output_tokens":2}}`)
	start, cpu := time.Now(), meterCPU()
	var seq int
	var lost atomic.Int64 // results whose publish failed: their messages wait for AckWait
	cc, err := c.Consume(func(m jetstream.Msg) {
		seq++
		r := nats.NewMsg("benchres.r" + strconv.Itoa(seq))
		r.Data = result
		if inline != nil {
			var err error
			if r.Data, err = inline.result(ctx, m.Data()); err != nil {
				lost.Add(1)
				inline.failed.CompareAndSwap(nil, &err)
				return
			}
		}
		for {
			f, err := b.JS.PublishMsgAsync(r)
			switch {
			case err == nil:
				queue <- pending{m, f}
				return
			case errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil:
				continue // the store is behind: wait for room
			default:
				lost.Add(1)
				return // not acked: redelivered after AckWait, and the stall is reported
			}
		}
	}, rawPullOpts...)
	if err != nil {
		return 0, cpuUse{}, err
	}
	defer cc.Stop()
	stalled := time.Duration(0)
	for i := 0; i < n; i++ {
		select {
		case p := <-queue:
			stalled = 0
			select {
			case <-p.f.Ok():
				_ = p.msg.Ack()
			case err := <-p.f.Err():
				return 0, cpuUse{}, err
			}
		case <-ctx.Done():
			return 0, cpuUse{}, ctx.Err()
		case <-time.After(time.Second):
			// A stall is reported, so a figure it spoils is not taken for
			// the engine's.
			if inline != nil && inline.failed.Load() != nil {
				return 0, cpuUse{}, fmt.Errorf("raw inline: %w", *inline.failed.Load())
			}
			if stalled += time.Second; stalled >= time.Minute {
				return 0, cpuUse{}, fmt.Errorf("raw %s: stalled after %d of %d messages", which, i, n)
			}
			fmt.Fprintf(w, "   raw %s: no progress for %s at %d of %d messages (%d results not published)\n", which, stalled, i, n, lost.Load())
			i--
		}
	}
	return float64(n) / time.Since(start).Seconds(), cpu(n), nil
}

// inlineWork is jetpool's own work on a record, as a worker does it, minus
// its machinery (handler goroutines, slots, the retry session, limits,
// heartbeats, the committer): decode the envelope, render the prompt from
// the fields it names, call the model, encode the result.
type inlineWork struct {
	a      *workflow.Action
	pr     provider.Provider
	failed atomic.Pointer[error]
}

func newInlineWork(wf *workflow.Workflow) (*inlineWork, error) {
	a := wf.Actions[0]
	pr, err := provider.New(wf.Providers[a.Provider])
	if err != nil {
		return nil, err
	}
	return &inlineWork{a: a, pr: pr}, nil
}

// envelope gives the work message of record i, as a dispatch publishes it.
func (iw *inlineWork) envelope(size int) func(i int) []byte {
	pad := strings.Repeat("x", max(size-40, 1))
	return func(i int) []byte {
		id := "r" + strconv.Itoa(i)
		env := &broker.Envelope{ID: id, RawRecord: json.RawMessage(`{"id":"` + id + `","text":"` + pad + `"}`), Line: i + 1}
		data, _ := env.MarshalJSON()
		return data
	}
}

func (iw *inlineWork) result(ctx context.Context, data []byte) ([]byte, error) {
	env, err := broker.ParseEnvelope(data)
	if err != nil {
		return nil, err
	}
	rec, err := env.Fields(iw.a.Fields())
	if err != nil {
		return nil, err
	}
	prompt, err := iw.a.Render(rec)
	if err != nil {
		return nil, err
	}
	resp, err := iw.pr.Call(ctx, provider.Request{Model: iw.a.Model, System: iw.a.System,
		Messages: []provider.Message{{Role: "user", Content: prompt}}, RecordID: env.ID})
	if err != nil {
		return nil, err
	}
	return json.Marshal(&broker.Result{ID: env.ID, Status: broker.StatusOK, Output: resp.Text, Action: iw.a.Name, Job: "inline",
		Provider: iw.a.Provider, Model: resp.Model, Finished: time.Now().UTC(),
		Usage: broker.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}})
}

func writeBenchRecords(path string, n, size int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	pad := strings.Repeat("x", max(size-40, 1))
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "{\"id\":\"r%d\",\"text\":\"%s\"}\n", i, pad)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func benchWorkflow(dir, name, sim, limits, retryBlock string) (*workflow.Workflow, error) {
	p := filepath.Join(dir, name+".yaml")
	y := fmt.Sprintf("name: %s\nproviders:\n  sim: {kind: sim, limits: {%s}, sim: {%s}}\nactions:\n  - name: act\n    provider: sim\n    prompt: \"{{ .text }}\"\n%s",
		name, limits, sim, retryBlock)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		return nil, err
	}
	return workflow.Load(p)
}

// startBenchPool starts a pool serving only job; stop stops it (10 s to drain).
func startBenchPool(ctx context.Context, b *broker.Broker, job string, conc int, log zerolog.Logger) (*worker.Pool, func(), error) {
	pool := worker.New(b, worker.Config{Concurrency: conc, Log: log, Jobs: []string{job}})
	if err := pool.Start(ctx); err != nil {
		return nil, nil, err
	}
	return pool, func() {
		pool.JobDone(job) // called once the job is done (or the bench failed)
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = pool.Stop(sctx)
	}, nil
}

// benchRun is the timing of one pool run.
type benchRun struct {
	total time.Duration // pool start to the job finished
	// steady is the rate between 20 % and 80 % of the records handled: the
	// pool's sustained rate, without the adaptive window's ramp at the
	// start and the drain at the end (0 when the run was too short to see).
	steady float64
	cpu    cpuUse // over total
}

// window finds a run's sustained rate: the records done between 20 % and
// 80 % of the job, over the time between (see benchRun.steady).
type window struct {
	records  int64
	t20, t80 time.Time
	n20, n80 int64
}

// see takes a sample: done records at now. It reports whether the 80 %
// mark is passed (no further sample is needed).
func (w *window) see(now time.Time, done int64) bool {
	if w.t20.IsZero() && done >= w.records/5 {
		w.t20, w.n20 = now, done
	}
	if w.t80.IsZero() && done >= w.records*4/5 {
		w.t80, w.n80 = now, done
	}
	return !w.t80.IsZero()
}

// rate is the sustained rate, 0 when the run was too short to see it.
func (w *window) rate() float64 {
	if w.t20.IsZero() || w.t80.IsZero() || !w.t80.After(w.t20) {
		return 0
	}
	return float64(w.n80-w.n20) / w.t80.Sub(w.t20).Seconds()
}

// benchWork runs a pool on job until it is finished and returns the times.
func benchWork(ctx context.Context, e *env, b *broker.Broker, job string, conc, records int, log zerolog.Logger) (benchRun, error) {
	start, cpu := time.Now(), meterCPU()
	pool, stopPool, err := startBenchPool(ctx, b, job, conc, log)
	if err != nil {
		return benchRun{}, err
	}
	defer stopPool()
	// Sample the records the pool has finished (handled, no longer in flight).
	win := window{records: int64(records)}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if win.see(now, pool.Snapshot().Handled-pool.InFlightCount()) {
					return
				}
			}
		}
	}()
	_, err = waitJobEvery(ctx, e, b, job, false, 20*time.Millisecond)
	total, used := time.Since(start), cpu(records)
	close(stop)
	<-sampled
	if err != nil {
		return benchRun{}, err
	}
	return benchRun{total: total, cpu: used, steady: win.rate()}, nil
}

// benchChildWork runs job on a worker process of its own (`jetpool worker
// --job`, connected to b's server as a deployed worker is) until the job is
// finished. The rates are read from the job's counts (two consumer-info
// requests every 10 ms); the CPU counts the worker process and this one
// (the server).
func benchChildWork(ctx context.Context, e *env, b *broker.Broker, job string, conc, records int) (benchRun, error) {
	self, err := os.Executable()
	if err != nil {
		return benchRun{}, err
	}
	j, _, err := b.GetJob(ctx, job)
	if err != nil {
		return benchRun{}, err
	}
	start, cpu := time.Now(), meterCPU()
	wk := selfCommand(ctx, self, b, e.stderr, "worker", "--concurrency", strconv.Itoa(conc), "--job", job)
	if err := wk.Start(); err != nil {
		return benchRun{}, fmt.Errorf("worker child: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- wk.Wait() }()
	stop := func() {
		_ = wk.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	win := window{records: int64(records)}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := b.JobCounts(ctx, j, false)
		if err != nil {
			stop()
			return benchRun{}, err
		}
		win.see(time.Now(), c.Done)
		if c.Done >= int64(records) {
			break
		}
		select {
		case <-ctx.Done():
			stop()
			return benchRun{}, ctx.Err()
		case err := <-exited:
			return benchRun{}, fmt.Errorf("worker child exited with job %s at %d of %d records: %v", job, c.Done, records, err)
		case <-tick.C:
		}
	}
	total := time.Since(start)
	stop() // its CPU is counted once it has been waited for
	used := cpu(records)
	used.cores = (used.perMsg * time.Duration(records)).Seconds() / total.Seconds() // not the stop's wait
	return benchRun{total: total, cpu: used, steady: win.rate()}, nil
}

// benchRound is one round of the throughput measures, in records (or
// messages) per second.
type benchRound struct {
	rawPub, rawConsume, rawConsumeWQ, goPub, goConsume, floor, inline float64
	dispatch, work, workChild, both, e2e                              float64
	// CPU of the consume-side measures (process and children).
	rawConsumeCPU, rawConsumeWQCPU, floorCPU, inlineCPU, workCPU, workChildCPU cpuUse
}

type benchRatio struct {
	name string
	of   func(benchRound) float64
}

// throughputRound measures the raw engine and then jetpool, once. Round r
// uses its own jobs; only round 0 is profiled (--cpuprofile-work).
func throughputRound(ctx context.Context, e *env, b *broker.Broker, d *dispatcher.Dispatcher, wf *workflow.Workflow, in, cli, url string,
	f benchFlags, r int, log zerolog.Logger) (benchRound, error) {
	var rd benchRound
	var err error
	if cli != "" {
		fresh := func() error { _ = b.JS.DeleteStream(ctx, "BENCHPUB"); return nil } // nats bench makes it afresh
		rd.rawPub, err = natsBench(ctx, e.stderr, cli, url, f.records, fresh, "pub", "async", "bench.pub", "--msgs", strconv.Itoa(f.records), "--size", strconv.Itoa(f.size),
			"--dedup", "--create", "--stream", "BENCHPUB")
		if err != nil {
			return rd, err
		}
		m := meterCPU()
		rd.rawConsume, err = natsBench(ctx, e.stderr, cli, url, f.records, nil, "consume", "", "", "--msgs", strconv.Itoa(f.records), "--stream", "BENCHPUB")
		if err != nil {
			return rd, err
		}
		rd.rawConsumeCPU = m(f.records)

		// The same on a work-queue stream, as jetpool's work stream is:
		// each ack removes its message. nats bench uses the stream it is
		// given; it is filled (not timed) before each run.
		refill := func() error {
			_ = b.JS.DeleteStream(ctx, "BENCHWQPUB")
			if _, err := b.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCHWQPUB", Subjects: []string{"bench.wqpub"},
				Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}); err != nil {
				return err
			}
			err := publishRaw(ctx, b, "bench.wqpub", "wqpub-", f.records, f.size, nil)
			m = meterCPU()
			return err
		}
		rd.rawConsumeWQ, err = natsBench(ctx, e.stderr, cli, url, f.records, refill, "consume", "", "", "--msgs", strconv.Itoa(f.records), "--stream", "BENCHWQPUB")
		if err != nil {
			return rd, err
		}
		rd.rawConsumeWQCPU = m(f.records)
		_ = b.JS.DeleteStream(ctx, "BENCHWQPUB")
	}
	if rd.goPub, rd.goConsume, err = rawGo(ctx, b, f.records, f.size, jetstream.LimitsPolicy); err != nil {
		return rd, err
	}
	if cli == "" {
		if _, rd.rawConsumeWQ, err = rawGo(ctx, b, f.records, f.size, jetstream.WorkQueuePolicy); err != nil {
			return rd, err
		}
	}
	if rd.floor, rd.floorCPU, err = rawFloor(ctx, e.stderr, b, f.records, f.size, nil); err != nil {
		return rd, err
	}
	iw, err := newInlineWork(wf)
	if err != nil {
		return rd, err
	}
	if rd.inline, rd.inlineCPU, err = rawFloor(ctx, e.stderr, b, f.records, f.size, iw); err != nil {
		return rd, err
	}
	if cli == "" {
		rd.rawPub, rd.rawConsume = rd.goPub, rd.goConsume
	}

	// Dispatch.
	job := fmt.Sprintf("bench-zero-%d", r)
	start := time.Now()
	res, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job})
	if err != nil {
		return rd, err
	}
	rd.dispatch = float64(res.Published) / time.Since(start).Seconds()

	// End to end, zero latency.
	stopProfile := func() {}
	if f.profile != "" && r == 0 {
		if stopProfile, err = startCPUProfile(f.profile); err != nil {
			return rd, fmt.Errorf("--cpuprofile-work: %w", err)
		}
	}
	run, err := benchWork(ctx, e, b, job, f.concurrency, f.records, log)
	rd.workCPU = run.cpu
	stopProfile()
	if r == 0 {
		writeHeapProfile() // $JETPOOL_MEMPROFILE
	}
	if err != nil {
		return rd, err
	}
	rd.work = float64(f.records) / run.total.Seconds()
	rd.both = float64(f.records) / (float64(f.records)/rd.dispatch + run.total.Seconds())

	// End to end as `jetpool run` does it: the pool works while the
	// dispatcher publishes, timed from the first record read to the last ack.
	if rd.e2e, err = benchOverlapped(ctx, e, b, d, wf, in, f, fmt.Sprintf("bench-e2e-%d", r), log); err != nil {
		return rd, err
	}

	// --work-process: zero-latency work again, with the pool in a worker
	// process of its own, connected over loopback TCP as the nats CLI is (and
	// as a deployed worker is); its start is included, and the CPU is the
	// worker's and the server's. Last in the round, so the rows before it
	// run on the store as they did.
	childRate, childCPU := "", ""
	if f.workProcess {
		job = fmt.Sprintf("bench-zero-child-%d", r)
		if _, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job}); err != nil {
			return rd, err
		}
		childRun, err := benchChildWork(ctx, e, b, job, f.concurrency, f.records)
		if err != nil {
			return rd, err
		}
		rd.workChild, rd.workChildCPU = float64(f.records)/childRun.total.Seconds(), childRun.cpu
		childRate = fmt.Sprintf(" (worker process %.0f)", rd.workChild)
		childCPU = fmt.Sprintf(", worker process %v (%.2f)", rd.workChildCPU.perMsg, rd.workChildCPU.cores)
	}
	fmt.Fprintf(e.stderr, "   raw pub %.0f, raw consume %.0f (work-queue %.0f), floor %.0f, inline %.0f; dispatch %.0f, work %.0f%s, overlapped %.0f\n",
		rd.rawPub, rd.rawConsume, rd.rawConsumeWQ, rd.floor, rd.inline, rd.dispatch, rd.work, childRate, rd.e2e)
	fmt.Fprintf(e.stderr, "   CPU per message (cores busy): raw consume %v (%.2f), work-queue %v (%.2f), floor %v (%.2f), inline %v (%.2f), work %v (%.2f)%s\n",
		rd.rawConsumeCPU.perMsg, rd.rawConsumeCPU.cores, rd.rawConsumeWQCPU.perMsg, rd.rawConsumeWQCPU.cores,
		rd.floorCPU.perMsg, rd.floorCPU.cores, rd.inlineCPU.perMsg, rd.inlineCPU.cores,
		rd.workCPU.perMsg, rd.workCPU.cores, childCPU)
	return rd, nil
}

// benchOverlapped runs a pool on a new job while it is dispatched (as
// `jetpool run` does) and returns records/s from the dispatch's start to the
// job finished.
func benchOverlapped(ctx context.Context, e *env, b *broker.Broker, d *dispatcher.Dispatcher, wf *workflow.Workflow, in string,
	f benchFlags, job string, log zerolog.Logger) (float64, error) {
	_, stop, err := startBenchPool(ctx, b, job, f.concurrency, log)
	if err != nil {
		return 0, err
	}
	defer stop()
	start := time.Now()
	if _, err := d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job}); err != nil {
		return 0, err
	}
	if _, err := waitJobEvery(ctx, e, b, job, false, 20*time.Millisecond); err != nil {
		return 0, err
	}
	return float64(f.records) / time.Since(start).Seconds(), nil
}

// benchBig dispatches and works a big job in child processes of this
// binary, and reports their peak RSS and the time `jetpool status` takes.
func benchBig(ctx context.Context, e *env, b *broker.Broker, dir string, f benchFlags, add func(name, value, note string)) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in := filepath.Join(dir, "big.jsonl")
	if err := writeBenchRecords(in, f.big, f.size); err != nil {
		return err
	}
	if _, err := benchWorkflow(dir, "big", "reply: ok", "", ""); err != nil {
		return err
	}
	child := func(args ...string) *exec.Cmd { return selfCommand(ctx, self, b, os.Stderr, args...) }
	start := time.Now()
	disp := child("dispatch", filepath.Join(dir, "big.yaml"), "--input", in, "--job", "bench-big", "--no-preflight")
	disp.Stdout = nil
	if err := disp.Start(); err != nil {
		return fmt.Errorf("dispatch child: %w", err)
	}
	dispHWM := watchHWM(disp.Process.Pid)
	if err := disp.Wait(); err != nil {
		return fmt.Errorf("dispatch child: %w", err)
	}
	dt := time.Since(start)
	add(fmt.Sprintf("big job: dispatch %d records (child process)", f.big), rate(float64(f.big)/dt.Seconds()),
		"peak RSS "+dispHWM())
	wk := child("worker", "--concurrency", strconv.Itoa(f.concurrency), "--job", "bench-big")
	if err := wk.Start(); err != nil {
		return err
	}
	wkHWM := watchHWM(wk.Process.Pid)
	start = time.Now()
	_, werr := waitJobEvery(ctx, e, b, "bench-big", false, 20*time.Millisecond)
	wt := time.Since(start)
	peak := wkHWM()
	_ = wk.Process.Signal(syscall.SIGTERM)
	_ = wk.Wait()
	if werr != nil {
		return werr
	}
	add(fmt.Sprintf("big job: work %d records (child worker)", f.big), rate(float64(f.big)/wt.Seconds()), "peak RSS "+peak)
	for range 3 {
		st := child("status", "bench-big", "--json")
		start = time.Now()
		if err := st.Run(); err != nil {
			return fmt.Errorf("status child: %w", err)
		}
		add("big job: `jetpool status bench-big --json`", time.Since(start).Round(time.Millisecond).String(), "wall time of the whole command")
	}
	return nil
}

// selfCommand is this jetpool binary (self) run as a child on b's server:
// quiet, and not profiling.
func selfCommand(ctx context.Context, self string, b *broker.Broker, stderr io.Writer, args ...string) *exec.Cmd {
	c := exec.CommandContext(ctx, self, args...)
	c.Env = append(os.Environ(), "JETPOOL_NATS_URL="+b.Server().ClientURL(), "JETPOOL_LOG_LEVEL=error", "JETPOOL_CPUPROFILE=")
	c.Stderr = stderr
	return c
}

// watchHWM samples a child's VmHWM (its own peak RSS) until the returned
// func is called, which reports the peak seen. The child's rusage maxrss is
// no good here: Linux carries the parent's high-water mark over fork and
// exec, so a child forked by a big process reports the parent's size.
func watchHWM(pid int) func() string {
	var mu sync.Mutex
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	read := func() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "VmHWM:"), "kB")), 10, 64)
				mu.Lock()
				peak = max(peak, kb)
				mu.Unlock()
			}
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() string {
		read()
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d MiB", peak/1024)
	}
}

// cpuTime is the CPU this process and its waited-for children (the nats
// CLI) have used: the embedded server's side of a run counts with the
// client's, whichever process the client is.
func cpuTime() time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

// cpuUse is the CPU a measure took: per message, and as cores busy.
type cpuUse struct {
	perMsg time.Duration
	cores  float64
}

// meterCPU starts metering; the returned func ends it for n messages.
func meterCPU() func(n int) cpuUse {
	c0, t0 := cpuTime(), time.Now()
	return func(n int) cpuUse {
		c, t := cpuTime()-c0, time.Since(t0)
		return cpuUse{perMsg: c / time.Duration(max(n, 1)), cores: c.Seconds() / t.Seconds()}
	}
}
