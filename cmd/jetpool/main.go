// Command jetpool runs batch jobs of model calls on a pool of workers fed by
// NATS JetStream. See `jetpool help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/profile"
	"github.com/jetpool/jetpool/tracing"
)

// Exit codes, one meaning each (docs/reference.md, `jetpool help`), so a
// script can tell a failed job from a typo from a server that is down.
const (
	exitOK          = 0
	exitJobFailed   = 1 // a raise action failed the job, or the command failed otherwise
	exitUsage       = 2 // usage, configuration or input error: nothing was done
	exitUnavailable = 3 // NATS or JetStream unreachable or not ready
	// exitFailedRecords: the job completed, and some records failed
	// (return_last); --allow-failed makes that 0. A CI step that runs a job
	// fails when records did, as make and test runners do.
	exitFailedRecords = 4
	// exitCancelled: the job was cancelled (jetpool job cancel) while run or
	// retry waited for it; its queued records ended cancelled.
	exitCancelled = 5
	exitInterrupt = 130 // SIGINT or SIGTERM (128 + SIGINT, as shells report it)
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
	{"job", "delete a job, or purge finished jobs older than the retention", cmdJob},
	{"validate", "check a workflow and print each action's retry budget", cmdValidate},
	{"tenant", "show or set the tenant's budget: a cap on all its jobs' spend together", cmdTenant},
	{"limits", "show or reset the providers' shared rate-limit state (cooldowns, circuits, windows)", cmdLimits},
	{"server", "run the embedded NATS server on its own", cmdServer},
	{"ui", "serve the web dashboard: jobs, records, dead letters, providers", cmdUI},
	{"bench", "measure jetpool side by side with the raw JetStream engine", cmdBench},
	{"help", "show help: of jetpool, or of one command (help COMMAND [SUBCOMMAND])", cmdHelp},
	{"version", "print jetpool's version, commit and Go version", cmdVersion},
	{"completion", "print a shell completion script: completion bash|zsh|fish", cmdCompletion},
}

const usageHead = `jetpool runs batch jobs of model calls on workers fed by NATS JetStream.

Usage: jetpool COMMAND [flags]

Commands:
`

// usageEnv lists every variable of docs/reference.md "Environment"
// (TestHelpMatchesReadme keeps the two the same).
const usageEnv = `
Environment (process configuration):
  JETPOOL_NATS_URL       NATS server or cluster; unset: an embedded server under JETPOOL_DATA_DIR
  JETPOOL_DATA_DIR       embedded server's store (default .jetpool)
  JETPOOL_NATS_CREDS, JETPOOL_NATS_NKEY, JETPOOL_NATS_USER, JETPOOL_NATS_PASSWORD, JETPOOL_NATS_TOKEN
                         NATS auth
  JETPOOL_NATS_TLS_CERT, JETPOOL_NATS_TLS_KEY, JETPOOL_NATS_TLS_CA
                         TLS with client certificates
  JETPOOL_REPLICAS       replicas of every stream and bucket (default 1; 3 on a cluster)
  JETPOOL_CONCURRENCY    concurrent model calls per worker process (default 64)
  JETPOOL_SYNC_INTERVAL  embedded server fsync: "always" or a duration (default 1s)
  JETPOOL_BATCH_WRITES   one fsync for many records: dispatch and results in atomic
                         batches, acked work purged in bulk: auto (the embedded
                         server with JETPOOL_SYNC_INTERVAL=always), on, off
  JETPOOL_ACK_WAIT       work consumer AckWait (default 30s)
  JETPOOL_MAX_ACK_PENDING  per job consumer (default 20000)
  JETPOOL_DEDUPE_WINDOW  Nats-Msg-Id window of the work and DLQ streams (default 2h)
  JETPOOL_LOG_LEVEL      zerolog level (default info)
  JETPOOL_LOG_FORMAT     json or console (default json; console on a terminal)
  JETPOOL_METRICS_ADDR   jetpool worker serves /metrics, /healthz, /readyz here
  JETPOOL_KEY_HOSTS      where a worker may send each key: SOURCE=HOST[,HOST...] (presets' keys to their hosts)
  JETPOOL_KEYLESS_HOSTS  hosts a provider without a key may call (default loopback)
  JETPOOL_WORKER_NAME    the worker's name in dead letters and status (default host-pid)
  JETPOOL_UI_TOKEN       the dashboard's token: required off loopback (jetpool ui, --ui)
  JETPOOL_JOB_RETENTION  a finished job is deleted this long after it finished (default 720h; 0 keeps them)
  JETPOOL_CONSUMER_GRACE a finished job's work consumer goes this long after it finished (default 1h)
  JETPOOL_RESULTS_MAX_BYTES, JETPOOL_DLQ_MAX_BYTES
                         caps of the results and DLQ streams (default none): new messages are refused, old kept
  JETPOOL_COMPRESSION    none (default) or s2: compression of the results and DLQ streams
  JETPOOL_PRICES         a price file in LiteLLM's format for every workflow loaded (its prices: wins)
  JETPOOL_CPUPROFILE, JETPOOL_MEMPROFILE
                         write a CPU profile of the command / a heap profile of a stopping worker
                         (of run and retry: when every record has its result)
  JETPOOL_TRACE_CONTENT  true: prompts and answers on the model call spans (default off)
  OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_TRACES_EXPORTER, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ...
                         OpenTelemetry traces of run, dispatch, worker and retry over OTLP/HTTP:
                         off unless an endpoint or OTEL_TRACES_EXPORTER=otlp is set (docs/tracing.md)
  Besides the standard OTEL_ variables only JETPOOL_ names are read: NATS_URL (the nats CLI's)
  and other bare names are ignored.
`

const usageTail = `
Exit codes:
  0    done: the job completed and every record is ok (or --allow-failed)
  1    a raise action failed the job, or the command failed
  2    usage, configuration or input error: nothing was done
  3    NATS or JetStream unreachable or not ready
  4    the job completed with failed records (run, retry; --allow-failed makes it 0)
  5    the job was cancelled (jetpool job cancel) while run or retry waited for it
  130  interrupted (SIGINT or SIGTERM); run the same command again to resume

Run 'jetpool help COMMAND' (or 'jetpool COMMAND -h') for a command's flags.
`

// usage is `jetpool help`: the commands, the environment, the exit codes.
func usage(w io.Writer, cmds []command) {
	shortUsage(w, cmds)
	fmt.Fprint(w, usageEnv)
	fmt.Fprint(w, usageTail)
}

// shortUsage is what `jetpool` alone prints (on stderr, exit 2).
func shortUsage(w io.Writer, cmds []command) {
	fmt.Fprint(w, usageHead)
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
}

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// env is what every command shares.
type env struct {
	stdout, stderr io.Writer
	log            zerolog.Logger
	cfg            broker.Config

	// commands is the command table (help and completion walk it; a
	// reference to the table itself from a command would be an
	// initialization cycle).
	commands []command
	// describe, when set, asks the command for its flags and subcommands
	// instead of running it (completion, help): see cmdSpec.
	describe *cmdSpec
	// abort ends the command's context with a cause (a store lost under it:
	// connect); nil in tests that build an env by hand.
	abort context.CancelCauseFunc
}

// client is the Client of the commands over b, a broker connect made.
func (e *env) client(b *broker.Broker) *jp.Client {
	return jp.NewClient(b, &jp.Config{Broker: e.cfg, Concurrency: e.cfg.Concurrency, Logger: &e.log})
}

func lookup(cmds []command, name string) *command {
	for i := range cmds {
		if cmds[i].name == name {
			return &cmds[i]
		}
	}
	return nil
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		shortUsage(stderr, commands)
		fmt.Fprintln(stderr, "\nRun 'jetpool help' for the environment and exit codes, 'jetpool help COMMAND' for a command.")
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	cmd := lookup(commands, name)
	if cmd == nil {
		fmt.Fprintf(stderr, "jetpool: unknown command %q\nRun 'jetpool help' for the commands.\n", name)
		return exitUsage
	}
	cfg, err := broker.LoadConfig()
	if err != nil && !needsNoConfig(cmd.name, args[1:]) {
		fmt.Fprintf(stderr, "jetpool: configuration: %v\n", err)
		return exitUsage
	}
	e := &env{stdout: stdout, stderr: stderr, cfg: cfg, log: cfg.Logger(), commands: commands}
	if path := os.Getenv("JETPOOL_CPUPROFILE"); path != "" {
		stop, err := profile.StartCPU(path)
		if err != nil {
			fmt.Fprintf(stderr, "jetpool: JETPOOL_CPUPROFILE: %v\n", err)
			return exitUsage
		}
		defer stop()
	}
	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, abort := context.WithCancelCause(sigCtx)
	defer abort(nil)
	e.abort = abort
	if traced(cmd.name) {
		shutdown, err := tracing.Setup(ctx, cmd.name)
		if err != nil {
			fmt.Fprintf(stderr, "jetpool: tracing: %v\n", err)
			return exitUsage
		}
		defer flushTraces(shutdown, stderr)
	}
	err = cmd.run(ctx, e, args[1:])
	if cause := context.Cause(ctx); errors.Is(cause, broker.ErrStoreLost) {
		// Whatever the command made of its context ending, this is why.
		err = &exitError{code: exitJobFailed, err: cause}
	}
	code := exitCode(ctx, err)
	if code != exitOK {
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(stderr, "jetpool %s: %s\n", cmd.name, msg)
		}
		if code == exitUsage && cmd.name != "help" {
			fmt.Fprintf(stderr, "Run 'jetpool help %s' for its usage.\n", cmd.name)
		}
	}
	return code
}

// traced says which commands export traces when OTEL_* asks for them:
// those that dispatch, run or replay records (docs/tracing.md).
func traced(name string) bool {
	switch name {
	case "run", "dispatch", "worker", "retry":
		return true
	}
	return false
}

// flushTraces sends the spans still buffered, for at most a few seconds:
// an unreachable collector does not hold the exit.
func flushTraces(shutdown func(context.Context) error, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		fmt.Fprintf(stderr, "jetpool: tracing: %v\n", err)
	}
}

// needsNoConfig: help, version and completion (and any -h) work whatever
// the environment holds.
func needsNoConfig(name string, args []string) bool {
	switch name {
	case "help", "version", "completion":
		return true
	}
	for _, a := range args {
		switch a {
		case "-h", "-help", "--help":
			return true
		case "--":
			return false
		}
	}
	return false
}

// exitCode is the exit code of a command that returned err.
func exitCode(ctx context.Context, err error) int {
	var xe *exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &xe):
		return xe.code
	case errors.Is(err, jp.ErrInvalid):
		return exitUsage
	case ctx.Err() != nil:
		return exitInterrupt
	case unavailable(err):
		return exitUnavailable
	}
	return exitJobFailed
}

// unavailable reports whether err says the NATS server (or its JetStream)
// could not be reached or did not answer: exit 3, something to wait for or
// fix in the deployment, not in the job.
func unavailable(err error) bool {
	for _, target := range []error{
		nats.ErrNoServers, nats.ErrConnectionClosed, nats.ErrTimeout, nats.ErrNoResponders,
		nats.ErrConnectionReconnecting, nats.ErrDisconnected,
		jetstream.ErrJetStreamNotEnabled, jetstream.ErrJetStreamNotEnabledForAccount,
		broker.ErrDataDirBusy, syscall.ECONNREFUSED,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == jsClusterNotAvailable
}

// jsClusterNotAvailable is nats-server's JSClusterNotAvailErr ("JetStream
// system temporarily unavailable": no meta leader yet), which nats.go
// names no constant for.
const jsClusterNotAvailable jetstream.ErrorCode = 10008

// newFlags makes a command's flag set. `-h` prints the command's help on
// stdout (parse); a usage error prints the short usage line on stderr
// (fs.Usage, which commands also call for a wrong argument).
func newFlags(e *env, name, args string, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	h := &flagHelp{Writer: e.stderr, stdout: e.stdout, name: name, args: args, summary: summary}
	fs.SetOutput(h)
	fs.Usage = func() { fmt.Fprintf(h.Writer, "Usage: jetpool %s %s\n", name, args) }
	if e.describe != nil {
		e.describe.flags = fs
	}
	return fs
}

// flagHelp is a flag set's output (stderr) and what its help says.
type flagHelp struct {
	io.Writer
	stdout              io.Writer
	name, args, summary string
}

// printHelp writes the command's whole help: usage, summary and every flag,
// spelled --name as the docs do (the flag package takes -name too).
func (h *flagHelp) printHelp(fs *flag.FlagSet) {
	w := h.stdout
	fmt.Fprintf(w, "Usage: jetpool %s %s\n\n%s\n", h.name, h.args, h.summary)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		if n == 0 {
			fmt.Fprint(w, "\nFlags:\n")
		}
		n++
		kind, text := flag.UnquoteUsage(f)
		fmt.Fprintf(w, "  --%s", f.Name)
		if kind != "" {
			fmt.Fprintf(w, " %s", kind)
		}
		fmt.Fprintf(w, "\n    \t%s", strings.ReplaceAll(text, "\n", "\n    \t"))
		switch f.DefValue {
		case "", "0", "false", "0s":
		default:
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}

// parse parses flags interspersed with positional arguments. -h prints the
// command's help on stdout and returns flag.ErrHelp (exit 0); a bad flag
// is a usage error (exit 2) naming it.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	h, _ := fs.Output().(*flagHelp)
	short := fs.Usage
	fs.Usage = func() {} // the flag package calls it for -h and for errors alike; they differ here
	defer func() { fs.Usage = short }()
	out := fs.Output()
	fs.SetOutput(io.Discard) // the error goes out once, as jetpool CMD: error
	defer fs.SetOutput(out)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if h != nil {
					h.printHelp(fs)
				}
				return nil, err
			}
			return nil, &exitError{code: exitUsage, err: err}
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

// errDescribe is what connect returns in describe mode: a command asked
// for its flags must not reach any server.
var errDescribe = errors.New("describe mode: not connecting")

// connect connects to NATS (or starts the embedded server) and ensures
// jetpool's streams. A server that cannot be reached or whose JetStream is
// not ready exits 3; credentials it refuses are configuration (exit 2).
func connect(ctx context.Context, e *env) (*broker.Broker, error) {
	if e.describe != nil {
		return nil, errDescribe
	}
	b, err := broker.Connect(ctx, e.cfg, e.log)
	if err != nil {
		return nil, connectErr(err)
	}
	if err := b.Ensure(ctx); err != nil {
		b.Close()
		return nil, connectErr(err)
	}
	if lost := b.StoreLost(); lost != nil && e.abort != nil {
		// A data dir removed under the process: the command ends, saying
		// so, instead of waiting on a store that is gone.
		go func() {
			select {
			case <-lost:
				e.abort(b.StoreErr())
			case <-ctx.Done():
			}
		}()
	}
	return b, nil
}

func connectErr(err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, nats.ErrAuthorization), errors.Is(err, nats.ErrAuthExpired), errors.Is(err, nats.ErrAuthRevoked),
		errors.Is(err, nats.ErrAccountAuthExpired), errors.Is(err, nats.ErrNkeysNotSupported),
		// A TLS handshake that failed (nats.go wraps it in ErrTLS), or a
		// client certificate the server refused after it (TLS 1.3): the
		// server's alert, which crypto/tls reports as a "remote error",
		// or the connection closed (ErrTLS again).
		errors.Is(err, nats.ErrTLS), errors.As(err, &op) && op.Op == "remote error":
		return &exitError{code: exitUsage, err: fmt.Errorf("%w (check the JETPOOL_NATS_* credentials)", err)}
	case errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, nats.ErrNoResponders):
		err = fmt.Errorf("%w: no JetStream answers on that server (is JetStream enabled?)", err)
	}
	var api *jetstream.APIError
	if errors.As(err, &api) && !unavailable(err) {
		return err // the server answered and refused: not a reachability problem
	}
	return &exitError{code: exitUnavailable, err: err}
}

// serveLocal lets other local processes use the embedded server b runs, if
// it runs one: `jetpool status`, `dlq` and `results` beside a running `run`,
// `retry` or `worker` on the same data dir. It writes the server file that
// `jetpool server` writes (Close removes it); the server listens on
// loopback only, on a port of its own.
func serveLocal(b *broker.Broker) error {
	if b.Server() == nil {
		return nil
	}
	return b.WriteServerFile(b.Server().ClientURL())
}

// WorkerGOGC is the garbage collector's target a worker process runs with
// when $GOGC is not set and the process does not host the embedded server.
// A worker's live heap is small (tens of MiB) and it allocates a few KiB per
// record, so at Go's default (100) it collects several times a second, and
// each collection also shrinks the stacks of its idle handler goroutines,
// which the next record grows again: a large share of a busy worker's
// CPU (worker profile). At 400 a worker process does more records a
// second for a few tens of MiB more, flat in the job's size
// (docs/performance.md).
const WorkerGOGC = 400

func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	if strings.HasSuffix(word, "y") {
		return fmt.Sprintf("%d %sies", n, word[:len(word)-1])
	}
	return fmt.Sprintf("%d %ss", n, word)
}
