// Package bench is the harness behind `jetpool bench`: it measures jetpool
// side by side with the raw JetStream engine on one embedded server (same
// process, same store) and returns the table the README's Performance
// section is made of.
//
// The measures, in the order they run and are printed:
//
//   - throughput, --repeat rounds of the raw engine and then jetpool in turn
//     (throughput.go): the real `nats bench` (raw.go) when the nats CLI is
//     installed, else nats.go's equivalent loops; the raw floor (bare nats.go
//     doing jetpool's storage work) and the raw inline run (the floor plus
//     jetpool's work on each record, on one goroutine); jetpool's dispatch,
//     zero-latency work (pool.go), and dispatch and work overlapped; with
//     Options.External, each round runs again against a nats-server process
//     of its own (server.go), as users deploy one;
//   - efficiency under 100 ms of simulated latency at each concurrency
//     (latency.go): adaptive, `limits: {adaptive: false}`, and the pool in a
//     worker process of its own;
//   - or, with Options.Pairs, only jetpool's zero-latency work and the raw
//     work loop with its record work (storing the answer, and again storing
//     jetpool's whole result), in pairs back to back (pairs.go);
//   - retry overhead with 10 % transient faults;
//   - with Options.Big, the peak RSS of a dispatcher and a worker process on a
//     big job, and the time `jetpool status` takes on it (big.go).
//
// How to read the figures is in docs/performance.md.
package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
)

// Defaults of Options.
const (
	RecordsDefault        = 100000 // Options.Records
	SizeDefault           = 1024   // Options.Size, bytes
	ConcurrencyDefault    = 256    // Options.Concurrency
	LatencyRecordsDefault = 50     // Options.LatencyRecords: 5 s of ideal work, ramp-up included
	RetryRecordsDefault   = 10000  // Options.RetryRecords (the command's default; 0 skips)
)

// Options is what one bench run measures. A zero field takes its default
// where one is named.
type Options struct {
	Records     int // records (and raw messages) of the throughput runs; RecordsDefault
	Size        int // record size in bytes; SizeDefault
	Concurrency int // pool concurrency of the zero-latency runs; ConcurrencyDefault
	// LatencyConcurrency are the concurrencies of the 100 ms latency runs
	// (none: no latency run); each runs LatencyRecords records a slot
	// (LatencyRecordsDefault).
	LatencyConcurrency []int
	LatencyRecords     int
	RetryRecords       int // records of the retry-overhead run; 0 skips it
	Big                int // records of the memory run; 0 skips it
	// NatsCLI is the nats CLI of the raw baselines; empty: nats on PATH or
	// in $GOPATH/bin, and without one the raw rows are nats.go's loops.
	NatsCLI string
	Sync    string // the embedded server's fsync policy; empty: the process configuration's
	Dir     string // work dir; empty: a temp dir, removed after
	// Repeat is the rounds of the throughput measures and of each latency
	// run (at least 1): the figures are medians, with the range.
	Repeat int
	// Pairs, when set, replaces the throughput rounds with that many pairs
	// of the raw work loop with jetpool's record work (storing its answer,
	// and again storing jetpool's whole result) and jetpool's zero-latency
	// work, back to back, the order turned each time (pairs.go).
	Pairs int
	// WorkProcess adds the zero-latency work with the pool in a worker
	// process of its own, over loopback TCP.
	WorkProcess bool
	// External runs every throughput round against a nats-server process
	// of its own too (NatsServer: empty, nats-server on PATH or in
	// $GOPATH/bin), on a store of its own, syncing as the embedded server.
	External   bool
	NatsServer string
	// RoundOn, ServerPID and Round make a child of an external round
	// (RunRound): the server's URL, its process (for the CPU figures) and
	// the round's number (for its job names).
	RoundOn   string
	ServerPID int
	Round     int
	// WorkerGOGC, when set, is the GC target the child of an external round
	// runs jetpool's measures at, as a `jetpool worker` process would (the
	// raw ones run at the process's own, as a plain program would).
	WorkerGOGC int
	// CPUProfile, when set, is the file of a CPU profile of the first
	// zero-latency work run (and, with External, CPUProfile+".external" of
	// the first on the external server: this process is then only the
	// client); HeapProfile of a heap profile taken after it.
	CPUProfile, HeapProfile string
	// Self is the jetpool binary the child processes run (`worker --job`,
	// `dispatch`, `status`): needed by the latency runs, WorkProcess and Big.
	Self string
	// Progress gets each row as it is measured, and the runs' notes; nil:
	// nothing is written.
	Progress io.Writer
}

func (o Options) withDefaults() Options {
	o.Records = cmp.Or(o.Records, RecordsDefault)
	o.Size = cmp.Or(o.Size, SizeDefault)
	o.Concurrency = cmp.Or(o.Concurrency, ConcurrencyDefault)
	o.LatencyRecords = max(cmp.Or(o.LatencyRecords, LatencyRecordsDefault), 1)
	o.Repeat = max(o.Repeat, 1)
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// Row is one measure: its name, its value (a rate, a count or a time) and a
// note (ratios to the raw engine, CPU).
type Row struct{ Name, Value, Note string }

// WriteTable writes rows as a Markdown table, as the README quotes it.
func WriteTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| measure | value | note |")
	fmt.Fprintln(w, "|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s |\n", r.Name, r.Value, r.Note)
	}
}

// harness is one bench run: its embedded server (and its dispatcher), the
// external server of the throughput rounds (Options.External), and the rows
// measured so far.
type harness struct {
	o    Options
	cfg  broker.Config
	out  io.Writer // o.Progress
	emb  *server
	log  zerolog.Logger
	dir  string
	cli  string // the nats CLI, or "" (nats.go's loops instead)
	rows []Row
}

// Run starts an embedded server on a store of its own (cfg is the process
// configuration: its fsync policy, unless o.Sync says otherwise), runs every
// measure o asks for and returns their rows.
func Run(ctx context.Context, cfg broker.Config, o Options) ([]Row, error) {
	o = o.withDefaults()
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "jetpool-bench-*"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	cfg.NATSURL = ""
	cfg.DataDir = filepath.Join(dir, "store")
	if o.Sync != "" {
		cfg.SyncInterval = o.Sync
	}
	cfg.LogLevel = "error"
	log := cfg.Logger()
	b, err := broker.StartEmbedded(ctx, cfg, log, broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		return nil, err
	}
	emb := &server{b: b, d: &dispatcher.Dispatcher{B: b, Log: log}, url: b.Server().ClientURL()}
	h := &harness{o: o, cfg: cfg, out: o.Progress, emb: emb, log: log, dir: dir}
	fmt.Fprintf(h.out, "jetpool bench: %d records of %d B, %s, %d CPUs, fsync %s, GOGC %d\n",
		o.Records, o.Size, runtime.Version(), runtime.NumCPU(), cfg.SyncInterval, gcPercent())
	measure := h.throughput
	if o.Pairs > 0 {
		measure = h.pairs
	}
	if err := measure(ctx); err != nil {
		return nil, err
	}
	for _, c := range o.LatencyConcurrency {
		if err := h.latency(ctx, c); err != nil {
			return nil, err
		}
	}
	if o.RetryRecords > 0 {
		if err := h.retryOverhead(ctx); err != nil {
			return nil, err
		}
	}
	if o.Big > 0 {
		if err := h.bigJob(ctx); err != nil {
			return nil, err
		}
	}
	return h.rows, nil
}

// add records a row and prints it as it is measured.
func (h *harness) add(name, value, note string) {
	h.rows = append(h.rows, Row{name, value, note})
	fmt.Fprintf(h.out, "  %-52s %-22s %s\n", name, value, note)
}

// gcPercent is the process's GC target now (GOGC), read without setting it.
func gcPercent() int {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	return int(s[0].Value.Uint64())
}
