package jetpool

import (
	"bufio"
	"context"
	"encoding/json"
	"io"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/export"
)

// Summary is what a job's final results say, one per record: how many
// succeeded, failed (and why) and were cancelled, the calls, tokens and cost. Every figure
// comes from the records' final results, which carry the accounting of all
// their actions: the summary says what the results file says.
type Summary struct {
	// Job is the job's entry, read once every result is: its ledger
	// (Job.Cost) holds what the workers spent, wherever they ran.
	Job                 *broker.Job
	Records, OK, Failed int64
	// Cancelled is the records a cancel ended (broker.StatusCancelled):
	// not counted in Failed, as status keeps them apart.
	Cancelled int64
	// ByClass and ByReason count the failed records by error class and
	// dead-letter reason.
	ByClass, ByReason map[string]int64
	Calls             int64 // every request sent (broker.Totals.Calls)
	Attempts          int64 // the calls the provider answered
	Extra             int64 // calls beyond the first per record and action: retries, repairs, replays
	Recovered         int64 // ok records that took extra calls
	TokensIn          int64
	TokensOut         int64
	Cached            int64 // input tokens read from the provider's cache
	Reasoning         int64 // output tokens spent reasoning
	// Cost is what the results hold, CostByAction by action; Unpriced
	// counts results with calls at an unknown price.
	Cost         float64
	CostByAction map[string]float64
	Unpriced     int64
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

// Add counts one record's final result.
func (s *Summary) Add(r *broker.Result) {
	if s.ByClass == nil {
		s.ByClass, s.ByReason = map[string]int64{}, map[string]int64{}
	}
	s.addCost(r)
	t, extra := tally(r)
	s.Calls += int64(t.Calls)
	s.Attempts += int64(t.Attempts)
	s.Extra += extra
	s.TokensIn += int64(t.Usage.InputTokens)
	s.TokensOut += int64(t.Usage.OutputTokens)
	s.Records++
	if r.Status == broker.StatusOK {
		s.OK++
		if extra > 0 {
			s.Recovered++
		}
		return
	}
	if r.Status == broker.StatusCancelled {
		s.Cancelled++
		return
	}
	s.Failed++
	cls := "unknown"
	if r.Error != nil && r.Error.Class != "" {
		cls = r.Error.Class
	}
	s.ByClass[cls]++
	s.ByReason[r.Reason]++
}

// addCost adds a record's final result to the summary's cost: its total
// (every action, generation and delivery: broker.Totals), by action.
func (s *Summary) addCost(r *broker.Result) {
	s.Cached += int64(r.Usage.CachedInputTokens)
	s.Reasoning += int64(r.Usage.ReasoningTokens)
	priced, unpriced := false, false
	for _, a := range r.Actions {
		if a.Cost == nil {
			unpriced = unpriced || a.Usage.InputTokens+a.Usage.OutputTokens > 0
			continue
		}
		s.addActionCost(a.Action, *a.Cost)
		priced = true
	}
	if !priced && r.TotalCost != nil {
		// A result stored before accounts carried their cost.
		s.addActionCost(r.Action, *r.TotalCost)
		unpriced = false
	} else if len(r.Actions) == 0 && r.Cost == nil {
		unpriced = r.Usage.InputTokens+r.Usage.OutputTokens > 0
	}
	if unpriced {
		s.Unpriced++
	}
}

func (s *Summary) addActionCost(action string, c float64) {
	if s.CostByAction == nil {
		s.CostByAction = map[string]float64{}
	}
	s.Cost += c
	s.CostByAction[action] += c
}

// Summarize reads every result of the job once, writes the final result of
// each record as JSONL to output (when set; atomically, by a rename:
// export.ToFile) and counts.
func (c *Client) Summarize(ctx context.Context, job *broker.Job, output string) (*Summary, error) {
	if output == "" {
		return c.summarize(ctx, job, io.Discard)
	}
	return export.ToFile(output, func(f io.Writer) (*Summary, error) {
		w := bufio.NewWriterSize(f, 1<<20)
		s, err := c.summarize(ctx, job, w)
		if err != nil {
			return nil, err
		}
		return s, w.Flush()
	})
}

// summarize counts the job's final results, writing each to w as JSONL.
func (c *Client) summarize(ctx context.Context, job *broker.Job, w io.Writer) (*Summary, error) {
	s := &Summary{Job: job, ByClass: map[string]int64{}, ByReason: map[string]int64{}}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	err := c.b.EachFinal(ctx, job, func(r *broker.Result, final bool) error {
		if !final {
			return nil // the record's final result carries this one's accounting
		}
		s.Add(r)
		return enc.Encode(r)
	})
	if err != nil {
		return nil, err
	}
	// The job's ledger, read once every result is: the workers add their
	// last spend as they stop serving the job.
	if j, _, err := c.b.GetJob(ctx, job.ID); err == nil {
		s.Job = j
	}
	return s, nil
}
