package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/jetpool/jetpool/broker"
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
	extra     int64 // calls beyond one per action that succeeded: retries, repairs, replays
	recovered int64 // ok records that took extra calls
	tokensIn  int64
	tokensOut int64
}

// tally is what one record's final result says it cost, over all its
// actions (broker.Result.Totals; a result stored before results carried
// totals says it of its own action).
func tally(r *broker.Result) (t broker.Totals, extra int64) {
	okActions := 0
	if r.Totals != nil {
		t = *r.Totals
		for _, a := range r.Actions {
			if a.Status == broker.StatusOK {
				okActions++
			}
		}
	} else {
		t = broker.Totals{Attempts: r.Recovery.Attempts, Calls: r.Recovery.Attempts, Usage: r.Usage}
		if r.Status == broker.StatusOK {
			okActions = 1
		}
	}
	return t, max(int64(t.Calls-okActions), 0)
}

// summarize reads every result of the job once, writes the final result of
// each record to output (when set) and counts.
func summarize(ctx context.Context, b *broker.Broker, job *broker.Job, output string) (*summary, error) {
	s := &summary{job: job, byClass: map[string]int64{}, byReason: map[string]int64{}}
	var w *bufio.Writer
	var tmp *os.File
	if output != "" {
		var err error
		tmp, err = os.CreateTemp(filepath.Dir(output), ".jetpool-results-*")
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
			return nil
		}
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

func (s *summary) print(e *env, elapsed time.Duration, callsThisRun int64) {
	out := e.stdout
	status := "completed"
	if s.job.Status == broker.JobFailed {
		status = "FAILED"
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
		fmt.Fprintf(out, "  tokens: %d in, %d out\n", s.tokensIn, s.tokensOut)
	}
	rate := float64(s.records) / max(elapsed.Seconds(), 1e-9)
	fmt.Fprintf(out, "  elapsed: %s, %.1f records/s\n", elapsed.Round(time.Millisecond), rate)
	if s.failed > 0 {
		fmt.Fprintf(out, "  dead letters: jetpool dlq list --job %s   replay: jetpool retry --job %s\n", s.job.ID, s.job.ID)
	}
	if s.job.Status == broker.JobFailed {
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
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("rec"),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)}
}

func (p *progress) update(done, total int64, st broker.Progress) {
	if p.bar == nil {
		return
	}
	if total > 0 && total != p.total {
		p.total = total
		p.bar.ChangeMax64(total)
	}
	p.bar.Describe(fmt.Sprintf("records (%d queued, %d in flight/waiting)", st.Queued, st.AckPending))
	_ = p.bar.Set64(done)
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
