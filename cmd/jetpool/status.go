package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/jobstatus"
)

// jobStatus is `jetpool status --json` (internal/jobstatus reads it, for
// the dashboard too).
type jobStatus = jobstatus.Job

func cmdStatus(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "status", "[JOB] [--json]", "Show queued, in flight, waiting for redelivery, succeeded, failed, cancelled and dead letters by reason.")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	var jobs []*broker.Job
	if len(pos) == 1 {
		j, _, err := b.GetJob(ctx, pos[0])
		if err != nil {
			return err
		}
		jobs = []*broker.Job{j}
	} else if len(pos) == 0 {
		if jobs, err = b.ListJobs(ctx); err != nil {
			return err
		}
	} else {
		return usageErr("want at most one JOB")
	}
	out, stats, err := e.client(b).Statuses(ctx, jobs, len(pos) == 1)
	if err != nil {
		return err
	}
	workers := len(stats)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if len(pos) == 1 {
			return enc.Encode(out[0])
		}
		return enc.Encode(out)
	}
	if len(out) == 0 {
		fmt.Fprintln(e.stdout, "no jobs")
		return nil
	}
	tw := newTable(e)
	fmt.Fprintln(tw, "JOB\tSTATUS\tTOTAL\tQUEUED\tIN FLIGHT\tWAITING\tSUCCEEDED\tFAILED\tCANCELLED\tREC/S")
	for _, s := range out {
		st := s.Status
		switch {
		case s.Scheduled:
			st += " (starts " + s.StartAt.Local().Format(time.DateTime) + ")"
		case s.Paused && !s.PausedUntil.IsZero():
			st += " (paused until " + s.PausedUntil.Local().Format(time.DateTime) + ")"
		case s.Paused:
			st += " (paused)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f\n", s.Job, st, s.Total, s.Queued, s.InFlight, s.Waiting, s.Succeeded, s.Failed, s.Cancelled, s.Rate)
	}
	tw.Flush()
	for _, s := range out {
		if len(s.DeadByReas) > 0 {
			fmt.Fprintf(e.stdout, "%s dead letters by reason: %s%s\n", s.Job, kvList(s.DeadByReas), purgedNote(s))
		}
		if s.Reason != "" {
			fmt.Fprintf(e.stdout, "%s %s: %s\n", s.Job, s.Status, s.Reason)
		}
		if line := costLine(s); line != "" {
			fmt.Fprintf(e.stdout, "%s %s\n", s.Job, line)
		}
		if r := s.Replay; r != nil {
			fmt.Fprintf(e.stdout, "%s: a replay of %s at %s is not finished ('jetpool retry --job %s' finishes it on the embedded server)\n",
				s.Job, plural(int64(r.Records), "dead letter"), r.At.Local().Format(time.DateTime), s.Job)
		}
		for _, r := range s.Unservable {
			fmt.Fprintf(e.stdout, "worker %s cannot serve job %s: %s\n", r.Worker, s.Job, r.Reason)
		}
	}
	for _, f := range jobstatus.Faults(stats) {
		fmt.Fprintf(e.stdout, "storage fault: worker %s: %s writes to %s failing since %s (%d failures): %s\n  %s; its records are held, not called again\n",
			f.Worker, f.Write, f.Stream, f.Since.Local().Format(time.TimeOnly), f.Failures, f.Error, f.Hint)
	}
	printBatches(e, out)
	printLimits(ctx, e, b) // status_limits.go: cooldowns and open circuits
	fmt.Fprintf(e.stdout, "(%d workers answered)\n", workers)
	return nil
}

// printBatches lists the outstanding provider batches of the jobs shown.
func printBatches(e *env, out []jobStatus) {
	n := 0
	for _, s := range out {
		n += len(s.Batches)
	}
	if n == 0 {
		return
	}
	tw := newTable(e)
	fmt.Fprintln(tw, "JOB\tACTION\tPROVIDER BATCH\tSTATE\tROUND\tTOTAL\tSUCCEEDED\tFAILED\tAGE")
	for _, s := range out {
		for _, b := range s.Batches {
			id := b.ProviderID
			if id == "" {
				id = "(" + b.Key + ")"
			}
			if b.Deployment != "" {
				id = b.Deployment + ": " + id // where it is polled
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Job, b.Action, id, b.State, b.Round,
				b.Counts.Total, b.Counts.Succeeded, b.Counts.Failed, b.Age)
		}
	}
	tw.Flush()
}

// purgedNote says how many of a job's failed records are no longer in the
// DLQ (purged): they stay failed, but `retry` cannot replay them.
func purgedNote(s jobStatus) string {
	if s.DeadLetters == nil || *s.DeadLetters >= s.Failed {
		return ""
	}
	return fmt.Sprintf(" (%d in the DLQ; %d purged: failed, not replayable)", *s.DeadLetters, s.Failed-*s.DeadLetters)
}
