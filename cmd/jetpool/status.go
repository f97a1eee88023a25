package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	jp "github.com/jetpool/jetpool"
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
	if len(pos) > 1 {
		return usageErr("want at most one JOB")
	}
	// No Ensure: status only reads, and each read is bounded
	// (jobstatus.Reads), so that a cluster with a node cut off answers in
	// seconds, in part if need be, saying which part.
	b, err := connectReads(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	jobs, fromReplica, err := statusJobs(ctx, b, jobstatus.NewReads(jobstatus.ListBound), pos)
	if err != nil {
		return err
	}
	r := jobstatus.NewReads(jobstatus.Bound)
	out, stats, err := jobstatus.ReadWithin(ctx, b, jobs, len(pos) == 1, r)
	if err != nil {
		return err
	}
	for i := range out {
		out[i].FromReplica = fromReplica
	}
	workers := len(stats)
	partial := unansweredParts(out)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if len(pos) == 1 {
			err = enc.Encode(out[0])
		} else {
			err = enc.Encode(out)
		}
		return cmpErr(err, partialErr(partial))
	}
	if len(out) == 0 {
		fmt.Fprintln(e.stdout, "no jobs")
		if !printTenantLine(ctx, e, b, r) {
			return partialErr([]string{"tenant budget"})
		}
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Job, st, s.Total, statusCounts(s))
	}
	tw.Flush()
	if fromReplica {
		fmt.Fprintf(e.stdout, "jobs read from a replica: the leader of %s or %s did not answer within %s (a status or cost may be a moment behind)\n",
			broker.BucketJobs, broker.BucketJobState, jobstatus.ReadTimeout)
	}
	printJobLines(e, out)
	for _, f := range jobstatus.Faults(stats) {
		fmt.Fprintf(e.stdout, "storage fault: worker %s: %s writes to %s failing since %s (%d failures): %s\n  %s; its records are held, not called again\n",
			f.Worker, f.Write, f.Stream, f.Since.Local().Format(time.TimeOnly), f.Failures, f.Error, f.Hint)
	}
	printBatches(e, out)
	if !printLimits(ctx, e, b, r) { // status_limits.go: cooldowns and open circuits
		partial = append(partial, "provider limits")
	}
	if !printTenantLine(ctx, e, b, r) {
		partial = append(partial, "tenant budget")
	}
	fmt.Fprintf(e.stdout, "(%d workers answered)\n", workers)
	return partialErr(partial)
}

// printJobLines prints, under the table, each job's parts that did not
// answer, dead letters, reason, cost, unfinished replay and the workers
// that will not serve it.
func printJobLines(e *env, out []jobStatus) {
	for _, s := range out {
		for _, part := range slices.Sorted(maps.Keys(s.Unanswered)) {
			fmt.Fprintf(e.stdout, "%s %s: did not answer within %s (%s), shown as ?\n", s.Job, partNames[part], jobstatus.Bound, s.Unanswered[part])
		}
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
}

// connectReads connects as connect does, without Ensure: for a command
// that only reads, and bounds its reads itself.
func connectReads(ctx context.Context, e *env) (*broker.Broker, error) {
	if e.describe != nil {
		return nil, errDescribe
	}
	b, err := broker.Connect(ctx, e.cfg, e.log)
	if err != nil {
		return nil, connectErr(err)
	}
	return b, nil
}

// statusJobs reads the job named in pos, or every job, within r's bound:
// from the buckets' leader, or, when it does not answer at once, from a
// replica (fromReplica).
func statusJobs(ctx context.Context, b *broker.Broker, r *jobstatus.Reads, pos []string) (jobs []*broker.Job, fromReplica bool, err error) {
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	leader := func(ctx context.Context) ([]*broker.Job, error) {
		if id != "" {
			j, _, err := b.GetJob(ctx, id)
			return []*broker.Job{j}, err
		}
		return b.ListJobs(ctx)
	}
	jobs, fromReplica, err = fromLeaderOrReplica(ctx, b, r, id, leader)
	switch {
	case err == nil && fromReplica:
		// A replica's answer is by subject: the jobs in the order they were made.
		slices.SortFunc(jobs, func(a, b *broker.Job) int { return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.ID, b.ID)) })
		return jobs, true, nil
	case err == nil:
		return jobs, false, nil
	case errors.Is(err, jetstream.ErrBucketNotFound) && len(pos) == 0:
		return nil, false, nil // nothing was ever dispatched here
	case errors.Is(err, broker.ErrJobNotFound), !broker.Transient(err) && !errors.Is(err, jobstatus.ErrNoTime):
		return nil, false, err
	}
	return nil, false, &exitError{code: exitUnavailable, err: fmt.Errorf("status: the jobs (%s, %s) did not answer within %s: %w (a leader election under way? try again)",
		broker.BucketJobs, broker.BucketJobState, jobstatus.ListBound, err)}
}

// partNames says what each part of a status is, for its line.
var partNames = map[string]string{
	jobstatus.PartBacklog:     "queued, in flight and waiting (its consumer on " + broker.StreamWork + ")",
	jobstatus.PartResults:     "succeeded and failed (" + broker.StreamResults + ")",
	jobstatus.PartBatches:     "provider batches (" + broker.BucketBatches + ")",
	jobstatus.PartSteps:       "pipeline steps (" + broker.StreamWork + ")",
	jobstatus.PartDeadLetters: "dead letters still held (" + broker.StreamDLQ + ")",
}

// statusCounts is a status row's QUEUED … REC/S cells: ? for a part that
// did not answer.
func statusCounts(s jobStatus) string {
	backlog := []string{"?", "?", "?"}
	if s.Answered(jobstatus.PartBacklog) {
		backlog = []string{fmt.Sprint(s.Queued), fmt.Sprint(s.InFlight), fmt.Sprint(s.Waiting)}
	}
	results := []string{"?", "?", "?", "?"}
	if s.Answered(jobstatus.PartResults) {
		results = []string{fmt.Sprint(s.Succeeded), fmt.Sprint(s.Failed), fmt.Sprint(s.Cancelled), fmt.Sprintf("%.1f", s.Rate)}
	}
	return strings.Join(append(backlog, results...), "\t")
}

// unansweredParts names each job's parts that did not answer.
func unansweredParts(out []jobStatus) []string {
	var parts []string
	for _, s := range out {
		for _, part := range slices.Sorted(maps.Keys(s.Unanswered)) {
			parts = append(parts, s.Job+" "+part)
		}
	}
	return parts
}

// partialErr is status's exit when parts did not answer: the answer was
// printed, and exit 3 says it is not whole.
func partialErr(parts []string) error {
	if len(parts) == 0 {
		return nil
	}
	return &exitError{code: exitUnavailable, err: fmt.Errorf("partial status: %s did not answer within %s", strings.Join(parts, ", "), jobstatus.Bound)}
}

// cmpErr is the first error that is not nil.
func cmpErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
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

// printTenantLine prints the tenant's budget when one is set, its read
// bounded by r; it reports false when the read did not answer (and says
// so).
func printTenantLine(ctx context.Context, e *env, b *broker.Broker, r *jobstatus.Reads) bool {
	var tb *jp.TenantBudget
	err := r.Do(ctx, func(ctx context.Context) (err error) {
		tb, err = e.client(b).TenantBudget(ctx)
		return err
	})
	switch {
	case err != nil && broker.Transient(err):
		fmt.Fprintf(e.stdout, "tenant budget (%s): did not answer within %s (%v)\n", broker.BucketTenant, jobstatus.Bound, err)
		return false
	case err == nil && tb.MaxCost > 0:
		printTenantBudget(e, tb)
	}
	return true
}

// replicaAfter is how long status waits for the jobs buckets' leader
// before it also asks a replica: a leader that answers at all answers
// sooner, so a healthy cluster is read once.
const replicaAfter = 200 * time.Millisecond

// fromLeaderOrReplica reads the jobs with leader, and, when it has not
// answered within replicaAfter, from a replica alongside it: a try every
// jobstatus.ReplicaTimeout (so that one that reaches the silent node is
// not the last), each followed by the leader's read again (a new leader
// may have been elected meanwhile), while time is left. The first answer
// wins; fromReplica says it was a replica's.
func fromLeaderOrReplica(ctx context.Context, b *broker.Broker, r *jobstatus.Reads, id string,
	leader func(context.Context) ([]*broker.Job, error)) (jobs []*broker.Job, fromReplica bool, err error) {
	type answer struct {
		jobs    []*broker.Job
		replica bool
		err     error
	}
	first := make(chan answer, 1)
	go func() {
		var a answer
		a.err = r.Once(ctx, func(ctx context.Context) (err error) { a.jobs, err = leader(ctx); return err })
		first <- a
	}()
	select {
	case a := <-first:
		if a.err == nil || !broker.Transient(a.err) {
			return a.jobs, false, a.err
		}
		first <- a
	case <-time.After(replicaAfter):
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	others := make(chan answer, 1)
	go func() {
		var a answer
		a.err = r.DoEach(rctx, jobstatus.ReplicaTimeout+jobstatus.ReadTimeout, func(ctx context.Context) error {
			rc, stop := context.WithTimeout(ctx, jobstatus.ReplicaTimeout)
			js, err := b.JobsFromReplica(rc, id)
			stop()
			if err == nil || !broker.Transient(err) {
				a.jobs, a.replica = js, true
				return err
			}
			js, lerr := leader(ctx)
			if lerr == nil || !broker.Transient(lerr) {
				a.jobs, a.replica = js, false
				return lerr
			}
			return err
		})
		others <- a
	}()
	a := <-first
	if a.err == nil || !broker.Transient(a.err) {
		cancel()
		<-others
		return a.jobs, false, a.err
	}
	a = <-others
	return a.jobs, a.replica && a.err == nil, a.err
}
