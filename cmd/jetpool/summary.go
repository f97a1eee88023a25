package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/jobstatus"
)

// summary is a job's jp.Summary as run and retry print it.
type summary struct {
	*jp.Summary
	providers []string // a line per provider's limiter (status_limits.go)
}

// summarize reads every result of the job once (jp.Client.Summarize),
// writes the final result of each record to output (when set) and counts.
func summarize(ctx context.Context, c *jp.Client, job *broker.Job, output string) (*summary, error) {
	s, err := c.Summarize(ctx, job, output)
	if err != nil {
		return nil, err
	}
	return &summary{Summary: s}, nil
}

func (s *summary) print(e *env, elapsed time.Duration, callsThisRun int64) {
	out := e.stdout
	status := "completed"
	switch s.Job.Status {
	case broker.JobFailed:
		status = "FAILED"
	case broker.JobCancelled:
		status = "CANCELLED"
	}
	cancelled := "" // as job cancel says it: only when there are some
	if s.Cancelled > 0 {
		cancelled = fmt.Sprintf(", %d cancelled", s.Cancelled)
	}
	fmt.Fprintf(out, "job %s %s: %d records, %d succeeded, %d failed%s\n", s.Job.ID, status, s.Records, s.OK, s.Failed, cancelled)
	if s.Failed > 0 {
		fmt.Fprintf(out, "  failed by class:  %s\n", kvList(s.ByClass))
		fmt.Fprintf(out, "  failed by reason: %s\n", kvList(s.ByReason))
	}
	// Calls come from the results (all runs of the job, every action);
	// "this run" is this process's.
	fmt.Fprintf(out, "  calls: %d (%d extra: retries, repairs, replays), attempts: %d, records recovered: %d; model calls this run: %d\n",
		s.Calls, s.Extra, s.Attempts, s.Recovered, callsThisRun)
	if s.TokensIn+s.TokensOut > 0 {
		fmt.Fprintf(out, "  tokens: %d in, %d out%s\n", s.TokensIn, s.TokensOut, s.tokenParts())
	}
	s.printCost(out) // summary_cost.go
	rate := float64(s.Records) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(out, "  elapsed: %s, %.1f records/s\n", elapsed.Round(time.Millisecond), rate)
	for _, p := range s.providers {
		fmt.Fprintf(out, "  %s\n", p)
	}
	if s.Failed > 0 {
		fmt.Fprintf(out, "  dead letters: jetpool dlq list --job %s   replay: jetpool retry --job %s\n", s.Job.ID, s.Job.ID)
	}
	if s.Job.Stopped() {
		fmt.Fprintf(out, "  why: %s\n", s.Job.Reason)
	}
}

func kvList(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// progress is a progress bar on a terminal, nothing elsewhere.
type progress struct {
	bar   *progressbar.ProgressBar
	total int64
	rate  rateEstimate
	// at is, for a pipeline, the records at each action (queued, in flight
	// or waiting for redelivery), read every actionsEvery.
	at          map[string]uint64
	actionOrder []string
	atPolled    time.Time
	steps       int64 // the pipeline steps last shown
}

func newProgress(e *env, want bool) *progress {
	f, ok := e.stderr.(*os.File)
	if !want || !ok || !term.IsTerminal(int(f.Fd())) {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription("records"),
		progressbar.OptionShowCount(),
		// The bar's own rate and time left follow the last few seconds'
		// counts, which move in steps (results are counted every 2 s):
		// the description carries a smoothed rate and ETA instead.
		progressbar.OptionSetPredictTime(false),
		progressbar.OptionSetElapsedTime(true),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

// actionsEvery is how often the bar reads the per-action counts of a pipeline.
const actionsEvery = 2 * time.Second

// actions reads, for a pipeline, how many records are at each action: one
// stream info request over the job's work subjects (one per action).
func (p *progress) actions(ctx context.Context, b *broker.Broker, job *broker.Job) {
	if p.bar == nil || len(job.Actions) < 2 || time.Since(p.atPolled) < actionsEvery {
		return
	}
	p.atPolled = time.Now()
	at, err := jobstatus.AtActions(ctx, b, job.ID)
	if err != nil {
		return // the bar goes without them; the wait reports what matters
	}
	p.at = at
	for _, a := range job.Actions {
		p.at[a] += 0 // every action shows, those with none too
	}
	p.actionOrder = job.Actions
}

func (p *progress) update(done, total int64, st broker.Progress) {
	if p.bar == nil {
		return
	}
	if len(p.actionOrder) > 1 && p.at != nil {
		// A pipeline: the bar counts steps, a record and action each
		// (jobstatus.Steps), so it moves before records finish their
		// last action; never back, as the counts are read at two paces.
		done, total = jobstatus.Steps(total, done, p.actionOrder, p.at)
		done = max(done, p.steps)
		p.steps = done
	}
	if total > 0 && total != p.total {
		p.total = total
		p.bar.ChangeMax64(total)
	}
	now := time.Now()
	p.rate.observe(now, done)
	p.bar.Describe(progressLine(st, p.actionOrder, p.at, p.rate.perSecond(), p.rate.left(done, total)))
	_ = p.bar.Set64(done)
}

// progressLine is the bar's description: the backlog, a pipeline's records
// by action, the smoothed rate and the time left.
func progressLine(st broker.Progress, actions []string, at map[string]uint64, rate float64, left time.Duration) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "records (%d queued, %d in flight/waiting", st.Queued, st.AckPending)
	if len(at) > 0 {
		parts := make([]string, 0, len(actions))
		for _, a := range actions {
			parts = append(parts, fmt.Sprintf("%s %d", a, at[a]))
		}
		fmt.Fprintf(&sb, "; at %s", strings.Join(parts, ", "))
	}
	sb.WriteString(")")
	if rate > 0 && len(at) > 0 {
		fmt.Fprintf(&sb, " %.1f steps/s", rate) // a pipeline's bar counts steps (update)
	} else if rate > 0 {
		fmt.Fprintf(&sb, " %.1f rec/s", rate)
	}
	if left > 0 {
		fmt.Fprintf(&sb, ", ETA %s", roundLeft(left))
	}
	return sb.String()
}

// roundLeft rounds a time left to what a reader can use: seconds under two
// minutes, ten seconds under ten minutes, then minutes.
func roundLeft(d time.Duration) time.Duration {
	switch {
	case d < 2*time.Minute:
		return d.Round(time.Second)
	case d < 10*time.Minute:
		return d.Round(10 * time.Second)
	}
	return d.Round(time.Minute)
}

// rateEstimate is a job's finishing rate, smoothed: an exponentially
// weighted average of the rate between successive changes of the done
// count, with time constant rateTau. The count moves in steps (the results
// are counted every 2 s), so the rate between two polls swings between 0
// and a burst; between two changes it is what was finished in that time.
// A count that stays still for rateStall counts as a rate of 0, so a job
// that stopped does not keep its old ETA.
type rateEstimate struct {
	at   time.Time // when done last changed (or was first seen)
	done int64
	rate float64 // records/s; 0 until the first change
	seen bool
}

const (
	rateTau   = 20 * time.Second
	rateStall = 10 * time.Second
)

func (r *rateEstimate) observe(now time.Time, done int64) {
	if !r.seen {
		r.at, r.done, r.seen = now, done, true
		return
	}
	dt := now.Sub(r.at)
	if done == r.done && dt < rateStall || dt <= 0 {
		return
	}
	sample := float64(done-r.done) / dt.Seconds()
	if r.rate == 0 && done != r.done {
		r.rate = sample // the first change: nothing to average with yet
	} else {
		alpha := 1 - math.Exp(-dt.Seconds()/rateTau.Seconds())
		r.rate += alpha * (sample - r.rate)
	}
	r.at, r.done = now, done
}

func (r *rateEstimate) perSecond() float64 { return r.rate }

// left is the time the rest of total takes at the smoothed rate (0: unknown).
func (r *rateEstimate) left(done, total int64) time.Duration {
	if r.rate <= 0 || total <= done {
		return 0
	}
	return time.Duration(float64(total-done) / r.rate * float64(time.Second))
}

// follow is the bar's update for a wait (nil without a bar).
func (p *progress) follow(ctx context.Context, b *broker.Broker) func(*broker.Job, broker.Progress) {
	if p.bar == nil {
		return nil
	}
	return func(j *broker.Job, st broker.Progress) {
		p.actions(ctx, b, j)
		p.update(st.Done, j.Total, st)
	}
}

// finish ends the bar; once is enough, more is harmless.
func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
}
