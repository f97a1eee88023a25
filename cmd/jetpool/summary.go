package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/jobstatus"
)

type summary struct {
	job       *broker.Job
	records   int64
	ok        int64
	failed    int64
	byClass   map[string]int64
	byReason  map[string]int64
	calls     int64 // every request sent (Totals.Calls)
	attempts  int64 // the calls the provider answered (Totals.Attempts)
	extra     int64 // calls beyond the first per record and action: retries, repairs, replays
	recovered int64 // ok records that took extra calls
	tokensIn  int64
	tokensOut int64
	// cost (summary_cost.go): what the results hold, in all and by action;
	// unpriced counts results with calls at an unknown price. The job's own
	// ledger (job.Cost) is the figure printed; these say where it went.
	cost         float64
	costByAction map[string]float64
	unpriced     int64
	cached       int64
	reasoning    int64
	providers    []string // a line per provider's limiter (status_limits.go)
}

// tally is what one record's final result says it cost, over all its
// actions and generations (broker.Result.Totals; a result stored before
// results carried totals says it of its own action), and its extra calls:
// those beyond the first of each of its actions.
func tally(r *broker.Result) (t broker.Totals, extra int64) {
	if r.Totals == nil {
		t = broker.Totals{Attempts: r.Recovery.Attempts, Calls: r.Recovery.Attempts, Usage: r.Usage}
		return t, int64(max(t.Calls-1, 0))
	}
	t = *r.Totals
	calls := map[string]int{}
	for _, a := range r.Actions {
		calls[a.Action] += a.Calls
	}
	for _, n := range calls {
		extra += int64(max(n-1, 0))
	}
	return t, extra
}

// summarize reads every result of the job once, writes the final result of
// each record to output (when set) and counts.
func summarize(ctx context.Context, b *broker.Broker, job *broker.Job, output string) (*summary, error) {
	s := &summary{job: job, byClass: map[string]int64{}, byReason: map[string]int64{}}
	var w *bufio.Writer
	var tmp *os.File
	if output != "" {
		var err error
		tmp, err = createBeside(output)
		if err != nil {
			return nil, err
		}
		defer os.Remove(tmp.Name())
		defer tmp.Close()
		w = bufio.NewWriterSize(tmp, 1<<20)
	}
	enc := json.NewEncoder(io.Discard)
	if w != nil {
		enc = json.NewEncoder(w)
		enc.SetEscapeHTML(false)
	}
	// Every figure comes from the records' final results, which carry the
	// accounting of all their actions: the summary says what the results
	// file says.
	err := b.EachFinal(ctx, job, func(r *broker.Result, final bool) error {
		if !final {
			return nil // the record's final result carries this one's accounting
		}
		s.addCost(r) // summary_cost.go: the record's cost, by action
		t, extra := tally(r)
		s.calls += int64(t.Calls)
		s.attempts += int64(t.Attempts)
		s.extra += extra
		s.tokensIn += int64(t.Usage.InputTokens)
		s.tokensOut += int64(t.Usage.OutputTokens)
		s.records++
		if r.Status == broker.StatusOK {
			s.ok++
			if extra > 0 {
				s.recovered++
			}
		} else {
			s.failed++
			cls := "unknown"
			if r.Error != nil && r.Error.Class != "" {
				cls = r.Error.Class
			}
			s.byClass[cls]++
			s.byReason[r.Reason]++
		}
		return enc.Encode(r)
	})
	if err != nil {
		return nil, err
	}
	// The job's ledger, read once every result is: the workers add their
	// last spend as they stop serving the job.
	if j, _, err := b.GetJob(ctx, job.ID); err == nil {
		s.job = j
	}
	if w != nil {
		if err := w.Flush(); err != nil {
			return nil, err
		}
		if err := tmp.Sync(); err != nil {
			return nil, err
		}
		if err := tmp.Close(); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp.Name(), output); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// createBeside creates a new temporary file in output's directory, to be
// renamed to output when it is complete, with the mode os.Create gives
// (0666 less the umask; os.CreateTemp's 0600 made a results file that
// others the umask allows could not read).
func createBeside(output string) (*os.File, error) {
	dir := filepath.Dir(output)
	for range 100 {
		name := filepath.Join(dir, fmt.Sprintf(".jetpool-results-%016x", rand.Uint64()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("%s: no free temporary name for the results", dir)
}

func (s *summary) print(e *env, elapsed time.Duration, callsThisRun int64) {
	out := e.stdout
	status := "completed"
	switch s.job.Status {
	case broker.JobFailed:
		status = "FAILED"
	case broker.JobCancelled:
		status = "CANCELLED"
	}
	fmt.Fprintf(out, "job %s %s: %d records, %d succeeded, %d failed\n", s.job.ID, status, s.records, s.ok, s.failed)
	if s.failed > 0 {
		fmt.Fprintf(out, "  failed by class:  %s\n", kvList(s.byClass))
		fmt.Fprintf(out, "  failed by reason: %s\n", kvList(s.byReason))
	}
	// Calls come from the results (all runs of the job, every action);
	// "this run" is this process's.
	fmt.Fprintf(out, "  calls: %d (%d extra: retries, repairs, replays), attempts: %d, records recovered: %d; model calls this run: %d\n",
		s.calls, s.extra, s.attempts, s.recovered, callsThisRun)
	if s.tokensIn+s.tokensOut > 0 {
		fmt.Fprintf(out, "  tokens: %d in, %d out%s\n", s.tokensIn, s.tokensOut, s.tokenParts())
	}
	s.printCost(out) // summary_cost.go
	rate := float64(s.records) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(out, "  elapsed: %s, %.1f records/s\n", elapsed.Round(time.Millisecond), rate)
	for _, p := range s.providers {
		fmt.Fprintf(out, "  %s\n", p)
	}
	if s.failed > 0 {
		fmt.Fprintf(out, "  dead letters: jetpool dlq list --job %s   replay: jetpool retry --job %s\n", s.job.ID, s.job.ID)
	}
	if s.job.Stopped() {
		fmt.Fprintf(out, "  why: %s\n", s.job.Reason)
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

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
