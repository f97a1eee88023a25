package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
)

// Result statuses.
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// ResultError is a result's error (docs/design.md §5).
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

// Counts are a job's exact result counts, computed by the server.
type Counts struct {
	Total    int64            `json:"total"`     // records dispatched
	Done     int64            `json:"done"`      // records with a final result (ok at the last action, or failed)
	OK       int64            `json:"succeeded"` // records ok at the last action
	Failed   int64            `json:"failed"`    // records failed at some action
	ByReason map[string]int64 `json:"failed_by_reason,omitempty"`
}

// JobCounts counts a job's final results. With byReason it also splits
// failures by reason (one server query per reason, only when some failed).
//
// Each figure is one server-side count taken at one instant, so the figures
// must not be derived from each other by subtraction: Failed used to be
// "all results − ok results" from two counts taken at different moments,
// which undercounted (or went negative) while results arrived, and then
// disagreed with ByReason. Failed is now counted directly over every failure
// outcome at once, or is the sum of ByReason when that is asked for, so the
// split always adds up to it.
//
// OK and Failed are read from the job's two counting consumers (see
// EnsureCounters): O(1) whatever the size of the job.
func (b *Broker) JobCounts(ctx context.Context, j *Job, byReason bool) (Counts, error) {
	c := Counts{Total: j.Total}
	if len(j.Actions) == 0 {
		return c, nil
	}
	ok, failed, err := b.counters(ctx, j)
	if err != nil {
		return c, err
	}
	c.OK, c.Failed = int64(ok), int64(failed)
	if byReason && failed > 0 {
		c.Failed = 0
		for _, r := range failureOutcomes {
			n, err := b.Count(ctx, StreamResults, ResultFilter(j.ID, "", r))
			if err != nil {
				return c, err
			}
			if n > 0 {
				if c.ByReason == nil {
					c.ByReason = map[string]int64{}
				}
				c.ByReason[r] = int64(n)
				c.Failed += int64(n)
			}
		}
	}
	c.Done = c.OK + c.Failed
	return c, nil
}

// CounterIdle is how long a counting consumer lives without being pulled
// (it never is): the server removes it then, so the consumers of old jobs
// do not pile up on the results stream, and the next count of its job makes
// it again (one walk over the job's results).
const CounterIdle = 24 * time.Hour

// CounterName is the name of a job's counting consumer on the results
// stream: "ok" counts the records ok at the last action, "failed" the
// records failed at any action.
func CounterName(job, what string) string { return "jetpool-count-" + job + "-" + what }

func counterConfigs(j *Job) []jetstream.ConsumerConfig {
	last := j.Actions[len(j.Actions)-1]
	failed := make([]string, len(failureOutcomes))
	for i, r := range failureOutcomes {
		failed[i] = ResultFilter(j.ID, "", r)
	}
	mk := func(what string, filters ...string) jetstream.ConsumerConfig {
		return jetstream.ConsumerConfig{Durable: CounterName(j.ID, what), FilterSubjects: filters,
			Description:       "jetpool: counts results of job " + j.ID + " (" + what + "); never consumed",
			AckPolicy:         jetstream.AckNonePolicy,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			InactiveThreshold: CounterIdle}
	}
	return []jetstream.ConsumerConfig{mk("ok", ResultFilter(j.ID, last, OutcomeOK)), mk("failed", failed...)}
}

// EnsureCounters makes the job's two counting consumers on the results
// stream, if missing. They are durable and never consumed: the server keeps
// their pending count up to date as results are stored and replaced (O(1)
// per result), so reading a job's counts is one consumer-info request each,
// not a walk over the job's result subjects. Made by the dispatcher before
// any result exists; made on first use (one walk) for an older job.
func (b *Broker) EnsureCounters(ctx context.Context, j *Job) error {
	_, _, err := b.counters(ctx, j)
	return err
}

func (b *Broker) counters(ctx context.Context, j *Job) (ok, failed uint64, err error) {
	var n [2]uint64
	leader := b.leaderView(StreamResults)
	for i, cc := range counterConfigs(j) {
		c, err := b.JS.Consumer(ctx, StreamResults, cc.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || (err == nil && !sameFilters(c.CachedInfo().Config, cc)) {
			// Missing, or made by a version that knew fewer failure
			// reasons (a cancelled record would go uncounted).
			c, err = b.JS.CreateOrUpdateConsumer(ctx, StreamResults, cc)
		}
		if err != nil {
			return 0, 0, fmt.Errorf("count results of job %s: %w", j.ID, err)
		}
		n[i] = c.CachedInfo().NumPending
		if !leader.onCurrentMember(ctx, c.CachedInfo()) {
			// Its leader's copy is behind (a node catching up): counted
			// afresh on the stream's leader instead.
			if n[i], err = b.countOnLeader(ctx, leader, cc.FilterSubjects...); err != nil {
				return 0, 0, err
			}
		}
	}
	return n[0], n[1], nil
}

// sameFilters reports whether a consumer's filters are the ones cc sets
// (a server may keep a single filter as FilterSubject).
func sameFilters(have, cc jetstream.ConsumerConfig) bool {
	h := have.FilterSubjects
	if have.FilterSubject != "" {
		h = append(slices.Clone(h), have.FilterSubject)
	}
	return slices.Equal(slices.Sorted(slices.Values(h)), slices.Sorted(slices.Values(cc.FilterSubjects)))
}

// countFiltered counts the messages of stream matching any of filters at
// one instant: an ephemeral consumer's pending count, computed by the server
// by walking the matching subjects.
//
// The consumer counts on the member it is placed on, which may be behind:
// only the leader's count is taken (broker/current.go).
func (b *Broker) countFiltered(ctx context.Context, stream string, filters ...string) (uint64, error) {
	return b.countOnLeader(ctx, b.leaderView(stream), filters...)
}

func (b *Broker) countOnLeader(ctx context.Context, leader *leaderView, filters ...string) (uint64, error) {
	stream := leader.stream
	for try := 1; try <= placeTries; try++ {
		if err := placePause(ctx, try); err != nil {
			return 0, fmt.Errorf("count %s %v: %w", stream, filters, err)
		}
		c, err := b.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			FilterSubjects:    filters,
			AckPolicy:         jetstream.AckNonePolicy,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			InactiveThreshold: 10 * time.Second,
			MemoryStorage:     true,
			Replicas:          1,
		})
		if err != nil {
			return 0, fmt.Errorf("count %s %v: %w", stream, filters, err)
		}
		info := c.CachedInfo()
		_ = b.JS.DeleteConsumer(context.WithoutCancel(ctx), stream, info.Name)
		if leader.onLeader(ctx, info) {
			return info.NumPending, nil
		}
	}
	return 0, fmt.Errorf("count %s %v: no count could be placed on the stream's leader in %d tries", stream, filters, placeTries)
}

// failureOutcomes are the outcome tokens of failed results: every reason,
// and "failed" for a failure without one (Result.Outcome).
var failureOutcomes = func() []string {
	out := make([]string, 0, len(retry.Reasons)+1)
	for _, r := range retry.Reasons {
		out = append(out, string(r))
	}
	return append(out, "failed")
}()

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
// failed or was cancelled, and nothing of it is left in flight).
func (p Progress) Finished(j *Job) bool {
	return j.Dispatched && p.Drained() && (p.Done >= j.Total || j.Stopped())
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
// A job without a work consumer has nothing to deliver: its consumer goes
// once it has finished (Sweep), so it reads as drained.
func (b *Broker) Backlog(ctx context.Context, job string) (Progress, error) {
	var p Progress
	cons, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(job))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("job %s: %w", job, err)
	}
	info := cons.CachedInfo()
	p.Queued, p.AckPending, p.Paused = info.NumPending, info.NumAckPending, info.Paused
	return p, nil
}
