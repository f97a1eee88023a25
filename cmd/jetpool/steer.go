package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/steer"
	"github.com/jetpool/jetpool/workflow"
)

// stoppedErr is the exit of run or retry for a job that failed or was
// cancelled while they waited; nil for any other.
func stoppedErr(j *broker.Job) error {
	switch j.Status {
	case broker.JobFailed:
		return &exitError{code: exitJobFailed, err: fmt.Errorf("job %s failed: %s", j.ID, j.Reason)}
	case broker.JobCancelled:
		return &exitError{code: exitCancelled, err: fmt.Errorf("job %s was cancelled: %s (jetpool retry --job %s --reason cancelled runs its cancelled records)", j.ID, j.Reason, j.ID)}
	}
	return nil
}

// priorityFlag adds --priority, shared by run and dispatch.
func (f *runFlags) priorityFlag(fs *flag.FlagSet) {
	fs.IntVar(&f.priority, "priority", 0, fmt.Sprintf("a new job's priority, %d-%d: its weight when workers share their slots among jobs (default: the workflow's priority:, else %d; 'jetpool job priority' changes it)",
		workflow.PriorityMin, workflow.PriorityMax, workflow.PriorityDefault))
}

// checkPriority refuses a priority out of range.
func checkPriority(flagName string, p int) error {
	if p != 0 && (p < workflow.PriorityMin || p > workflow.PriorityMax) {
		return usageErr("%s %d is out of range %d-%d", flagName, p, workflow.PriorityMin, workflow.PriorityMax)
	}
	return nil
}

func jobPriority(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "job priority", "JOB N",
		fmt.Sprintf("Set a job's priority, %d-%d, while it runs: a worker serving several jobs divides its slots among\n"+
			"those that have work by priority (10 and 1: about 10:1), every job at least one slot. Workers follow it\n"+
			"at once. Exit 0: set; 1: no such job; 2: bad arguments; 3: NATS unreachable.", workflow.PriorityMin, workflow.PriorityMax))
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		fs.Usage()
		return usageErr("want JOB and N")
	}
	id, err := jobArg(fs, pos[:1])
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < workflow.PriorityMin || n > workflow.PriorityMax {
		return usageErr("priority %q: want a whole number %d-%d", pos[1], workflow.PriorityMin, workflow.PriorityMax)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	j, err := e.client(b).SetPriority(ctx, id, n)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "job %s: priority %d\n", id, j.Weight())
	return nil
}

// jobArg is a steering command's one JOB argument.
func jobArg(fs *flag.FlagSet, pos []string) (string, error) {
	if len(pos) != 1 {
		fs.Usage()
		return "", usageErr("want exactly one JOB")
	}
	if err := broker.CheckJobID(pos[0]); err != nil {
		return "", usageErr("%v", err)
	}
	return pos[0], nil
}

// jobCommand parses a steering command's flags and its one JOB, and
// connects.
func jobCommand(ctx context.Context, e *env, fs *flag.FlagSet, args []string) (string, *broker.Broker, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", nil, err
	}
	id, err := jobArg(fs, pos)
	if err != nil {
		return "", nil, err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return "", nil, err
	}
	return id, b, nil
}

func jobCancel(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "job cancel", "JOB [--reason TEXT] [--wait DUR] [--json]",
		"Cancel a job: from the moment this returns no worker starts a call for it. Calls in flight\n"+
			"finish and their answers are stored; queued records end with status cancelled (exported,\n"+
			"counted, dead-lettered with reason cancelled: 'jetpool retry --job JOB --reason cancelled'\n"+
			"runs them). It waits for every live worker to confirm. Exit 0: cancelled (or it was);\n"+
			"1: the job had completed or failed, does not exist, or a worker did not confirm in --wait\n"+
			"(the cancel stands; that worker sees it within a moment); 3: NATS unreachable.")
	reason := fs.String("reason", "", "why, kept as the job's reason (default \"cancelled by an operator\")")
	wait := fs.Duration("wait", steer.StopWaitDefault, "how long to wait for the workers to confirm")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	id, b, err := jobCommand(ctx, e, fs, args)
	if err != nil {
		return err
	}
	defer b.Close()
	rep, err := e.client(b).Cancel(ctx, id, steer.CancelOptions{Reason: *reason, StopWait: *wait})
	if err != nil && !errors.Is(err, steer.ErrStillCalling) {
		return err
	}
	if *asJSON {
		if jerr := json.NewEncoder(e.stdout).Encode(rep); jerr != nil {
			return jerr
		}
		return err
	}
	was := "cancelled"
	if rep.Already {
		was = "was cancelled already"
	}
	fmt.Fprintf(e.stdout, "job %s %s: no new calls (%s confirmed); %s in flight finish, %s end cancelled\n",
		id, was, plural(int64(rep.Workers-len(rep.Calling)), "worker"), plural(int64(rep.InFlight), "record"),
		plural(int64(rep.Queued), "queued record"))
	return err
}

func jobPause(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "job pause", "JOB [--for DUR | --until TIME] [--json]",
		"Pause a job: from the moment this returns no worker starts a call for it until 'jetpool job\n"+
			"resume' (or the end of --for/--until). Calls in flight finish; a record delivered before the\n"+
			"pause hands its delivery back before its next call, its attempts kept, and continues after\n"+
			"the resume. It is the pause of the job's work consumer ('nats consumer pause' does the same):\n"+
			"kept across restarts, shown by 'jetpool status' and 'nats consumer info JETPOOL_WORK\n"+
			"jetpool-JOB'. It waits for every live worker to confirm. Exit 0: paused; 1: the job has ended\n"+
			"or has no work consumer, or a worker did not confirm within 10s (the pause stands; that\n"+
			"worker sees it within a moment); 2: bad arguments; 3: NATS unreachable.")
	forDur := fs.Duration("for", 0, "resume by itself after this long")
	until := fs.String("until", "", "resume by itself at this time (RFC 3339, or 15:04 today)")
	asJSON := fs.Bool("json", false, "print the pause as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	id, err := jobArg(fs, pos)
	if err != nil {
		return err
	}
	at, err := whenFlag(*until, *forDur, "--until", "--for", time.Now())
	if err != nil {
		return err
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	rep, err := e.client(b).Pause(ctx, id, at)
	if err != nil && !errors.Is(err, steer.ErrStillCalling) {
		return err
	}
	if perr := printPause(e, rep, *asJSON); perr != nil {
		return perr
	}
	return err
}

func jobResume(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "job resume", "JOB [--json]",
		"Resume a paused job (or start a scheduled one now). Exit 0: resumed (or it was not paused);\n"+
			"1: the job has ended or has no work consumer; 3: NATS unreachable.")
	asJSON := fs.Bool("json", false, "print the state as JSON")
	id, b, err := jobCommand(ctx, e, fs, args)
	if err != nil {
		return err
	}
	defer b.Close()
	rep, err := e.client(b).Resume(ctx, id)
	if err != nil {
		return err
	}
	return printPause(e, rep, *asJSON)
}

func printPause(e *env, rep steer.PauseReport, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(e.stdout).Encode(rep)
	}
	if !rep.Paused {
		fmt.Fprintf(e.stdout, "job %s is running: %s queued\n", rep.Job, plural(int64(rep.Queued), "record"))
		return nil
	}
	fmt.Fprintf(e.stdout, "job %s paused %s: no new calls (%s confirmed); %s queued, %s delivered before the pause\n",
		rep.Job, pausedUntil(rep.Pause), plural(int64(rep.Workers-len(rep.Calling)), "worker"),
		plural(int64(rep.Queued), "record"), plural(int64(rep.InFlight), "record"))
	return nil
}

// pausedUntil says until when a job is paused.
func pausedUntil(p broker.Pause) string {
	if !p.Until.Before(broker.PauseForever) {
		return "until resumed"
	}
	return "until " + p.Until.Local().Format(time.DateTime)
}

// whenFlag reads a pair of flags naming a time (at: RFC 3339, a date and
// time, or a clock time today) or a duration from now; zero when neither
// is set.
func whenFlag(at string, after time.Duration, atName, afterName string, now time.Time) (time.Time, error) {
	switch {
	case at != "" && after != 0:
		return time.Time{}, usageErr("%s and %s: want one of them", atName, afterName)
	case after < 0:
		return time.Time{}, usageErr("%s %s is negative", afterName, after)
	case after > 0:
		return now.Add(after), nil
	case at == "":
		return time.Time{}, nil
	}
	t, err := parseWhen(at, now)
	if err != nil {
		return time.Time{}, usageErr("%s %q: %v", atName, at, err)
	}
	return t, nil
}

// parseWhen reads a time: RFC 3339, "2006-01-02 15:04[:05]" local, or a
// clock time "15:04[:05]" today (local).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{time.DateTime, "2006-01-02 15:04", "2006-01-02T15:04:05", "2006-01-02T15:04"} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			return t, nil
		}
	}
	for _, layout := range []string{time.TimeOnly, "15:04"} {
		if c, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			y, m, d := now.Date()
			return time.Date(y, m, d, c.Hour(), c.Minute(), c.Second(), 0, now.Location()), nil
		}
	}
	return time.Time{}, fmt.Errorf("want RFC 3339 (2026-12-07T18:00:00Z), a local date and time (2026-12-07 18:00) or a time today (18:00)")
}
