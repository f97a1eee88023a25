package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"golang.org/x/term"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/export"
	"github.com/jetpool/jetpool/internal/profile"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

func cmdValidate(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "validate", "WORKFLOW [--input FILE]", "Check a workflow and print, per action, its retry layers and worst case.\n"+
		"With --input, also check the input against it as run does before it publishes: the fields the prompts\n"+
		"read, bad lines, ids used twice. Nothing is published, no provider is called.")
	var f runFlags
	fs.StringVar(&f.input, "input", "", "input records to check against the workflow")
	fs.StringVar(&f.idField, "id-field", "", "record field holding the record id")
	fs.StringVar(&f.format, "format", "", "input format: jsonl, csv or parquet (default: from the extension)")
	f.duplicatesFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("want exactly one WORKFLOW argument")
	}
	wf, err := workflow.Load(pos[0])
	if err != nil {
		return configErr(err)
	}
	if f.input == "" {
		if err := wf.CheckRefs(nil); err != nil {
			return configErr(err)
		}
		for _, s := range wf.Suspects() {
			fmt.Fprintf(e.stderr, "warning: %v (--input FILE checks it against the records)\n", s)
		}
	} else {
		f.noPreflight = true
		if _, err := f.prepare(ctx, wf, nil); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "%s: %s, every field the prompts read is there\n", f.input, plural(f.checked.Records, "record"))
	}
	for _, w := range slices.Concat(wf.ParamWarnings(), wf.BudgetWarnings()) {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	wf.Describe(e.stdout)
	return nil
}

func cmdDispatch(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dispatch", "WORKFLOW --input FILE [--job ID | --new-job] [--at TIME | --after DUR]", "Publish a job to NATS (JETPOOL_NATS_URL) and print its id; workers run it.\n"+
		"An edited input goes, as with run, to the job that runs this workflow and has records of the input: only its\n"+
		"new and changed records are published (--new-job: a new job). --at/--after schedule a new job's start: it is\n"+
		"stored now and served from then on, across restarts ('jetpool status' shows when; 'jetpool job resume' starts it now).")
	var f runFlags
	fs.StringVar(&f.input, "input", "", "input records: JSONL, CSV with a header row, or Parquet (one record a row)")
	fs.StringVar(&f.job, "job", "", "job id (default: derived from the workflow and the input, or the job that runs this workflow\nand has records of the input); an existing job with a changed input gets only the records that are new or changed")
	fs.StringVar(&f.idField, "id-field", "", "record field holding the record id (default: \"id\" when a record has it, else a hash of the record)")
	fs.StringVar(&f.format, "format", "", "input format: jsonl, csv or parquet (default: from the extension)")
	fs.BoolVar(&f.skipBad, "skip-bad", false, "dead-letter malformed lines (bad_input) instead of refusing the file")
	fs.BoolVar(&f.noPreflight, "no-preflight", false, "skip the providers' credential check")
	maxCostFlag(fs, &f.maxCost)
	f.duplicatesFlag(fs)
	f.newJobFlag(fs)
	f.priorityFlag(fs)
	at := fs.String("at", "", "start the new job at this time (RFC 3339, a local '2026-12-07 18:00', or '18:00' today)")
	after := fs.Duration("after", 0, "start the new job this long from now")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || f.input == "" {
		fs.Usage()
		return usageErr("want WORKFLOW and --input FILE")
	}
	startAt, err := whenFlag(*at, *after, "--at", "--after", time.Now())
	if err != nil {
		return err
	}
	if err := checkPriority("--priority", f.priority); err != nil {
		return err
	}
	wf, err := loadWorkflow(pos[0])
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	c := e.client(b)
	if err := f.matchJob(ctx, e, c, wf, pos[0], "dispatch"); err != nil { // match.go
		return err
	}
	opts, err := f.prepare(ctx, wf, c)
	if err != nil {
		return err
	}
	if b.Embedded() {
		fmt.Fprintln(e.stderr, "note: JETPOOL_NATS_URL is unset: the job goes to the embedded store in "+e.cfg.DataDir+"; `jetpool worker` with the same data dir (or `jetpool run`) will work it")
	}
	old, err := c.ExistingJob(ctx, wf, f.job, f.input, f.checked, pos[0])
	if err != nil {
		return err
	}
	if old != nil && !startAt.IsZero() {
		fmt.Fprintf(e.stderr, "note: job %s exists: --at/--after schedule only a new job ('jetpool job pause %s --until' pauses it)\n", old.ID, old.ID)
	}
	if old != nil {
		// An input fix: only the records that are new or changed go.
		if err := f.refresh(ctx, e, c, wf, opts, old, pos[0], "dispatch"); err != nil { // match.go
			return err
		}
		fmt.Fprintln(e.stdout, old.ID)
		return nil
	}
	d := &dispatcher.Dispatcher{B: b, Log: e.log}
	opts.StartAt = startAt
	res, err := d.Dispatch(ctx, wf, opts)
	if err != nil {
		return jp.InputError(err)
	}
	if err := c.ApplyMaxCost(ctx, res.Job, f.maxCost); err != nil {
		return err
	}
	if !res.Job.StartAt.IsZero() && res.Job.StartAt.After(time.Now()) {
		fmt.Fprintf(e.stderr, "job %s starts at %s: nothing of it is served before\n", res.Job.ID, res.Job.StartAt.Local().Format(time.DateTime))
	}
	if res.Existing {
		fmt.Fprintf(e.stderr, "job %s was already dispatched; nothing published\n", res.Job.ID)
	} else {
		fmt.Fprintf(e.stderr, "%s published (%d already published, %d bad lines dead-lettered", plural(res.Published, "record"), res.Duplicates, res.BadLines)
		if res.Skipped > 0 {
			fmt.Fprintf(e.stderr, ", %d later uses of ids used before skipped", res.Skipped)
		}
		fmt.Fprintln(e.stderr, ")")
	}
	fmt.Fprintln(e.stdout, res.Job.ID)
	return nil
}

func cmdWorker(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "worker", "[--concurrency N]", "Run a worker: serve every running job until SIGTERM, then drain in-flight calls.\n"+
		"It serves only jobs it can: each provider's key present and bound to the provider's host (presets' keys to their\n"+
		"hosts, JETPOOL_KEY_HOSTS for others), keyless endpoints on JETPOOL_KEYLESS_HOSTS (loopback), never a JETPOOL_ variable;\n"+
		"a job it cannot serve it leaves to other workers and says why (log, `jetpool status`, /readyz).")
	conc := fs.Int("concurrency", 0, "concurrent model calls (default $JETPOOL_CONCURRENCY or 64)")
	drain := fs.Duration("drain", 30*time.Second, "on SIGTERM, how long in-flight calls may finish before they are handed back")
	jobs := fs.String("job", "", "serve only this job")
	dash := newUIFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := dash.check(); err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	n := *conc
	if n <= 0 {
		n = e.cfg.Concurrency
	}
	trust, err := provider.LoadTrust(os.LookupEnv)
	if err != nil {
		return configErr(err)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	defer tuneGC(ctx, b, n)()
	if err := serveLocal(b); err != nil {
		return err
	}
	m := newMetrics()
	var only []string
	if *jobs != "" {
		only = []string{*jobs}
	}
	pool := worker.New(b, worker.Config{Concurrency: n, Log: e.log, Jobs: only, Metrics: m, Trust: trust})
	m.unservable = pool.Unservable
	if err := pool.Start(ctx); err != nil {
		return err
	}
	catcher := &deadletter.Catcher{B: b, Log: e.log}
	if err := catcher.Start(ctx); err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(e, m, b)
	if err != nil {
		return configErr(err)
	}
	defer stopMetrics()
	stopUI, err := dash.serve(e, b)
	if err != nil {
		return err
	}
	defer stopUI()
	e.log.Info().Int("concurrency", n).Msg("worker started")
	<-ctx.Done()
	profile.WriteHeap(os.Getenv("JETPOOL_MEMPROFILE"))
	e.log.Info().Dur("drain", *drain).Msg("stopping: no new records; finishing in-flight calls")
	m.setReady(false)
	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	err = pool.Stop(sctx)
	catcher.Stop()
	if err != nil {
		e.log.Warn().Err(err).Msg("drain")
	}
	e.log.Info().Msg("worker stopped")
	return nil
}

func cmdResults(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "results", "JOB [--output FILE] [--format jsonl|csv|parquet] [--sorted] [--include-input [--input FILE]]",
		"Export a job's final results (one per record), as JSONL, CSV or Parquet.")
	out := fs.String("output", "", "write here instead of standard output")
	format := fs.String("format", "", "jsonl, csv or parquet (default: from --output's extension, else jsonl). CSV: one column per result field,\n"+
		"input.<field> per carried field; Parquet: the same columns typed, the output typed by the last action's expect: schema")
	sorted := fs.Bool("sorted", false, "in input order (an external sort over temp files: memory stays flat)")
	withInput := fs.Bool("include-input", false, "add each record as it was read (JSONL, Parquet: \"record\"; CSV: an input column); implies --sorted")
	input := fs.String("input", "", "with --include-input: the input file (default: the job's, as dispatched)")
	inFormat := fs.String("input-format", "", "with --include-input: jsonl, csv or parquet (default: from the extension)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("want exactly one JOB")
	}
	if *format == "" {
		*format = export.FormatOf(*out)
	}
	if *format != export.JSONL && *format != export.CSV && *format != export.Parquet {
		return usageErr("--format %q: want jsonl, csv or parquet", *format)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	job, _, err := b.GetJob(ctx, pos[0])
	if err != nil {
		return err
	}
	o := export.Options{Format: *format, Sorted: *sorted, InputFormat: *inFormat, SortChunk: sortChunkRecords}
	if enc, ok := job.WorkflowOf(job.Revision()); ok {
		if wf, err := workflow.Decode(enc); err == nil {
			o.Carry, o.Workflow = wf.Carry, wf
		}
	}
	if *withInput {
		o.Input = cmp.Or(*input, job.Input)
		if o.Input == "" {
			return usageErr("--include-input: the job records no input file; name it with --input FILE")
		}
		if _, err := os.Stat(o.Input); err != nil {
			return usageErr("--include-input: %v (name the input file with --input FILE)", err)
		}
	}
	if *out == "" {
		_, err := export.Write(ctx, b, job, e.stdout, o)
		return err
	}
	o.TmpDir = filepath.Dir(*out)
	n, err := export.ToFile(*out, func(w io.Writer) (export.Counts, error) { return export.Write(ctx, b, job, w, o) })
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d results (%d ok, %d failed) written to %s\n", n.Records, n.OK, n.Failed, *out)
	return nil
}

func cmdServer(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "server", "[--port N] [--http-port N] [--host ADDR]",
		"Run the embedded NATS server (JetStream, store in JETPOOL_DATA_DIR) for several local processes and the nats CLI.\n"+
			"Off loopback it requires auth: JETPOOL_NATS_TOKEN, or JETPOOL_NATS_USER and JETPOOL_NATS_PASSWORD, which clients then use too;\n"+
			"its monitoring port, which has no auth, stays on 127.0.0.1.")
	port := fs.Int("port", 4222, "client port")
	httpPort := fs.Int("http-port", 8222, "monitoring port (0: off)")
	host := fs.String("host", "127.0.0.1", "listen address (loopback by default, with auth only if JETPOOL_NATS_TOKEN or _USER/_PASSWORD is set; any other address requires them)")
	dash := newUIFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := dash.check(); err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	if e.cfg.NATSURL != "" {
		return usageErr("JETPOOL_NATS_URL is set: `jetpool server` runs the embedded server; unset it")
	}
	so, err := serverAuth(e.cfg, *host)
	if err != nil {
		return err
	}
	so.Port, so.HTTPPort = *port, *httpPort
	b, err := broker.StartEmbedded(ctx, e.cfg, e.log, so)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		return err
	}
	url := b.Server().ClientURL()
	if err := b.WriteServerFile(url); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "jetpool server listening on %s (store %s)\n", url, e.cfg.DataDir)
	fmt.Fprintf(e.stdout, "  export JETPOOL_NATS_URL=%s\n", url)
	if *httpPort > 0 {
		fmt.Fprintf(e.stdout, "  monitoring: http://%s\n", net.JoinHostPort(cmp.Or(so.HTTPHost, *host), strconv.Itoa(*httpPort)))
	}
	stopUI, err := dash.serve(e, b)
	if err != nil {
		return err
	}
	defer stopUI()
	select {
	case <-ctx.Done():
	case <-b.StoreLost():
		return b.StoreErr() // exit 1, naming the data dir
	}
	fmt.Fprintln(e.stdout, "jetpool server stopping")
	return nil
}

// serverAuth is the embedded server's listen address and auth. Off
// loopback a server without auth would let anyone who reaches the port
// read every job's records and workflow, and dispatch work that spends the
// workers' keys: it refuses to start without a token or a user and
// password, and keeps its monitoring port (no auth there) on loopback.
func serverAuth(cfg broker.Config, host string) (broker.ServerOptions, error) {
	so := broker.ServerOptions{Host: host, Token: cfg.NATSToken}
	if cfg.NATSUser != "" || cfg.NATSPassword != "" {
		if cfg.NATSUser == "" || cfg.NATSPassword == "" {
			return so, usageErr("set both JETPOOL_NATS_USER and JETPOOL_NATS_PASSWORD, or neither")
		}
		so.User, so.Password = cfg.NATSUser, cfg.NATSPassword
	}
	if so.Token != "" && so.User != "" {
		return so, usageErr("set JETPOOL_NATS_TOKEN or JETPOOL_NATS_USER/JETPOOL_NATS_PASSWORD, not both")
	}
	if isLoopback(host) {
		return so, nil
	}
	if so.Token == "" && so.User == "" {
		return so, usageErr("--host %s listens beyond this machine, and the server has no auth unless you give it one: "+
			"set JETPOOL_NATS_TOKEN, or JETPOOL_NATS_USER and JETPOOL_NATS_PASSWORD (clients use the same variables), "+
			"or keep the default --host 127.0.0.1", host)
	}
	so.HTTPHost = "127.0.0.1"
	return so, nil
}

// isLoopback reports whether host is a loopback address, localhost, or ""
// (which broker.StartEmbedded makes 127.0.0.1); 0.0.0.0 and :: are every
// interface.
func isLoopback(host string) bool {
	if host == "" || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func newTable(e *env) *tabwriter.Writer {
	return tabwriter.NewWriter(e.stdout, 0, 2, 2, ' ', 0)
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func checkFilter(f deadletter.Filter) error {
	if err := f.Check(); err != nil {
		return usageErr("--%v", err)
	}
	return nil
}
