package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

func filterFlags(fs *flag.FlagSet) *deadletter.Filter {
	f := &deadletter.Filter{}
	fs.StringVar(&f.Job, "job", "", "only this job")
	fs.StringVar(&f.Action, "action", "", "only this action")
	fs.StringVar(&f.Reason, "reason", "", "only this reason ("+reasonList()+")")
	fs.StringVar(&f.Class, "class", "", "only this error class (rate_limit, server, network, auth, …)")
	fs.DurationVar(&f.Since, "since", 0, "only dead letters younger than this (e.g. 2h)")
	fs.StringVar(&f.Record, "record", "", "only this record's (its id)")
	fs.Uint64Var(&f.Seq, "seq", 0, "only the dead letter with this SEQ (as 'dlq list' shows it)")
	return f
}

const dlqUsage = `Usage: jetpool dlq list [filters] [--json]
       jetpool dlq show SEQ
       jetpool dlq purge [filters] [--yes]

Inspect dead letters (stream JETPOOL_DLQ). Replay them with 'jetpool retry'.
`

// dlqCommands are the subcommands of dlq.
var dlqCommands = []command{
	{"list", "list dead letters, oldest first", dlqList},
	{"show", "show one dead letter: headers, full diagnostic, the record", dlqShow},
	{"purge", "delete matching dead letters for good", dlqPurge},
}

func cmdDLQ(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "ls" {
		args = append([]string{"list"}, args[1:]...)
	}
	return subcommands(ctx, e, dlqUsage, dlqCommands, args)
}

func dlqList(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dlq list", "[filters] [--json]", "List dead letters, oldest first.")
	f := filterFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON lines")
	limit := fs.Int("limit", 0, "at most this many")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	f.Limit = *limit
	if err := checkFilter(*f); err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetEscapeHTML(false)
		return deadletter.Each(ctx, b, *f, func(en *deadletter.Entry) error {
			return enc.Encode(en)
		})
	}
	tw := newTable(e)
	fmt.Fprintln(tw, "SEQ\tJOB\tRECORD\tACTION\tREASON\tCLASS\tATTEMPTS\tAGE\tERROR")
	n := 0
	err = deadletter.Each(ctx, b, *f, func(en *deadletter.Entry) error {
		n++
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", en.Seq, en.Job, short(en.Record, 24), en.Action, en.Reason,
			orDash(string(en.Class)), en.Attempts, age(en.FailedAt), short(en.Error, 70))
		return nil
	})
	if err != nil {
		return err
	}
	tw.Flush()
	fmt.Fprintf(e.stdout, "%s\n", plural(int64(n), "dead letter"))
	return nil
}

func dlqShow(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dlq show", "SEQ", "Show one dead letter: its headers, full diagnostic and the record.")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageErr("want exactly one SEQ (see 'jetpool dlq list')")
	}
	seq, err := strconv.ParseUint(pos[0], 10, 64)
	if err != nil {
		return usageErr("SEQ %q is not a number", pos[0])
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	en, err := deadletter.Get(ctx, b, seq)
	if err != nil {
		return err
	}
	w := e.stdout
	fmt.Fprintf(w, "seq:         %d\n", en.Seq)
	fmt.Fprintf(w, "subject:     %s\n", broker.DLQSubject(en.Job, en.Action))
	fmt.Fprintf(w, "job:         %s\n", en.Job)
	fmt.Fprintf(w, "record:      %s\n", en.Record)
	fmt.Fprintf(w, "action:      %s\n", en.Action)
	fmt.Fprintf(w, "reason:      %s\n", en.Reason)
	fmt.Fprintf(w, "class:       %s\n", orDash(string(en.Class)))
	fmt.Fprintf(w, "attempts:    %d\n", en.Attempts)
	fmt.Fprintf(w, "deliveries:  %d\n", en.Deliveries)
	fmt.Fprintf(w, "provider:    %s\n", orDash(en.Provider))
	fmt.Fprintf(w, "model:       %s\n", orDash(en.Model))
	fmt.Fprintf(w, "failed at:   %s (%s ago)\n", en.FailedAt.Format(time.RFC3339), age(en.FailedAt))
	fmt.Fprintf(w, "worker:      %s\n", orDash(en.Worker))
	fmt.Fprintf(w, "replays:     %d\n", en.Replays)
	fmt.Fprintf(w, "error:\n  %s\n", en.Error)
	fmt.Fprintln(w, "record:")
	var pretty any
	if json.Unmarshal(en.Data, &pretty) == nil {
		out, _ := json.MarshalIndent(pretty, "  ", "  ")
		fmt.Fprintf(w, "  %s\n", out)
	} else {
		fmt.Fprintf(w, "  %s\n", en.Data)
	}
	return nil
}

func dlqPurge(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "dlq purge", "[filters] [--yes]", "Delete matching dead letters for good (--seq SEQ: one). Their records stay counted failed\n"+
		"(their failed results are kept); they can no longer be replayed. 'jetpool status JOB' says how many were purged.")
	f := filterFlags(fs)
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	if err := checkFilter(*f); err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	if !*yes {
		n := 0
		if err := deadletter.Each(ctx, b, *f, func(*deadletter.Entry) error { n++; return nil }); err != nil {
			return err
		}
		if n == 0 {
			fmt.Fprintln(e.stdout, "no dead letters match")
			return nil
		}
		if !isTerminal(os.Stdin) {
			return usageErr("%s match; pass --yes to purge them (standard input is not a terminal)", plural(int64(n), "dead letter"))
		}
		fmt.Fprintf(e.stderr, "purge %s for good? [y/N] ", plural(int64(n), "dead letter"))
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
			fmt.Fprintln(e.stderr, "nothing purged")
			return nil
		}
	}
	n, err := deadletter.Purge(ctx, b, *f)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "%s purged\n", plural(int64(n), "dead letter"))
	return nil
}

// retryFlags are `jetpool retry`'s flags.
type retryFlags struct {
	f                                  *deadletter.Filter
	dry, wait, noProgress, allowFailed bool
	noPreflight                        bool
	mode, output, revise               string
	timeout                            time.Duration
	conc                               int
	maxCost                            float64
}

func cmdRetry(ctx context.Context, e *env, args []string) error {
	rf, err := parseRetry(e, args)
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := serveLocal(b); err != nil {
		return err
	}
	c := e.client(b)
	if rf.maxCost > 0 && !rf.dry {
		var wf *workflow.Workflow // the revision the replay runs under; nil when it cannot be read
		if j, err := c.Job(ctx, rf.f.Job); err == nil {
			wf, _ = jp.CurrentWorkflow(j)
		}
		if rf.revise != "" {
			if wf, err = workflow.Load(rf.revise); err != nil {
				return configErr(err)
			}
		}
		if err := raiseBudget(ctx, e, c, rf.f.Job, rf.maxCost, wf); err != nil { // cost.go
			return err
		}
	}
	start := time.Now()
	if rf.revise != "" {
		if err := revise(ctx, e, c, rf); err != nil {
			return err
		}
	} else {
		warnings, err := c.OverflowWarnings(ctx, *rf.f)
		for _, w := range warnings {
			fmt.Fprintf(e.stderr, "warning: %s\n", w)
		}
		if err != nil {
			return err
		}
		if err := c.WorkableAll(ctx, *rf.f); err != nil {
			return err
		}
	}
	if err := rf.someoneWorks(ctx, e, c); err != nil {
		return err
	}
	res, err := replay(ctx, e, c, rf)
	if err != nil {
		return err
	}
	if rf.dry {
		fmt.Fprintf(e.stdout, "dry run: %s would be replayed; nothing changed\n", plural(int64(res.Matched-res.Skipped), "dead letter"))
		return nil
	}
	fmt.Fprintf(e.stderr, "%s replayed", plural(int64(res.Replayed), "dead letter"))
	if res.Skipped > 0 {
		fmt.Fprintf(e.stderr, ", %d skipped", res.Skipped)
	}
	fmt.Fprintln(e.stderr)
	for _, job := range slices.Sorted(maps.Keys(res.Jobs)) {
		if err := rf.finish(ctx, e, c, job, start); err != nil {
			return err
		}
	}
	return nil
}

// someoneWorks refuses, before anything is replayed, a retry on a store
// another process hosts whose records nobody could work: no live worker
// serves their job, and this process, which works them then, could not
// either (a key it lacks or may not send there).
func (rf *retryFlags) someoneWorks(ctx context.Context, e *env, c *jp.Client) error {
	if c.Embedded() || rf.dry || !hostedHere(c) {
		// On its own store Workable asked; a dry run changes nothing; on
		// an external server this process does not work the records.
		return nil
	}
	jobs := map[string]bool{}
	if err := deadletter.Each(ctx, c.Broker(), *rf.f, func(en *deadletter.Entry) error { jobs[en.Job] = true; return nil }); err != nil {
		return err
	}
	unserved, err := c.Unserved(ctx, slices.Sorted(maps.Keys(jobs)))
	if err != nil {
		return err
	}
	for _, id := range unserved {
		j, err := c.Job(ctx, id)
		if err != nil {
			continue // a dead letter of a job deleted since: the replay says so
		}
		if err := c.WorkableHere(j); err != nil {
			return fmt.Errorf("%w; start a `jetpool worker` that can serve it (JETPOOL_NATS_URL=%s) and run this retry again: "+
				"nothing was replayed, every dead letter is kept", err, c.Broker().NC.ConnectedUrlRedacted())
		}
	}
	return nil
}

// hostedHere reports whether c's store is one another jetpool process
// hosts on this machine's data dir (`jetpool ui`, `server`), reached
// through its server file rather than JETPOOL_NATS_URL.
func hostedHere(c *jp.Client) bool {
	return !c.Embedded() && c.Broker().Cfg.NATSURL == ""
}

// revise makes the workflow of --workflow the current revision of the job
// whose dead letters the filter matches (jp.Client.Revise), and says
// what became of it.
func revise(ctx context.Context, e *env, c *jp.Client, rf *retryFlags) error {
	wf, err := loadWorkflow(rf.revise) // run.go: parsed, and no key a process must never send
	if err != nil {
		return err
	}
	rev, err := c.Revise(ctx, rf.f, wf, jp.ReviseParams{DryRun: rf.dry, NoPreflight: rf.noPreflight, Path: rf.revise})
	switch {
	case err != nil:
		return err
	case rev == nil:
		return nil // Replay says no dead letter matches
	case !rev.New:
		fmt.Fprintf(e.stderr, "job %s: %s is its current workflow (revision %d): replaying under it\n", rev.Job.ID, rev.Path, rev.Number)
	case rf.dry:
		fmt.Fprintf(e.stderr, "job %s: %s would become revision %d of its workflow\n", rev.Job.ID, rev.Path, rev.Number)
	default:
		fmt.Fprintf(e.stderr, "job %s: revision %d of its workflow is %s; its failed records are replayed under it: "+
			"the actions that failed and those after them run the new definition, the actions that succeeded keep their results\n",
			rev.Job.ID, rev.Number, rev.Path)
	}
	return nil
}

// parseRetry reads retry's flags.
func parseRetry(e *env, args []string) (*retryFlags, error) {
	fs := newFlags(e, "retry", "[filters] [--workflow FIXED.yaml] [--limit N] [--dry-run] [--wait [--timeout DUR]]",
		"Replay dead letters into the work stream as a new replay generation. With the embedded server, also work\n"+
			"them to completion and print a summary. On a store another process hosts (an external server, or `jetpool ui`\n"+
			"or `server` on this data dir): when a live worker serves the job, return after republishing (--wait follows\n"+
			"them); when none does, work them here as `jetpool worker` would (exit codes as run). If this process could not\n"+
			"work them either (a key missing or not allowed here), it says why and exits 2 before anything is replayed.\n"+
			"--workflow replays them under a new revision of the job's workflow (same actions, any definitions): the\n"+
			"actions that failed and those after them run it; those that succeeded keep their results and are not paid again.\n"+
			"Dead letters of a context overflow replayed under a workflow that gives their action no overflow: block would\n"+
			"fail the same way: retry warns (--dry-run too) and names the --workflow to use.\n"+
			"A replay an earlier retry left unfinished (killed half way) is found and finished too.\n"+
			"On the embedded server it first checks that it could work them (every key set and allowed where each revision\n"+
			"sends it): if not, it says why and exits 2 before any revision is added or dead letter replayed.\n"+
			"Exit 4 when the job completes with failed records (--allow-failed: 0), 1 when it fails (a raise, or its\n"+
			"max_cost reached again: raise it with --max-cost, which must cover what the job has spent).")
	rf := &retryFlags{f: filterFlags(fs)}
	limit := fs.Int("limit", 0, "replay at most this many")
	fs.BoolVar(&rf.dry, "dry-run", false, "show what would be replayed; change nothing")
	fs.BoolVar(&rf.wait, "wait", false, "when live workers elsewhere serve the job, wait until they are done with it")
	fs.DurationVar(&rf.timeout, "timeout", 0, "with --wait, give up after this long (0: wait until they are done)")
	fs.StringVar(&rf.mode, "mode", "", "\"online\": run replayed batch-mode records online")
	fs.IntVar(&rf.conc, "concurrency", 0, "concurrent model calls when working the replay here")
	fs.StringVar(&rf.output, "output", "", "write the job's results here when done (JSONL, or CSV or Parquet for a .csv or .parquet name)")
	fs.BoolVar(&rf.noProgress, "no-progress", false, "no progress bar")
	maxCostFlag(fs, &rf.maxCost)
	fs.BoolVar(&rf.allowFailed, "allow-failed", false, "exit 0 when a job completed with failed records (default: exit 4)")
	fs.BoolVar(&rf.noPreflight, "no-preflight", false, "with --workflow: skip the providers' credential check")
	fs.StringVar(&rf.revise, "workflow", "", "replay under a new revision of the job's workflow, read from this file: the actions\n"+
		"that failed and those after them run it, those that succeeded keep their results")
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usageErr("unexpected arguments %v", pos)
	}
	if rf.maxCost > 0 && rf.f.Job == "" {
		return nil, usageErr("--max-cost sets one job's budget: name it with --job")
	}
	rf.f.Limit = *limit
	if err := checkFilter(*rf.f); err != nil {
		return nil, err
	}
	if rf.mode != "" && rf.mode != "online" {
		return nil, usageErr("--mode %q: only \"online\" is accepted", rf.mode)
	}
	return rf, nil
}

// replay republishes the dead letters rf selects, and the jobs with a
// replay an earlier retry left unfinished (jp.Client.Replay), saying
// what it found.
func replay(ctx context.Context, e *env, c *jp.Client, rf *retryFlags) (*deadletter.ReplayResult, error) {
	res, unfinished, err := c.Replay(ctx, deadletter.ReplayOptions{Filter: *rf.f, DryRun: rf.dry, Mode: rf.mode,
		Each: func(en *deadletter.Entry, replayed bool, why string) {
			switch {
			case replayed:
				e.log.Debug().Str("job", en.Job).Str("record", en.Record).Msg("replayed")
			case why == "dry run":
				fmt.Fprintf(e.stdout, "would replay %d  %s/%s/%s  (%s: %s)\n", en.Seq, en.Job, en.Action, en.Record, en.Reason, short(en.Error, 60))
			default:
				fmt.Fprintf(e.stderr, "skipped %d  %s/%s/%s: %s\n", en.Seq, en.Job, en.Action, en.Record, why)
			}
		}})
	if err != nil {
		return nil, err
	}
	for _, u := range unfinished {
		verb := "working them now"
		if rf.dry {
			verb = "a retry without --dry-run works them"
		} else if !c.Embedded() {
			verb = "who works them is said below"
		}
		fmt.Fprintf(e.stderr, "job %s: a replay of %s at %s is not finished: %d records are still queued or waiting; %s\n",
			u.Job, plural(int64(u.Records), "dead letter"), u.At.Local().Format(time.DateTime), u.Left, verb)
	}
	return res, nil
}

// finish works a replayed job to its end here (the embedded server, or
// a store no live worker serves the job on), or says which workers will
// run it, waiting for them to (--wait), and reports.
func (rf *retryFlags) finish(ctx context.Context, e *env, c *jp.Client, job string, start time.Time) error {
	if c.Embedded() {
		return exitOnFailed(workAndReport(ctx, e, c, job, rf.conc, rf.output, !rf.noProgress, start, nil), rf.allowFailed)
	}
	serving, err := c.Serving(ctx, job)
	if err != nil {
		return err
	}
	if len(serving) == 0 && !hostedHere(c) {
		// An external server's workers are the operator's to run: this
		// process, with the operator's keys, does not stand in for them.
		fmt.Fprintf(e.stderr, "no live worker serves job %s: its replayed records wait in the queue until one does "+
			"(start `jetpool worker` with JETPOOL_NATS_URL=%s); follow with 'jetpool status %s'\n",
			job, c.Broker().NC.ConnectedUrlRedacted(), job)
		return nil
	}
	if len(serving) == 0 {
		fmt.Fprintf(e.stderr, "no live worker serves job %s: working its replayed records here, as `jetpool worker` would "+
			"(a worker started meanwhile shares them; Ctrl-C hands them back)\n", job)
		return exitOnFailed(workAndReport(ctx, e, c, job, rf.conc, rf.output, !rf.noProgress, start, nil), rf.allowFailed)
	}
	if !rf.wait {
		fmt.Fprintf(e.stderr, "%s serving job %s will run them; follow with 'jetpool status %s' (or pass --wait)\n",
			plural(int64(len(serving)), "live worker"), job, job)
		return nil
	}
	j, err := waitForWorkers(ctx, e, c, job, !rf.noProgress, rf.timeout)
	if err != nil {
		return err
	}
	s, err := summarize(ctx, c, j, rf.output)
	if err != nil {
		return err
	}
	s.print(e, time.Since(start), 0)
	if err := stoppedErr(j); err != nil {
		return err
	}
	if s.Failed > 0 && !rf.allowFailed {
		return &exitError{code: exitFailedRecords, err: &errFailedRecords{job: j.ID, failed: s.Failed}}
	}
	return nil
}

// noWorkerAfter is how long `retry --wait` waits before it asks whether any
// worker runs, and says so when none does.
var noWorkerAfter = 5 * time.Second

// waitForWorkers waits, as waitJob does, for workers elsewhere to finish
// job: a wait that no worker answers would be silent for ever, so after
// noWorkerAfter it asks (jetpool.ctl.stats) and says when none runs; a
// timeout above 0 bounds the wait.
func waitForWorkers(ctx context.Context, e *env, c *jp.Client, job string, progress bool, timeout time.Duration) (*broker.Job, error) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if timeout > 0 {
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		t := time.NewTimer(noWorkerAfter)
		defer t.Stop()
		select {
		case <-wctx.Done():
			return
		case <-t.C:
		}
		if stats, _ := c.Workers(wctx); len(stats) == 0 {
			fmt.Fprintf(e.stderr, "no worker answered on %s after %s: the replayed records of job %s wait for one "+
				"(start `jetpool worker` with JETPOOL_NATS_URL=%s; --timeout bounds this wait)\n",
				broker.SubjectControl, noWorkerAfter, job, c.Broker().NC.ConnectedUrlRedacted())
		}
	}()
	j, err := waitJob(wctx, e, c, job, progress)
	timedOut := err != nil && ctx.Err() == nil && errors.Is(wctx.Err(), context.DeadlineExceeded)
	cancel()
	<-asked
	if timedOut {
		return nil, &exitError{code: exitJobFailed, err: fmt.Errorf("--timeout %s passed before job %s was done; its replayed records stay queued for a worker", timeout, job)}
	}
	return j, err
}

func short(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len([]rune(s)) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// reasonList is every dead-letter reason, for flag help.
func reasonList() string {
	names := make([]string, len(retry.Reasons))
	for i, r := range retry.Reasons {
		names[i] = string(r)
	}
	return strings.Join(names, ", ")
}
