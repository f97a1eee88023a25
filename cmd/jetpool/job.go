package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/broker"
)

const jobUsage = `Usage: jetpool job cancel JOB [--reason TEXT] [--wait DUR] [--json]
       jetpool job pause JOB [--for DUR | --until TIME] [--json]
       jetpool job resume JOB [--json]
       jetpool job priority JOB N
       jetpool job delete JOB [--yes] [--json]
       jetpool job purge [--older-than DUR] [--dry-run] [--yes] [--json]

Steer jobs (docs/operations.md, Steering jobs): cancel one (no new calls;
queued records end cancelled), pause and resume one. Delete jobs: their
queued work, results, dead letters, consumers, counters, saved attempts and
batch records. 'purge' also removes the work consumers of jobs finished more
than JETPOOL_CONSUMER_GRACE ago (docs/operations.md, Retention).
`

func cmdJob(ctx context.Context, e *env, args []string) error {
	if len(args) > 0 && args[0] == "rm" {
		args = append([]string{"delete"}, args[1:]...)
	}
	return subcommands(ctx, e, jobUsage, jobCommands, args)
}

var jobCommands = []command{
	{"cancel", "cancel a job: no new calls; queued records end cancelled", jobCancel},
	{"pause", "pause a job: nothing of it is delivered until resumed", jobPause},
	{"resume", "resume a paused or scheduled job", jobResume},
	{"priority", "set a job's priority while it runs", jobPriority},
	{"delete", "delete a job and everything it left", jobDelete},
	{"purge", "delete finished jobs older than --older-than", jobPurge},
}

func jobDelete(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "job delete", "JOB [--yes] [--json]",
		"Delete a job and everything it left: queued work, results, dead letters, its consumers,\n"+
			"saved attempts and batch records. Pause or finish a job before deleting it: records in\n"+
			"flight may still store a result. Asks first on a terminal; elsewhere it needs --yes.")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	asJSON := fs.Bool("json", false, "print what was deleted as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		fs.Usage()
		return usageErr("want exactly one JOB")
	}
	id := pos[0]
	if err := broker.CheckJobID(id); err != nil {
		return usageErr("%v", err)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	if !*yes {
		ok, err := confirm(e, "delete "+describeJob(ctx, b, id)+" for good?", "pass --yes to delete job "+id)
		if err != nil || !ok {
			if err == nil {
				fmt.Fprintln(e.stderr, "nothing deleted")
			}
			return err
		}
	}
	rep, err := b.DeleteJob(ctx, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(rep)
	}
	fmt.Fprintln(e.stdout, deleted(rep))
	fmt.Fprintf(e.stderr, "note: the server remembers the job's message ids for %s (JETPOOL_DEDUPE_WINDOW): dispatch it again after that, or under another --job\n",
		e.cfg.DedupeWindow)
	return nil
}

// describeJob says what deleting job id would remove, for the question.
func describeJob(ctx context.Context, b *broker.Broker, id string) string {
	j, _, err := b.GetJob(ctx, id)
	if err != nil {
		return "what is left of job " + id + " (it has no JETPOOL_JOBS entry)"
	}
	s := fmt.Sprintf("job %s (%s, %s", id, j.Status, plural(j.Total, "record"))
	if p, err := b.JobProgress(ctx, j, false); err == nil {
		s += fmt.Sprintf(": %d succeeded, %d failed", p.OK, p.Failed)
		if p.Cancelled > 0 {
			s += fmt.Sprintf(", %d cancelled", p.Cancelled)
		}
		if p.Queued > 0 || p.AckPending > 0 {
			s += fmt.Sprintf(", %d queued, %d in flight or waiting — it is still running", p.Queued, p.AckPending)
		}
	}
	if hs, err := batch.List(ctx, b, id); err == nil && len(hs) > 0 {
		s += fmt.Sprintf("; %s outstanding at the provider, which are not cancelled there", plural(int64(len(hs)), "batch"))
	}
	return s + ")"
}

func deleted(r *broker.DeleteReport) string {
	return fmt.Sprintf("job %s deleted: %s, %s, %s, %s",
		r.Job, plural(int64(r.Results), "result"), plural(int64(r.DeadLetter), "dead letter"),
		plural(int64(r.Work), "queued record"), plural(int64(r.Consumers), "consumer"))
}

func jobPurge(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "job purge", "[--older-than DUR] [--dry-run] [--yes] [--json]",
		"Delete finished jobs (every record has its final result, or the job failed, and nothing is queued\n"+
			"or in flight) that finished longer ago than --older-than, and remove the work consumers of jobs\n"+
			"finished longer ago than JETPOOL_CONSUMER_GRACE. Unfinished jobs are never touched.")
	olderThan := fs.Duration("older-than", e.cfg.JobRetention, "delete finished jobs older than this (0: delete none; default $JETPOOL_JOB_RETENTION)")
	dry := fs.Bool("dry-run", false, "show what would be done; change nothing")
	yes := fs.Bool("yes", false, "do not ask for confirmation")
	asJSON := fs.Bool("json", false, "print what was done as JSON lines")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	if *olderThan < 0 {
		return usageErr("--older-than %s is negative", *olderThan)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	o := broker.SweepOptions{Retention: *olderThan, Grace: e.cfg.ConsumerGrace, DryRun: true}
	plan, err := b.Sweep(ctx, o)
	if err != nil {
		return err
	}
	if *dry {
		return printSwept(e, plan, *asJSON, true)
	}
	listed := map[string]bool{}
	n := 0
	for _, s := range plan {
		listed[s.Job] = true
		if s.Deleted != nil {
			n++
		}
	}
	if n > 0 && !*yes {
		q := fmt.Sprintf("delete %s finished more than %s ago for good?", plural(int64(n), "job"), *olderThan)
		ok, err := confirm(e, q, "pass --yes to delete them (--dry-run lists them)")
		if err != nil || !ok {
			if err == nil {
				fmt.Fprintln(e.stderr, "nothing deleted")
			}
			return err
		}
	}
	// Only what was planned: a job that finishes meanwhile waits for the next purge.
	o.DryRun, o.Only = false, func(j *broker.Job) bool { return listed[j.ID] }
	done, err := b.Sweep(ctx, o)
	if perr := printSwept(e, done, *asJSON, false); err == nil {
		err = perr
	}
	return err
}

// housekeep applies the lifecycle of finished jobs (JETPOOL_JOB_RETENTION,
// JETPOOL_CONSUMER_GRACE) to every job but skip, saying what it did:
// `jetpool run` does it on the embedded server, which has no operator to run
// `jetpool job purge`.
func housekeep(ctx context.Context, e *env, b *broker.Broker, skip string) {
	if ctx.Err() != nil {
		return // interrupted: leave it to the next run
	}
	done, err := b.Sweep(ctx, broker.SweepOptions{Retention: e.cfg.JobRetention, Grace: e.cfg.ConsumerGrace,
		Only: func(j *broker.Job) bool { return j.ID != skip }})
	for _, s := range done {
		if s.Deleted != nil {
			fmt.Fprintf(e.stderr, "housekeeping: %s (finished %s ago; JETPOOL_JOB_RETENTION=%s)\n", deleted(s.Deleted), ago(s.Finished), e.cfg.JobRetention)
		}
	}
	if err != nil {
		e.log.Warn().Err(err).Msg("housekeeping of finished jobs")
	}
}

func printSwept(e *env, swept []broker.Swept, asJSON, dry bool) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, s := range swept {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	would := ""
	if dry {
		would = "would be "
	}
	for _, s := range swept {
		switch {
		case s.Deleted != nil && dry:
			fmt.Fprintf(e.stdout, "job %s (%s %s ago) would be deleted\n", s.Job, s.Status, ago(s.Finished))
		case s.Deleted != nil:
			fmt.Fprintf(e.stdout, "%s (%s %s ago)\n", deleted(s.Deleted), s.Status, ago(s.Finished))
		case s.ConsumerRemoved:
			fmt.Fprintf(e.stdout, "job %s (%s %s ago): its work consumer %sremoved\n", s.Job, s.Status, ago(s.Finished), would)
		case s.Completed:
			fmt.Fprintf(e.stdout, "job %s had finished: %smarked completed\n", s.Job, would)
		}
	}
	if len(swept) == 0 {
		fmt.Fprintln(e.stdout, "nothing to purge")
	}
	return nil
}

func ago(t time.Time) string { return time.Since(t).Round(time.Second).String() }

// confirm asks question on a terminal; elsewhere it refuses with hint, as
// a usage error. It reports whether the answer was yes.
func confirm(e *env, question, hint string) (bool, error) {
	if !isTerminal(os.Stdin) {
		return false, usageErr("%s (standard input is not a terminal)", hint)
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	a := strings.ToLower(strings.TrimSpace(line))
	return a == "y" || a == "yes", nil
}
