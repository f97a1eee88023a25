package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/profile"
	"github.com/jetpool/jetpool/workflow"
)

// round is one round of the throughput measures, in records (or messages)
// per second.
type round struct {
	rawPub, rawConsume, rawConsumeWQ, goPub, goConsume, floor, loop, loopWork, inline float64
	dispatch, work, workChild, both, e2e                                              float64
	// goPubPaired is the nats.go publisher again, just before the dispatch:
	// the pair the dispatch's ratio is of, measured back to back.
	goPubPaired float64
	// loopWhole is the raw work loop storing jetpool's whole result
	// (inlineWork.whole), in the pairs only.
	loopWhole float64
	// CPU of the consume-side measures (process and children).
	rawConsumeCPU, rawConsumeWQCPU, floorCPU, loopCPU, loopWorkCPU, loopWholeCPU, inlineCPU, workCPU, workChildCPU cpuUse
}

// ratio is a baseline a measure is compared with, by name.
type ratio struct {
	name string
	of   func(round) float64
}

// rounds are a run's throughput rounds: each row is over all of them.
type rounds []round

func (rs rounds) values(get func(round) float64) []float64 {
	v := make([]float64, len(rs))
	for i, rd := range rs {
		v[i] = get(rd)
	}
	return v
}

// cpuNote is a measure's CPU (this process and the nats CLI): per message,
// and as cores busy, which tells a CPU-bound run (near the machine's cores)
// from one that waited.
func (rs rounds) cpuNote(get func(round) cpuUse) string {
	if get == nil || get(rs[0]).perMsg == 0 {
		return ""
	}
	us := func(d func(cpuUse) time.Duration) []float64 {
		return rs.values(func(rd round) float64 { return float64(d(get(rd))) / float64(time.Microsecond) })
	}
	var server []float64
	if get(rs[0]).server > 0 {
		server = us(func(c cpuUse) time.Duration { return c.server })
	}
	note := "; " + cpuText(us(func(c cpuUse) time.Duration { return c.perMsg }), server,
		rs.values(func(rd round) float64 { return get(rd).cores }), "message")
	if get(rs[0]).alloc > 0 {
		note += ", " + allocText(rs.values(func(rd round) float64 { return get(rd).alloc }), "message")
	}
	return note
}

// throughput runs the raw engine and then jetpool, Repeat times in turn, so
// that each ratio compares figures taken minutes apart at most, and adds
// their rows: on the embedded server and, with Options.External, on a
// nats-server process of its own, in turn in each round.
func (h *harness) throughput(ctx context.Context) error {
	in, wf, err := h.zeroWork()
	if err != nil {
		return err
	}
	h.cli = findNatsCLI(h.o.NatsCLI)
	if h.cli == "" {
		fmt.Fprintln(h.out, "  (nats CLI not found: raw baselines use the equivalent nats.go loops)")
	}
	servers := []*server{h.emb}
	if h.o.External {
		ext, stop, err := h.externalServer(ctx)
		if err != nil {
			return err
		}
		defer stop()
		servers = append(servers, ext)
	}
	rs := make([]rounds, len(servers))
	for r := range h.o.Repeat {
		if h.o.Repeat > 1 {
			fmt.Fprintf(h.out, " round %d of %d\n", r+1, h.o.Repeat)
		}
		for i, s := range servers {
			var rd round
			var err error
			if s == h.emb {
				rd, err = h.round(ctx, s, wf, in, r)
			} else {
				rd, err = h.externalRound(ctx, s, r)
			}
			if err != nil {
				return err
			}
			rs[i] = append(rs[i], rd)
		}
	}
	for i, s := range servers {
		h.throughputRows(s, rs[i])
	}
	return nil
}

// zeroWork writes the zero-latency measures' input (Records records of
// Size bytes) and workflow into the work dir.
func (h *harness) zeroWork() (in string, wf *workflow.Workflow, err error) {
	in = filepath.Join(h.dir, "records.jsonl")
	if err := writeRecords(in, h.o.Records, h.o.Size); err != nil {
		return "", nil, err
	}
	wf, err = writeWorkflow(h.dir, "zero", "reply: ok", "", "")
	return in, wf, err
}

// externalServer starts the nats-server process of Options.External
// (startExternal), syncing as the embedded server does.
func (h *harness) externalServer(ctx context.Context) (*server, func(), error) {
	bin := findNatsServer(h.o.NatsServer)
	if bin == "" {
		return nil, nil, errors.New("--external: no nats-server on PATH or in $GOPATH/bin (go install github.com/nats-io/nats-server/v2@v2.15.2, or --nats-server PATH)")
	}
	return h.startExternal(ctx, h.cfg, bin, h.cfg.SyncInterval)
}

// workerGC sets a worker process's GC target (Options.WorkerGOGC) for
// jetpool's measures in the child of an external round, as a `jetpool
// worker` runs (the raw ones keep the process's own, as a plain program
// would); the returned func restores it.
func (h *harness) workerGC() (restore func()) {
	if h.o.WorkerGOGC <= 0 || h.o.RoundOn == "" {
		return func() {}
	}
	old := debug.SetGCPercent(h.o.WorkerGOGC)
	return func() { debug.SetGCPercent(old) }
}

// jetpoolRow is s's row name for a measure of jetpool's: on the external
// server its child ran the measure at a worker process's GC target
// (workerGC) and the raw ones beside it at Go's default, which the name
// says, so that a ratio between them is not read as like for like.
func (h *harness) jetpoolRow(s *server, name string) string {
	if s.name != "" && h.o.WorkerGOGC > 0 {
		name += fmt.Sprintf(", GOGC %d as a worker process (the raw rows' 100; GOGC=100 in the environment: both)", h.o.WorkerGOGC)
	}
	return s.row(name)
}

// throughputRows adds a row for each throughput measure on s.
func (h *harness) throughputRows(s *server, rs rounds) {
	rawPub := func(rd round) float64 { return rd.rawPub }
	rawConsume := func(rd round) float64 { return rd.rawConsume }
	rawConsumeWQ := func(rd round) float64 { return rd.rawConsumeWQ }
	floor := func(rd round) float64 { return rd.floor }
	if h.cli != "" {
		h.addStat(rs, s.row("raw: nats bench js pub async --dedup"), rawPub, "msgs/s", nil)
		h.addStat(rs, s.row("raw: nats bench js consume (explicit ack)"), rawConsume, "msgs/s", func(rd round) cpuUse { return rd.rawConsumeCPU })
		h.addStat(rs, s.row("raw: nats bench js consume, work-queue stream (explicit ack; each ack removes its message, as in jetpool's work stream)"),
			rawConsumeWQ, "msgs/s", func(rd round) cpuUse { return rd.rawConsumeWQCPU })
	} else {
		h.addStat(rs, s.row("raw: nats.go pull consume + ack, work-queue stream"), rawConsumeWQ, "msgs/s", nil)
	}
	h.addStat(rs, s.row("raw: nats.go PublishMsgAsync + Nats-Msg-Id"), func(rd round) float64 { return rd.goPub }, "msgs/s", nil)
	h.addStat(rs, s.row("raw: nats.go pull consume + ack"), func(rd round) float64 { return rd.goConsume }, "msgs/s", nil)
	h.addStat(rs, s.row("raw floor: nats.go work-queue pull + result publish + ack"), floor, "msgs/s: jetpool's storage work without jetpool",
		func(rd round) cpuUse { return rd.floorCPU })
	loop := func(rd round) float64 { return rd.loop }
	h.addStat(rs, s.row(fmt.Sprintf("raw work loop: plain nats.go, %d goroutines: pull, publish the result and wait for its ack, ack", h.o.Concurrency)), loop,
		"msgs/s: the program a user would write for jetpool's storage work", func(rd round) cpuUse { return rd.loopCPU })
	loopWork := func(rd round) float64 { return rd.loopWork }
	h.addStat(rs, s.row(fmt.Sprintf("raw work loop with jetpool's record work: the same %d goroutines, each also doing jetpool's work on its record (envelope, template, call, result JSON)", h.o.Concurrency)), loopWork,
		"msgs/s: the program a user would write for jetpool's work, without its machinery", func(rd round) cpuUse { return rd.loopWorkCPU }, ratio{"the raw work loop", loop})
	h.addStat(rs, s.row("raw inline: the floor + jetpool's work on a record (envelope, template, call, result JSON), one goroutine"),
		func(rd round) float64 { return rd.inline }, "msgs/s: jetpool without its machinery",
		func(rd round) cpuUse { return rd.inlineCPU }, ratio{"raw consume", rawConsume})
	h.addStat(rs, h.jetpoolRow(s, "jetpool dispatch (validated as published)"), func(rd round) float64 { return rd.dispatch }, "", nil,
		ratio{"raw pub", rawPub}, ratio{"nats.go async pub + Nats-Msg-Id", func(rd round) float64 { return rd.goPubPaired }})
	// Zero-latency work, against each consume-side baseline.
	workRatios := []ratio{{"raw consume", rawConsume}, {"raw work-queue consume", rawConsumeWQ}, {"the raw floor", floor}, {"the raw work loop", loop},
		{"the raw work loop with the record work", loopWork}}
	h.addStat(rs, h.jetpoolRow(s, fmt.Sprintf("jetpool work, 0 ms latency, concurrency %d", h.o.Concurrency)), func(rd round) float64 { return rd.work }, "",
		func(rd round) cpuUse { return rd.workCPU }, workRatios...)
	if h.o.WorkProcess {
		h.addStat(rs, s.row(fmt.Sprintf("jetpool work, 0 ms latency, concurrency %d, worker process of its own (loopback TCP, as the nats CLI)", h.o.Concurrency)),
			func(rd round) float64 { return rd.workChild }, "",
			func(rd round) cpuUse { return rd.workChildCPU }, workRatios...)
	}
	h.addStat(rs, h.jetpoolRow(s, "jetpool dispatch, then work"), func(rd round) float64 { return rd.both }, "records/s, one after the other", nil)
	h.addStat(rs, h.jetpoolRow(s, "jetpool dispatch + work + result + ack, overlapped"), func(rd round) float64 { return rd.e2e }, "", nil,
		ratio{"raw consume", rawConsume},
		ratio{"raw pub then consume", func(rd round) float64 { return 1 / (1/rd.rawPub + 1/rd.rawConsume) }})
}

// addStat adds the row of one throughput measure over the rounds: its
// median rate with the range, its share of each baseline in ratios, and its
// CPU (when cpu is not nil).
func (h *harness) addStat(rs rounds, name string, get func(round) float64, note string, cpu func(round) cpuUse, ratios ...ratio) {
	percent := func(r float64) string { return fmt.Sprintf("%.0f%%", 100*r) }
	for _, q := range ratios {
		shares := rs.values(func(rd round) float64 { return get(rd) / q.of(rd) })
		note += ", " + spread(shares, percent) + " of " + q.name
	}
	h.add(name, spread(rs.values(get), rate), strings.TrimPrefix(note+rs.cpuNote(cpu), ", "))
}

// round measures the raw engine and then jetpool on s, once. Round r uses
// its own jobs; only round 0 is profiled (Options.CPUProfile, HeapProfile).
func (h *harness) round(ctx context.Context, s *server, wf *workflow.Workflow, in string, r int) (round, error) {
	var rd round
	if err := h.rawRound(ctx, s, &rd, wf); err != nil {
		return rd, err
	}
	defer h.workerGC()()
	if err := h.jetpoolRound(ctx, s, &rd, wf, in, r); err != nil {
		return rd, err
	}
	h.printRound(s, rd)
	return rd, nil
}

// rawRound measures the raw engine: the nats CLI's pub and consume (when it
// is installed), nats.go's loops, the raw floor and the raw inline run.
func (h *harness) rawRound(ctx context.Context, s *server, rd *round, wf *workflow.Workflow) error {
	n, size := h.o.Records, h.o.Size
	var err error
	if h.cli != "" {
		if err := h.natsCLIRound(ctx, s, rd); err != nil {
			return err
		}
	}
	if rd.goPub, rd.goConsume, err = rawGo(ctx, s.b, n, size, jetstream.LimitsPolicy); err != nil {
		return err
	}
	if h.cli == "" {
		if _, rd.rawConsumeWQ, err = rawGo(ctx, s.b, n, size, jetstream.WorkQueuePolicy); err != nil {
			return err
		}
	}
	if rd.floor, rd.floorCPU, err = rawFloor(ctx, h.out, s, n, size, nil); err != nil {
		return err
	}
	if rd.loop, rd.loopCPU, err = rawLoop(ctx, s, n, size, h.o.Concurrency, nil, nil); err != nil {
		return err
	}
	iw, err := newInlineWork(wf)
	if err != nil {
		return err
	}
	if rd.loopWork, rd.loopWorkCPU, err = rawLoop(ctx, s, n, size, h.o.Concurrency, iw, nil); err != nil {
		return err
	}
	if rd.inline, rd.inlineCPU, err = rawFloor(ctx, h.out, s, n, size, iw); err != nil {
		return err
	}
	if h.cli == "" {
		rd.rawPub, rd.rawConsume = rd.goPub, rd.goConsume
	}
	return nil
}

// natsCLIRound runs `nats bench js pub async --dedup`, then `js consume` on
// the stream it made, then `js consume` on a work-queue stream.
func (h *harness) natsCLIRound(ctx context.Context, s *server, rd *round) error {
	b, n, url := s.b, h.o.Records, s.url
	msgs := strconv.Itoa(n)
	var err error
	fresh := func() error { _ = b.JS.DeleteStream(ctx, "BENCHPUB"); return nil } // nats bench makes it afresh
	rd.rawPub, err = natsBench(ctx, h.out, h.cli, url, n, fresh, "pub", "async", "bench.pub", "--msgs", msgs, "--size", strconv.Itoa(h.o.Size),
		"--dedup", "--create", "--stream", "BENCHPUB")
	if err != nil {
		return err
	}
	m := s.meter()
	rd.rawConsume, err = natsBench(ctx, h.out, h.cli, url, n, nil, "consume", "", "", "--msgs", msgs, "--stream", "BENCHPUB")
	if err != nil {
		return err
	}
	rd.rawConsumeCPU = m(n)

	// The same on a work-queue stream, as jetpool's work stream is: each ack
	// removes its message. nats bench uses the stream it is given; it is
	// filled (not timed) before each run.
	refill := func() error {
		_ = b.JS.DeleteStream(ctx, "BENCHWQPUB")
		if _, err := b.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCHWQPUB", Subjects: []string{"bench.wqpub"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage}); err != nil {
			return err
		}
		err := publishRaw(ctx, b, "bench.wqpub", "wqpub-", n, h.o.Size, nil)
		m = s.meter()
		return err
	}
	rd.rawConsumeWQ, err = natsBench(ctx, h.out, h.cli, url, n, refill, "consume", "", "", "--msgs", msgs, "--stream", "BENCHWQPUB")
	if err != nil {
		return err
	}
	rd.rawConsumeWQCPU = m(n)
	_ = b.JS.DeleteStream(ctx, "BENCHWQPUB")
	return nil
}

// jetpoolRound measures jetpool: dispatch, zero-latency work, the two
// overlapped, and (WorkProcess) the work in a worker process of its own.
func (h *harness) jetpoolRound(ctx context.Context, s *server, rd *round, wf *workflow.Workflow, in string, r int) error {
	n := h.o.Records
	job := fmt.Sprintf("bench-zero-%d", r)
	// The plain publisher first, back to back with the dispatch: measured
	// minutes earlier, with the floor and the loops between, it met
	// another server (docs/performance.md, "Dispatch reads its input once").
	paired, err := pairedPub(ctx, s.b, n, h.o.Size)
	if err != nil {
		return err
	}
	rd.goPubPaired = paired
	start := time.Now()
	res, err := s.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job})
	if err != nil {
		return err
	}
	rd.dispatch = float64(res.Published) / time.Since(start).Seconds()

	// End to end, zero latency.
	stopProfile := func() {}
	if h.o.CPUProfile != "" && r == 0 {
		if stopProfile, err = profile.StartCPU(h.o.CPUProfile); err != nil {
			return fmt.Errorf("--cpuprofile-work: %w", err)
		}
	}
	run, err := h.work(ctx, s, job, h.o.Concurrency, n)
	rd.workCPU = run.cpu
	stopProfile()
	if r == 0 {
		profile.WriteHeap(h.o.HeapProfile)
	}
	if err != nil {
		return err
	}
	rd.work = float64(n) / run.total.Seconds()
	rd.both = float64(n) / (float64(n)/rd.dispatch + run.total.Seconds())

	// End to end, with the pool working while the dispatcher publishes
	// (`jetpool run` dispatches first, then works: the row "dispatch, then
	// work"), timed from the first record read to the last ack.
	if rd.e2e, err = h.overlapped(ctx, s, wf, in, fmt.Sprintf("bench-e2e-%d", r)); err != nil {
		return err
	}

	// WorkProcess: zero-latency work again, with the pool in a worker
	// process of its own, connected over loopback TCP as the nats CLI is (and
	// as a deployed worker is); its start is included, and the CPU is the
	// worker's and the server's. Last in the round, so the rows before it
	// run on the store as they did.
	if h.o.WorkProcess {
		job = fmt.Sprintf("bench-zero-child-%d", r)
		if _, err := s.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job}); err != nil {
			return err
		}
		childRun, err := h.childWork(ctx, s, job, h.o.Concurrency, n)
		if err != nil {
			return err
		}
		rd.workChild, rd.workChildCPU = float64(n)/childRun.total.Seconds(), childRun.cpu
	}
	return nil
}

// printRound prints a round's figures on s as it ends.
func (h *harness) printRound(s *server, rd round) {
	childRate, childCPU := "", ""
	if h.o.WorkProcess {
		childRate = fmt.Sprintf(" (worker process %.0f)", rd.workChild)
		childCPU = fmt.Sprintf(", worker process %v (%.2f)", rd.workChildCPU.perMsg, rd.workChildCPU.cores)
	}
	if s.name != "" {
		fmt.Fprintf(h.out, "   %s:\n", s.name)
	}
	fmt.Fprintf(h.out, "   raw pub %.0f (nats.go %.0f), raw consume %.0f (work-queue %.0f), floor %.0f, loop %.0f (with the record work %.0f), inline %.0f; dispatch %.0f (nats.go just before %.0f), work %.0f%s, overlapped %.0f\n",
		rd.rawPub, rd.goPub, rd.rawConsume, rd.rawConsumeWQ, rd.floor, rd.loop, rd.loopWork, rd.inline, rd.dispatch, rd.goPubPaired, rd.work, childRate, rd.e2e)
	fmt.Fprintf(h.out, "   CPU per message (cores busy): raw consume %v (%.2f), work-queue %v (%.2f), floor %v (%.2f), loop %v (%.2f), loop with the record work %v (%.2f), inline %v (%.2f), work %v (%.2f)%s\n",
		rd.rawConsumeCPU.perMsg, rd.rawConsumeCPU.cores, rd.rawConsumeWQCPU.perMsg, rd.rawConsumeWQCPU.cores,
		rd.floorCPU.perMsg, rd.floorCPU.cores, rd.loopCPU.perMsg, rd.loopCPU.cores, rd.loopWorkCPU.perMsg, rd.loopWorkCPU.cores, rd.inlineCPU.perMsg, rd.inlineCPU.cores,
		rd.workCPU.perMsg, rd.workCPU.cores, childCPU)
}

// overlapped runs a pool on a new job while it is dispatched (as `jetpool
// run` does) and returns records/s from the dispatch's start to the job
// finished.
func (h *harness) overlapped(ctx context.Context, s *server, wf *workflow.Workflow, in, job string) (float64, error) {
	_, stop, err := h.startPool(ctx, s, job, h.o.Concurrency)
	if err != nil {
		return 0, err
	}
	defer stop()
	start := time.Now()
	if _, err := s.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job}); err != nil {
		return 0, err
	}
	if err := h.waitJob(ctx, s, job); err != nil {
		return 0, err
	}
	return float64(h.o.Records) / time.Since(start).Seconds(), nil
}
