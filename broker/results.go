package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Result statuses.
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// ResultError is a result's error (DESIGN.md §5).
type ResultError struct {
	Class     string `json:"class"`
	Retryable bool   `json:"retryable"`
	Message   string `json:"message"` // the diagnostic: "failed permanently: …" or "failed after …"
}

// Failure is one failed attempt, as kept in a result.
type Failure struct {
	N        int    `json:"n"`
	Delivery int    `json:"delivery"`
	Class    string `json:"class"`
	Error    string `json:"error"`
	Absorbed bool   `json:"absorbed,omitempty"`
	Repair   bool   `json:"repair,omitempty"`
}

// Recovery is how a record got to its result.
type Recovery struct {
	Attempts   int       `json:"attempts"`   // calls made, all deliveries
	Deliveries int       `json:"deliveries"` // JetStream deliveries used
	Repairs    int       `json:"repairs,omitempty"`
	Failures   []Failure `json:"failures,omitempty"`
	Classes    []string  `json:"classes,omitempty"` // distinct classes seen
}

// Usage is tokens spent on the record, all attempts.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// Result is one final result of a record and action: one line of the results JSONL.
type Result struct {
	ID       string          `json:"id"`
	Status   string          `json:"status"`
	Output   any             `json:"output,omitempty"`
	Error    *ResultError    `json:"error,omitempty"`
	Reason   string          `json:"reason,omitempty"`
	Recovery Recovery        `json:"recovery"`
	Usage    Usage           `json:"usage"`
	Action   string          `json:"action"`
	Job      string          `json:"job"`
	Outputs  map[string]any  `json:"outputs,omitempty"` // earlier actions' outputs
	Record   json.RawMessage `json:"-"`
	Provider string          `json:"provider,omitempty"`
	Model    string          `json:"model,omitempty"`
	Replays  int             `json:"replays,omitempty"`
	Finished time.Time       `json:"finished_at"`
}

// Outcome is the result subject token: "ok" or the reason.
func (r *Result) Outcome() string {
	if r.Status == StatusOK {
		return OutcomeOK
	}
	if r.Reason == "" {
		return "failed"
	}
	return r.Reason
}

// WriteResult publishes a result, idempotently: one message per subject, and
// a Nats-Msg-Id of job, action, record, replay generation and outcome.
func (b *Broker) WriteResult(ctx context.Context, r *Result) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	subj := ResultSubject(r.Job, r.Action, r.Outcome(), r.ID)
	m := nats.NewMsg(subj)
	m.Data = data
	m.Header.Set(HeaderMsgID, "res."+r.Job+"."+r.Action+"."+RecordToken(r.ID)+"."+strconv.Itoa(r.Replays)+"."+r.Outcome())
	if _, err := b.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("write result %s: %w", subj, err)
	}
	return nil
}

// HasOK reports whether record already has a successful result for action.
func (b *Broker) HasOK(ctx context.Context, job, action, record string) (*Result, error) {
	m, err := b.LastMsg(ctx, StreamResults, ResultSubject(job, action, OutcomeOK, record))
	if err != nil || m == nil {
		return nil, err
	}
	var r Result
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, fmt.Errorf("result %s: %w", m.Subject, err)
	}
	return &r, nil
}

// DeleteResult removes the result of record for action with the given outcome, if any.
func (b *Broker) DeleteResult(ctx context.Context, job, action, outcome, record string) error {
	m, err := b.LastMsg(ctx, StreamResults, ResultSubject(job, action, outcome, record))
	if err != nil || m == nil {
		return err
	}
	return b.DeleteMsg(ctx, StreamResults, m.Sequence)
}

// EachResult calls fn for every result of a job (ordered consumer; constant memory).
func (b *Broker) EachResult(ctx context.Context, job string, fn func(*Result) error) error {
	c, err := b.JS.OrderedConsumer(ctx, StreamResults, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"jetpool.results." + job + ".>"},
	})
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	pending := info.NumPending
	if pending == 0 {
		return nil
	}
	it, err := c.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return err
	}
	defer it.Stop()
	for n := uint64(0); n < pending; n++ {
		msg, err := it.Next()
		if err != nil {
			return err
		}
		var r Result
		if err := json.Unmarshal(msg.Data(), &r); err != nil {
			return fmt.Errorf("result %s: %w", msg.Subject(), err)
		}
		if err := fn(&r); err != nil {
			return err
		}
		meta, err := msg.Metadata()
		if err == nil && meta.NumPending == 0 {
			break
		}
	}
	return nil
}

// Counts are a job's exact result counts, computed by the server.
type Counts struct {
	Total    int64            `json:"total"`     // records dispatched
	Done     int64            `json:"done"`      // records with a final result (ok at the last action, or failed)
	OK       int64            `json:"succeeded"` // records ok at the last action
	Failed   int64            `json:"failed"`    // records failed at some action
	ByReason map[string]int64 `json:"failed_by_reason,omitempty"`
}

// JobCounts counts a job's final results. With byReason it also splits
// failures by reason (one server query per reason).
func (b *Broker) JobCounts(ctx context.Context, j *Job, byReason bool) (Counts, error) {
	c := Counts{Total: j.Total}
	if len(j.Actions) == 0 {
		return c, nil
	}
	last := j.Actions[len(j.Actions)-1]
	all, err := b.Count(ctx, StreamResults, "jetpool.results."+j.ID+".>")
	if err != nil {
		return c, err
	}
	okAll := all
	{
		okAll, err = b.Count(ctx, StreamResults, ResultFilter(j.ID, "", OutcomeOK))
		if err != nil {
			return c, err
		}
	}
	okLast, err := b.Count(ctx, StreamResults, ResultFilter(j.ID, last, OutcomeOK))
	if err != nil {
		return c, err
	}
	c.OK = int64(okLast)
	c.Failed = int64(all - okAll)
	c.Done = c.OK + c.Failed
	if byReason && c.Failed > 0 {
		c.ByReason = map[string]int64{}
		for _, r := range reasons {
			n, err := b.Count(ctx, StreamResults, ResultFilter(j.ID, "", r))
			if err != nil {
				return c, err
			}
			if n > 0 {
				c.ByReason[r] = int64(n)
			}
		}
	}
	return c, nil
}

// reasons mirrors retry.Reasons (broker imports no policy).
var reasons = []string{"permanent", "exhausted", "context_overflow", "schema_violation", "programming_error",
	"bad_input", "max_deliveries", "batch_not_returned", "job_failed", "max_calls"}

// Progress is a job's live state: exact result counts and the work
// consumer's backlog.
type Progress struct {
	Counts
	Queued     uint64 // not yet delivered
	AckPending int    // in flight, or waiting for a delayed redelivery
	Paused     bool
}

// Drained reports whether nothing of the job is queued, in flight or waiting.
func (p Progress) Drained() bool { return p.Queued == 0 && p.AckPending == 0 }

// Finished reports whether every record of j has its final result (or j
// failed and nothing of it is left in flight).
func (p Progress) Finished(j *Job) bool {
	return j.Dispatched && p.Drained() && (p.Done >= j.Total || j.Status == JobFailed)
}

// JobProgress reads a job's progress.
func (b *Broker) JobProgress(ctx context.Context, j *Job, byReason bool) (Progress, error) {
	p, err := b.Backlog(ctx, j.ID)
	if err != nil {
		return p, err
	}
	c, err := b.JobCounts(ctx, j, byReason)
	if err != nil {
		return p, err
	}
	p.Counts = c
	return p, nil
}

// Backlog reads only the job consumer's queued and ack-pending counts: one
// cheap request, fit for tight polling (the result counts are not filled in).
func (b *Broker) Backlog(ctx context.Context, job string) (Progress, error) {
	var p Progress
	cons, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(job))
	if err != nil {
		return p, fmt.Errorf("job %s: %w", job, err)
	}
	info := cons.CachedInfo()
	p.Queued, p.AckPending, p.Paused = info.NumPending, info.NumAckPending, info.Paused
	return p, nil
}
