package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Result statuses.
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// ResultError is a result's error (docs/design.md §5).
type ResultError struct {
	Class string `json:"class"`
	// Retryable: the record may succeed if it runs again as it is (a
	// transient or unknown failure, or a cancelled record); false for a
	// permanent failure (docs/results.md).
	Retryable bool   `json:"retryable"`
	Message   string `json:"message"` // the diagnostic: "failed permanently: …" or "failed after …"
}

// Failure is one failed attempt, as kept in a result.
type Failure struct {
	N        int    `json:"n"`
	Delivery int    `json:"delivery"`
	Class    string `json:"class"`
	Error    string `json:"error"`
	Repair   bool   `json:"repair,omitempty"`
}

// Recovery is how a record got to its result.
type Recovery struct {
	Attempts   int       `json:"attempts"`   // calls made, all deliveries
	Deliveries int       `json:"deliveries"` // JetStream deliveries used
	Repairs    int       `json:"repairs,omitempty"`
	Failures   []Failure `json:"failures,omitempty"`
	Classes    []string  `json:"classes,omitempty"` // distinct classes seen
	// Waits and Waited: the times the record was parked for its provider (a
	// shared cooldown, an open circuit) without a call, and how long in all.
	Waits  int           `json:"waits,omitempty"`
	Waited time.Duration `json:"waited_ns,omitempty"`
	// Lost is the deliveries that ended with no word from any worker (a
	// process killed or hung: AckWait ran out), after which it ran again;
	// HandBacks the deliveries stopping workers handed back.
	Lost      int `json:"lost,omitempty"`
	HandBacks int `json:"hand_backs,omitempty"`
	// Compacted is what the delivery that ended the action did about
	// context overflows (the action's overflow: block), in order.
	Compacted []Compaction `json:"compacted,omitempty"`
	// Routes are the moves the delivery that ended the action made to the
	// action's fallbacks, in order: the last one's provider and model
	// answered (Result.Provider, Result.Model).
	Routes []Route `json:"routes,omitempty"`
}

// Route is a move to one of an action's fallbacks.
type Route struct {
	// After is the attempt (Failure.N) that led to it; 0 when the
	// provider took no call (an open circuit, a cooldown).
	After int    `json:"after,omitempty"`
	From  string `json:"from"` // provider/model
	To    string `json:"to"`
	On    string `json:"on"` // the trigger: outage, or the failure's class
}

// Compaction is one answer to a context overflow: a field shortened, or a
// move to the fallback model, before the record's next call.
type Compaction struct {
	// After is the attempt (Failure.N) that overflowed; 0 when there was
	// none: the prompt was estimated not to fit a window an earlier record's
	// overflow named, and changed before it was sent.
	After int    `json:"after,omitempty"`
	Field string `json:"field,omitempty"` // the field shortened
	From  int    `json:"from,omitempty"`  // its characters before,
	To    int    `json:"to,omitempty"`    // and after
	Model string `json:"model,omitempty"` // the fallback moved to: provider/model
	// Note says it in words: "text 40,000 → 5,600 chars", "moved to
	// openai/gpt-4.1".
	Note string `json:"note"`
}

// Usage is tokens spent on the record, all attempts. Cached and cache-write
// tokens are parts of InputTokens, reasoning tokens part of OutputTokens
// (provider.Usage).
type Usage struct {
	InputTokens       int `json:"input_tokens"`
	OutputTokens      int `json:"output_tokens"`
	CachedInputTokens int `json:"cached_input_tokens,omitempty"`
	CacheWriteTokens  int `json:"cache_write_tokens,omitempty"`
	ReasoningTokens   int `json:"reasoning_tokens,omitempty"`
}

// Account is what one action cost a record, in one replay generation:
// one entry of Result.Actions. Attempts are the calls the provider
// answered (Recovery.Attempts), Calls every request sent (the same
// count since every call spends an attempt); LatencyMS is the wall time of the
// delivery that ended the action (its calls, in-session retries and
// backoff; not the time queued).
type Account struct {
	Action     string `json:"action"`
	Revision   int    `json:"revision,omitempty"` // of the job's workflow (1 when omitted)
	Status     string `json:"status"`             // StatusOK or StatusFailed
	Attempts   int    `json:"attempts"`
	Calls      int    `json:"calls"`
	Deliveries int    `json:"deliveries"`
	Repairs    int    `json:"repairs,omitempty"`
	Usage      Usage  `json:"usage"`
	LatencyMS  int64  `json:"latency_ms"`
	// Cost is what those calls cost, every delivery of the generation;
	// nil at an unknown price.
	Cost *float64 `json:"cost,omitempty"`
}

// Totals is a record's accounting over all its Actions entries.
type Totals struct {
	Attempts  int   `json:"attempts"`
	Calls     int   `json:"calls"`
	Usage     Usage `json:"usage"`
	LatencyMS int64 `json:"latency_ms"`
	// Cost adds up the entries' costs (nil when none is priced): the
	// record's cost, every action, generation and delivery.
	Cost *float64 `json:"cost,omitempty"`
}

// Sum adds up accounts.
func Sum(accounts []Account) Totals {
	var t Totals
	for _, a := range accounts {
		t.Attempts += a.Attempts
		t.Calls += a.Calls
		t.Usage.InputTokens += a.Usage.InputTokens
		t.Usage.OutputTokens += a.Usage.OutputTokens
		t.Usage.CachedInputTokens += a.Usage.CachedInputTokens
		t.Usage.CacheWriteTokens += a.Usage.CacheWriteTokens
		t.Usage.ReasoningTokens += a.Usage.ReasoningTokens
		t.LatencyMS += a.LatencyMS
		if a.Cost != nil {
			if t.Cost == nil {
				t.Cost = new(float64)
			}
			*t.Cost += *a.Cost
		}
	}
	return t
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
	// Deployment is the provider's deployment that answered (the last
	// call's), "" for a provider without deployments.
	Deployment string    `json:"deployment,omitempty"`
	Replays    int       `json:"replays,omitempty"`
	Finished   time.Time `json:"finished_at"`

	// FinishReason is the answer's normalised finish reason (stop, length,
	// content_filter, tool_calls, other), FinishReasonRaw the provider's
	// own word; empty when no call was answered.
	FinishReason    string `json:"finish_reason,omitempty"`
	FinishReasonRaw string `json:"finish_reason_raw,omitempty"`
	// Cost is what this action's calls for the record cost, in dollars, at
	// the action's price, every delivery of this replay generation;
	// TotalCost adds the record's earlier actions and generations. Nil when
	// the price is unknown.
	Cost      *float64 `json:"cost,omitempty"`
	TotalCost *float64 `json:"total_cost,omitempty"`
	// LatencyMS is how long the call that answered took, in milliseconds
	// (microsecond precision).
	LatencyMS float64 `json:"latency_ms,omitempty"`
	// Line is the record's line in the input file (results --sorted).
	Line int `json:"line,omitempty"`
	// Input holds the record fields the workflow's carry: names.
	Input map[string]any `json:"input,omitempty"`
	// Revision is the revision of the job's workflow that produced the
	// result (1 when omitted; jetpool retry --workflow makes more).
	Revision int `json:"revision,omitempty"`
	// Actions is the record's accounting, one entry per action run (and
	// per replay generation of a failed one), earlier actions first and
	// this one last; Totals adds them up. Usage above is Totals.Usage: the
	// tokens of the whole record, so that the results' usage sums to the
	// job's. Recovery is this action's story.
	Actions []Account `json:"actions,omitempty"`
	Totals  *Totals   `json:"totals,omitempty"`
	// RecordSum is the hash of the input record (Envelope.Sum): an input
	// fix re-runs the records whose sum changed.
	RecordSum string `json:"record_sum,omitempty"`
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

// WriteResult stores a result, idempotently: one message per subject of
// job, action, outcome and record.
func (b *Broker) WriteResult(ctx context.Context, r *Result) error {
	sent, rc := time.Now(), b.NextReconnect()
	f, err := b.PublishResult(r)
	if err != nil {
		return err
	}
	return AwaitPublish(ctx, f, sent, rc)
}

// PublishResult publishes a result without waiting for the store: wait on
// the future (AwaitPublish) before acting on the result being stored. Async
// publish, then a wait on its ack, stores a result as PublishMsg does,
// without a request (an inbox, a context and a timer) per result: many
// handlers share one reply subscription. Once the future's ack came, the
// caller may give the message's buffer back (ReleaseResult).
func (b *Broker) PublishResult(r *Result) (jetstream.PubAckFuture, error) {
	m, err := resultMsg(r)
	if err != nil {
		return nil, err
	}
	f, err := b.JS.PublishMsgAsync(m)
	if err != nil {
		return nil, fmt.Errorf("write result %s: %w", m.Subject, err)
	}
	return f, nil
}

// resultMsg is r's message on the results stream.
func resultMsg(r *Result) (*nats.Msg, error) {
	data, err := marshalResult(r) // json.Marshal's bytes, faster (resultjson.go)
	if err != nil {
		return nil, err
	}
	// No headers (no header map), and no Nats-Msg-Id: the stream keeps
	// one message per subject, so a result written twice is stored once,
	// and the server need not keep an id per result for the dedupe window.
	return &nats.Msg{Subject: ResultSubject(r.Job, r.Action, r.Outcome(), r.ID), Data: data}, nil
}

// ResultAckTimeout bounds the wait for a result's store ack, as a
// synchronous publish's default timeout did: a result whose ack is lost (a
// node gone, a stream leader being elected) is handed back for redelivery
// after a few seconds instead of holding its handler and a result slot for
// the library's PublishAckTimeout. A result stored after all is found by
// the redelivery's already-succeeded lookup, so it is not paid twice.
const ResultAckTimeout = 5 * time.Second

// resultTimers are AwaitPublish's timers, stopped (a stopped timer's channel
// holds nothing since Go 1.23).
var resultTimers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// AwaitPublish waits for a publish made at sent (PublishResult, or any
// async publish) to be stored, until ResultAckTimeout after sent. The
// deadline runs from the publish, not from the wait: publishes lost
// together (sent into a connection whose server froze) time out together,
// instead of one after another, each a full timeout behind the last, while
// their records wait unstored. For a publish sent ahead of reconnection rc
// (Broker.NextReconnect; nil: none known): should the connection reconnect
// before the ack comes, the wait ends ReconnectGrace after the
// reconnection, not ResultAckTimeout after the publish — the publish most
// likely went into a socket that died, and written again at once its
// record's answer is stored seconds sooner (a redelivery of the record
// from a new consumer leader finds it instead of paying again).
func AwaitPublish(ctx context.Context, f jetstream.PubAckFuture, sent time.Time, rc *Reconnect) error {
	select {
	case <-f.Ok():
		return nil
	default:
	}
	// A timer of the pool's: one is made and stopped for nearly every
	// result, and making them was a part of the worker's CPU.
	t := resultTimers.Get().(*time.Timer)
	t.Reset(max(time.Until(sent.Add(ResultAckTimeout)), 0))
	defer func() { t.Stop(); resultTimers.Put(t) }()
	var back <-chan struct{}
	if rc != nil {
		back = rc.Done()
	}
	for {
		select {
		case <-f.Ok():
			return nil
		case err := <-f.Err():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, err)
		case <-t.C:
			if back == nil && rc != nil {
				return fmt.Errorf("publish %s: no ack within %s of reconnecting: the write is made again", f.Msg().Subject, ReconnectGrace)
			}
			return fmt.Errorf("publish %s: no ack from the store within %s", f.Msg().Subject, ResultAckTimeout)
		case <-back:
			back = nil // the connection came back: a little longer for an ack of what it resent
			if grace := time.Until(rc.At().Add(ReconnectGrace)); grace < time.Until(sent.Add(ResultAckTimeout)) {
				t.Reset(max(grace, 0))
			}
		case <-ctx.Done():
			return fmt.Errorf("publish %s: %w", f.Msg().Subject, ctx.Err())
		}
	}
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

// LastOutcome returns the last result of any outcome stored for record and
// action (a wildcard last-by-subject lookup: one request), with its stream
// sequence; nil when there is none. A redelivered record reads it before it
// calls: an ok means the answer is already paid for, a failure of the same
// replay generation means its outcome was decided (a worker stopped between
// storing it and acking), one of an earlier generation is being replayed.
func (b *Broker) LastOutcome(ctx context.Context, job, action, record string) (*Result, uint64, error) {
	m, err := b.LastMsg(ctx, StreamResults, ResultSubject(job, action, "*", record))
	if err != nil || m == nil {
		return nil, 0, err
	}
	var r Result
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return nil, 0, fmt.Errorf("result %s: %w", m.Subject, err)
	}
	return &r, m.Sequence, nil
}

// EachResult calls fn for every result of a job (ordered consumer; constant
// memory), in stream order, on the caller's goroutine; the results are
// decoded beside the read (decode.go).
func (b *Broker) EachResult(ctx context.Context, job string, fn func(*Result) error) error {
	rctx, cancel := context.WithCancel(ctx)
	d := newOrderedDecoder()
	read := make(chan error, 1)
	go func() {
		defer d.finish()
		read <- b.ReadStream(rctx, StreamResults, []string{"jetpool.results." + job + ".>"}, func(msg jetstream.Msg) (bool, error) {
			return false, d.add(rctx, msg.Subject(), msg.Data())
		})
	}()
	defer func() {
		// However each ended (fn's error or panic too): the read stops and
		// nothing it started is left running.
		cancel()
		d.drain()
	}()
	err := d.each(fn)
	if err == nil {
		err = <-read // each ended with the queue: the read is over
	}
	if err != nil {
		return fmt.Errorf("read the results of job %s: %w", job, err)
	}
	return nil
}

// EachFinal calls fn with every result of a job and final reports whether
// it is the record's one final result in an export: its ok at the last
// action, or a failure that no ok supersedes. A record has one final result
// whatever the order its outcomes were stored in: a worker that stopped
// between storing a failure and acking it leaves the failure, and the
// redelivery finds it (worker/handle.go) — but should an ok at the last
// action also exist, the ok is the record's line and the failure is not
// (one lookup a failed result; failures are few).
func (b *Broker) EachFinal(ctx context.Context, j *Job, fn func(r *Result, final bool) error) error {
	last := ""
	if len(j.Actions) > 0 {
		last = j.Actions[len(j.Actions)-1]
	}
	return b.EachResult(ctx, j.ID, func(r *Result) error {
		switch {
		case r.Status == StatusOK:
			return fn(r, r.Action == last)
		default:
			ok, err := b.HasOK(ctx, j.ID, last, r.ID)
			if err != nil {
				return err
			}
			return fn(r, ok == nil)
		}
	})
}
