// Command jetpool runs batch jobs of model calls on a pool of workers fed by
// NATS JetStream. See `jetpool help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
)

// Exit codes.
const (
	exitOK        = 0
	exitJobFailed = 1
	exitUsage     = 2
	exitInterrupt = 130
)

// exitError carries an exit code with its message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

func configErr(err error) error { return &exitError{code: exitUsage, err: err} }

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
}

var commands = []command{
	{"run", "dispatch, work and wait for a job on the embedded (or external) NATS; write results", cmdRun},
	{"dispatch", "publish a job to NATS and print its id", cmdDispatch},
	{"worker", "run a long-lived worker; scale by running more", cmdWorker},
	{"status", "show a job's (or every job's) progress", cmdStatus},
	{"results", "export a job's results as JSONL", cmdResults},
	{"dlq", "inspect dead letters: list, show, purge", cmdDLQ},
	{"retry", "replay dead letters into the work stream", cmdRetry},
	{"validate", "check a workflow and print each action's retry budget", cmdValidate},
	{"limits", "show or reset the providers' shared rate-limit state (cooldowns, circuits, windows)", cmdLimits},
	{"server", "run the embedded NATS server on its own", cmdServer},
	{"bench", "measure jetpool side by side with the raw JetStream engine", cmdBench},
}

const usageHead = `jetpool runs batch jobs of model calls on workers fed by NATS JetStream.

Usage: jetpool COMMAND [flags]

Commands:
`

const usageTail = `
Environment (process configuration):
  JETPOOL_NATS_URL       NATS server or cluster; unset: an embedded server under JETPOOL_DATA_DIR
  JETPOOL_DATA_DIR       embedded server's store (default .jetpool)
  JETPOOL_NATS_CREDS, JETPOOL_NATS_NKEY, JETPOOL_NATS_USER/JETPOOL_NATS_PASSWORD, JETPOOL_NATS_TOKEN,
  JETPOOL_NATS_TLS_CERT/_KEY/_CA
  JETPOOL_REPLICAS       replicas of every stream and bucket (default 1; 3 on a cluster)
  JETPOOL_CONCURRENCY    worker concurrency (default 64)
  JETPOOL_SYNC_INTERVAL  embedded server fsync: "always" or a duration (default 1s)
  JETPOOL_ACK_WAIT       work consumer AckWait (default 30s)
  JETPOOL_LOG_LEVEL, JETPOOL_LOG_FORMAT (json|console), JETPOOL_METRICS_ADDR

Exit codes: 0 job completed, 1 a raise action failed the job, 2 usage or configuration error.
Run 'jetpool COMMAND -h' for a command's flags.
`

func usage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, usageTail)
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// env is what every command shares.
type env struct {
	stdout, stderr io.Writer
	log            zerolog.Logger
	cfg            broker.Config
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == args[0] {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "jetpool: unknown command %q\n\n", args[0])
		usage(stderr)
		return exitUsage
	}
	cfg, err := broker.LoadConfig()
	if err != nil {
		fmt.Fprintf(stderr, "jetpool: configuration: %v\n", err)
		return exitUsage
	}
	e := &env{stdout: stdout, stderr: stderr, cfg: cfg, log: cfg.Logger()}
	if path := os.Getenv("JETPOOL_CPUPROFILE"); path != "" {
		stop, err := startCPUProfile(path)
		if err != nil {
			fmt.Fprintf(stderr, "jetpool: JETPOOL_CPUPROFILE: %v\n", err)
			return exitUsage
		}
		defer stop()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = cmd.run(ctx, e, args[1:])
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var xe *exitError
	if errors.As(err, &xe) {
		if xe.err != nil && xe.err.Error() != "" {
			fmt.Fprintf(stderr, "jetpool %s: %v\n", cmd.name, xe.err)
		}
		return xe.code
	}
	fmt.Fprintf(stderr, "jetpool %s: %v\n", cmd.name, err)
	if ctx.Err() != nil {
		return exitInterrupt
	}
	return exitJobFailed
}

// newFlags makes a command's flag set; errors are printed by parse.
func newFlags(e *env, name, args string, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: jetpool %s %s\n\n%s\n\nFlags:\n", name, args, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags interspersed with positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &exitError{code: exitUsage, err: errors.New("")}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func connect(ctx context.Context, e *env) (*broker.Broker, error) {
	b, err := broker.Connect(ctx, e.cfg, e.log)
	if err != nil {
		return nil, err
	}
	if err := b.Ensure(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// WorkerGOGC is the garbage collector's target a worker process runs with
// when $GOGC is not set and the process does not host the embedded server.
// A worker's live heap is small (tens of MiB) and it allocates a few KiB per
// record, so at Go's default (100) it collects several times a second, and
// each collection also shrinks the stacks of its idle handler goroutines,
// which the next record grows again: about a quarter of a worker's CPU at
// 10k records/s (worker profile). At 400 a worker process does 10–28 % more
// records/s and peaks at about 60–75 MiB instead of 40, flat in the job's
// size.
const WorkerGOGC = 400

// gcPercent is the process's GC target now (GOGC), read without setting it.
func gcPercent() int {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	return int(s[0].Value.Uint64())
}

// tuneGC applies WorkerGOGC unless $GOGC says otherwise or b's server runs
// in this process. A process that hosts the embedded server keeps Go's
// default target: its live heap holds the server's state, which grows with
// the job (the dedupe window's message ids and the results stream's subject
// index: a few hundred bytes a record), so a higher target multiplies a
// growing base: `jetpool run` of 1M records peaked at 802 MiB at 100 and
// 1,180 MiB at 200, for no measurable speed-up at that size (6–9 % at 100k
// records).
func tuneGC(b *broker.Broker) {
	if _, set := os.LookupEnv("GOGC"); !set && b.Server() == nil {
		debug.SetGCPercent(WorkerGOGC)
	}
}

// startCPUProfile writes a pprof CPU profile of the command to path.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes a heap profile to $JETPOOL_MEMPROFILE, if set.
func writeHeapProfile() {
	path := os.Getenv("JETPOOL_MEMPROFILE")
	if path == "" {
		return
	}
	if f, err := os.Create(path); err == nil {
		runtime.GC()
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
}

func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	if strings.HasSuffix(word, "y") {
		return fmt.Sprintf("%d %sies", n, word[:len(word)-1])
	}
	return fmt.Sprintf("%d %ss", n, word)
}
