package main

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/jetpool/jetpool/internal/bench"
)

func cmdBench(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "bench", "[flags]",
		"Measure jetpool side by side with the raw JetStream engine on one embedded server (same process, same store):\n"+
			"dispatch vs `nats bench js pub async --dedup`, end to end vs `nats bench js consume` (on its own stream,\n"+
			"and on a work-queue stream, where each ack removes its message, as in jetpool's) and vs a raw floor\n"+
			"(bare nats.go doing jetpool's storage work: work-queue pull, result publish, ack), a raw work loop (the\n"+
			"same at the pool's concurrency, each goroutine waiting for its result's store; and again with jetpool's\n"+
			"work on each record: envelope, template, call, result JSON, on jetpool's messages: a dispatched\n"+
			"record's headers, results on a worker's subjects) and a raw inline run (the floor plus that work, on\n"+
			"one goroutine), with the CPU each takes a message and the heap it allocates (with --work-process,\n"+
			"jetpool's work in a worker process of its own too, over loopback TCP; with --external, every\n"+
			"throughput round again against a nats-server process of its own, over loopback TCP, the server's\n"+
			"part of each row's CPU named),\n"+
			"efficiency under 100 ms of simulated latency (adaptive concurrency; limits: {adaptive: false}; and\n"+
			"the pool in a worker process of its own, as deployed), retry overhead with 10% transient faults, and\n"+
			"(with --big N) peak RSS of a dispatcher and a worker process on an N-record job and the time\n"+
			"`jetpool status` takes on it. With --pairs N, instead of the throughput rounds, only jetpool's zero-latency\n"+
			"work against the program that does the same work without jetpool (the raw work loop with jetpool's\n"+
			"record work; and that loop again storing jetpool's whole result: its accounting, the same bytes),\n"+
			"N times back to back, the order turned each time: each pair's ratios are of runs seconds apart.\n"+
			"Against an external server jetpool's measures run at GOGC 400, as a worker process\n"+
			"does, and the raw ones at Go's default (the rows say so); set GOGC (GOGC=100) to run both under\n"+
			"the same collector.\n"+
			"JETPOOL_MEMPROFILE=FILE writes a heap profile after jetpool's zero-latency work (FILE); with --pairs,\n"+
			"before it too (FILE.before) and around the loop's (FILE.loop.before, FILE.loop).")
	var o bench.Options
	fs.IntVar(&o.Records, "records", bench.RecordsDefault, "records (and raw messages) for the throughput runs")
	fs.IntVar(&o.Size, "size", bench.SizeDefault, "record size in bytes")
	fs.IntVar(&o.Concurrency, "concurrency", bench.ConcurrencyDefault, "worker concurrency for the zero-latency end-to-end run")
	latencies := fs.String("latency-concurrency", "10,100,1000", "concurrencies for the 100 ms latency runs (empty: skip)")
	fs.IntVar(&o.LatencyRecords, "latency-records", bench.LatencyRecordsDefault, "records per concurrency slot in the latency runs (50: 5 s of ideal work, ramp-up included)")
	fs.IntVar(&o.Big, "big", 0, "records of the memory run (e.g. 1000000; 0: skip)")
	fs.IntVar(&o.RetryRecords, "retry-records", bench.RetryRecordsDefault, "records of the retry-overhead run (0: skip)")
	fs.StringVar(&o.NatsCLI, "nats", "", "path of the nats CLI for the raw baselines (default: nats on PATH or in $GOPATH/bin)")
	fs.StringVar(&o.Sync, "sync", "", "embedded server fsync policy for the run (default: $JETPOOL_SYNC_INTERVAL)")
	fs.StringVar(&o.Dir, "dir", "", "work dir (default: a temp dir, removed after)")
	fs.IntVar(&o.Repeat, "repeat", 1, "rounds of the throughput measures (raw engine, then jetpool, in turn) and of each latency run: figures are medians, with the range")
	fs.IntVar(&o.Pairs, "pairs", 0, "instead of the throughput rounds, N pairs of the raw work loop with jetpool's record work (storing its answer, and again storing jetpool's whole result) and jetpool's zero-latency work, back to back, the order turned each time: jetpool's share of each loop pair by pair (with --external, on the external server too)")
	fs.BoolVar(&o.External, "external", false, "also run each throughput round against a nats-server process of its own (a store of its own, synced as --sync), over loopback TCP, as users deploy one")
	fs.StringVar(&o.NatsServer, "nats-server", "", "path of the nats-server binary for --external (default: nats-server on PATH or in $GOPATH/bin)")
	fs.StringVar(&o.RoundOn, "round-on", "", "run one throughput round against the server at this URL and print its figures as JSON (how --external runs each of its rounds, in a process of its own)")
	fs.IntVar(&o.ServerPID, "server-pid", 0, "with --round-on: the server's process, whose CPU counts in the figures")
	fs.IntVar(&o.Round, "round", 0, "with --round-on: the round's number (its job names)")
	fs.BoolVar(&o.WorkProcess, "work-process", false, "also run the zero-latency work with the pool in a worker process of its own, over loopback TCP as the nats CLI connects (off by default: its jobs add to the server's state, which the later rows run on)")
	fs.StringVar(&o.CPUProfile, "cpuprofile-work", "", "write a CPU profile of the zero-latency work run (pool and embedded server) to this file; with --external, that of the run on the external server (the pool alone) to FILE.external")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	for _, cs := range strings.Split(*latencies, ",") {
		if cs = strings.TrimSpace(cs); cs == "" {
			continue
		}
		c, err := strconv.Atoi(cs)
		if err != nil || c <= 0 {
			return usageErr("--latency-concurrency: %q is not a positive number", cs)
		}
		o.LatencyConcurrency = append(o.LatencyConcurrency, c)
	}
	if o.Self, err = os.Executable(); err != nil {
		return err
	}
	o.HeapProfile = os.Getenv("JETPOOL_MEMPROFILE")
	o.Progress = e.stderr
	if _, set := os.LookupEnv("GOGC"); !set {
		o.WorkerGOGC = WorkerGOGC
	}
	if o.RoundOn != "" {
		out, err := bench.RunRound(ctx, e.cfg, o)
		if err != nil {
			return err
		}
		_, err = e.stdout.Write(append(out, '\n'))
		return err
	}
	rows, err := bench.Run(ctx, e.cfg, o)
	if err != nil {
		return err
	}
	bench.WriteTable(e.stdout, rows)
	return nil
}
