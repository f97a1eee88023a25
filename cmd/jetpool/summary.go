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
	calls     int64
	retries   int64
	recovered int64 // ok records that needed more than one call
	tokensIn  int64
	tokensOut int64
	providers []string // a line per provider's limiter (status_limits.go)
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
	last := ""
	if len(job.Actions) > 0 {
		last = job.Actions[len(job.Actions)-1]
	}
	enc := json.NewEncoder(io.Discard)
	if w != nil {
		enc = json.NewEncoder(w)
		enc.SetEscapeHTML(false)
	}
	err := b.EachResult(ctx, job.ID, func(r *broker.Result) error {
		s.calls += int64(r.Recovery.Attempts)
		s.tokensIn += int64(r.Usage.InputTokens)
		s.tokensOut += int64(r.Usage.OutputTokens)
		final := r.Status == broker.StatusFailed || r.Action == last
		if !final {
			return nil
		}
		s.records++
		if r.Status == broker.StatusOK {
			s.ok++
			if r.Recovery.Attempts > 1 {
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
	actionResults := s.records // lower bound of calls needed
	retries := s.calls - actionResults
	if retries < 0 {
		retries = 0
	}
	// Attempts come from the results (all runs of the job); calls are this
	// process's. Every call is an attempt, a 429 included.
	fmt.Fprintf(out, "  attempts: %d, retries spent: %d, records recovered by retry: %d; model calls this run: %d\n",
		s.calls, retries, s.recovered, callsThisRun)
	if s.tokensIn+s.tokensOut > 0 {
		fmt.Fprintf(out, "  tokens: %d in, %d out\n", s.tokensIn, s.tokensOut)
	}
	rate := float64(s.records) / elapsed.Seconds()
	fmt.Fprintf(out, "  elapsed: %s, %.1f records/s\n", elapsed.Round(time.Millisecond), rate)
	for _, p := range s.providers {
		fmt.Fprintf(out, "  %s\n", p)
	}
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
