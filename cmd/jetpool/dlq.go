package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
)

func filterFlags(fs *flag.FlagSet) *deadletter.Filter {
	f := &deadletter.Filter{}
	fs.StringVar(&f.Job, "job", "", "only this job")
	fs.StringVar(&f.Action, "action", "", "only this action")
	fs.StringVar(&f.Reason, "reason", "", "only this reason (permanent, exhausted, context_overflow, schema_violation, programming_error, bad_input, max_deliveries, batch_not_returned, job_failed, max_calls)")
	fs.StringVar(&f.Class, "class", "", "only this error class (rate_limit, server, network, auth, …)")
	fs.DurationVar(&f.Since, "since", 0, "only dead letters younger than this (e.g. 2h)")
	return f
}

const dlqUsage = `Usage: jetpool dlq list [filters] [--json]
       jetpool dlq show SEQ
       jetpool dlq purge [filters] [--yes]

Inspect dead letters (stream JETPOOL_DLQ). Replay them with 'jetpool retry'.
`

func cmdDLQ(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(e.stderr, dlqUsage)
		if len(args) == 0 {
			return usageErr("want a subcommand: list, show or purge")
		}
		return nil
	}
	switch args[0] {
	case "list", "ls":
		return dlqList(ctx, e, args[1:])
	case "show":
		return dlqShow(ctx, e, args[1:])
	case "purge":
		return dlqPurge(ctx, e, args[1:])
	}
	fmt.Fprint(e.stderr, dlqUsage)
	return usageErr("unknown subcommand %q", args[0])
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
	fs := newFlags(e, "dlq purge", "[filters] [--yes]", "Delete matching dead letters for good.")
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

func cmdRetry(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "retry", "[filters] [--workflow FIXED.yaml] [--limit N] [--dry-run] [--wait]",
		"Replay dead letters into the work stream as a new replay generation. With the embedded server, also work\n"+
			"them to completion and print a summary; with an external server, return after republishing (--wait follows).\n"+
			"--workflow replays them under a new revision of the job's workflow (same actions, any definitions): the\n"+
			"actions that failed and those after them run it; those that succeeded keep their results and are not paid again.\n"+
			"Exit 4 when the job completes with failed records (--allow-failed: 0).")
	f := filterFlags(fs)
	limit := fs.Int("limit", 0, "replay at most this many")
	dry := fs.Bool("dry-run", false, "show what would be replayed; change nothing")
	wait := fs.Bool("wait", false, "with an external server, wait until the replayed jobs are done")
	mode := fs.String("mode", "", "\"online\": run replayed batch-mode records online")
	conc := fs.Int("concurrency", 0, "concurrent model calls when working the replay here")
	output := fs.String("output", "", "write the job's results JSONL here when done")
	noProgress := fs.Bool("no-progress", false, "no progress bar")
	allowFailed := fs.Bool("allow-failed", false, "exit 0 when a job completed with failed records (default: exit 4)")
	noPreflight := fs.Bool("no-preflight", false, "with --workflow: skip the providers' credential check")
	revise := fs.String("workflow", "", "replay under a new revision of the job's workflow, read from this file: the actions\n"+
		"that failed and those after them run it, those that succeeded keep their results")
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
	if *mode != "" && *mode != "online" {
		return usageErr("--mode %q: only \"online\" is accepted", *mode)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	start := time.Now()
	if *revise != "" {
		if err := reviseForRetry(ctx, e, b, f, *revise, *dry, *noPreflight); err != nil {
			return err
		}
	}
	res, err := deadletter.Replay(ctx, b, deadletter.ReplayOptions{Filter: *f, DryRun: *dry, Mode: *mode,
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
		return err
	}
	// A replay that was killed after it republished left records in the
	// work stream and none in the DLQ: found by its mark, and finished here.
	unfinished, err := deadletter.Unfinished(ctx, b, f.Job)
	if err != nil {
		return err
	}
	for _, u := range unfinished {
		if res.Jobs[u.Job] {
			continue
		}
		verb := "working them now"
		if *dry {
			verb = "a retry without --dry-run works them"
		} else if !b.Embedded() {
			verb = "workers will run them"
		}
		fmt.Fprintf(e.stderr, "job %s: a replay of %s at %s is not finished: %d records are still queued or waiting; %s\n",
			u.Job, plural(int64(u.Records), "dead letter"), u.At.Local().Format(time.DateTime), u.Left, verb)
		res.Jobs[u.Job] = true
	}
	if *dry {
		fmt.Fprintf(e.stdout, "dry run: %s would be replayed; nothing changed\n", plural(int64(res.Matched-res.Skipped), "dead letter"))
		return nil
	}
	fmt.Fprintf(e.stderr, "%s replayed", plural(int64(res.Replayed), "dead letter"))
	if res.Skipped > 0 {
		fmt.Fprintf(e.stderr, ", %d skipped", res.Skipped)
	}
	fmt.Fprintln(e.stderr)
	if len(res.Jobs) == 0 {
		return nil
	}
	if !b.Embedded() && !*wait {
		fmt.Fprintln(e.stderr, "workers will run them; follow with 'jetpool status' (or pass --wait)")
		return nil
	}
	for job := range res.Jobs {
		if b.Embedded() {
			if err := exitOnFailed(workAndReport(ctx, e, b, job, *conc, *output, !*noProgress, start), *allowFailed); err != nil {
				return err
			}
			continue
		}
		j, err := waitJob(ctx, e, b, job, !*noProgress)
		if err != nil {
			return err
		}
		s, err := summarize(ctx, b, j, *output)
		if err != nil {
			return err
		}
		s.print(e, time.Since(start), 0)
		if s.failed > 0 && j.Status != broker.JobFailed && !*allowFailed {
			return &exitError{code: exitFailedRecords, err: &errFailedRecords{job: j.ID, failed: s.failed}}
		}
	}
	return nil
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
