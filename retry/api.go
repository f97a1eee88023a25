package retry

import (
	"context"
	"time"
)

// OnExhausted says what happens to the job when a record's retries are spent.
type OnExhausted string

const (
	// ReturnLast records the last response/error with status failed; the job goes on.
	ReturnLast OnExhausted = "return_last"
	// Raise fails the job.
	Raise OnExhausted = "raise"
)

// Defaults and bounds of Policy (docs/design.md §1–§2).
const (
	MaxAttemptsDefault      = 3
	MaxAttemptsMin          = 1
	MaxAttemptsMax          = 10
	BackoffDefault          = 2 * time.Second
	MaxBackoffDefault       = 60 * time.Second
	MaxDeliveriesDefault    = 3
	MaxDeliveriesMax        = 20
	RedeliverBackoffDefault = 1500 * time.Millisecond
	OnExhaustedDefault      = ReturnLast
	// MaxWaitDefault bounds how long, in all, a record may wait for its
	// provider (a shared cooldown, an open circuit) without a call before it
	// is dead-lettered with ReasonMaxWait. Waiting is not an attempt, so it
	// is bounded apart from them, retry on or off. It outlasts a capped
	// Retry-After (10 min) and a few doubled circuit cooldowns.
	MaxWaitDefault = 30 * time.Minute
	// LostDeliveriesMax is how many of a record's deliveries may end with no
	// word from any worker (the process was killed or hung each time, and
	// AckWait ran out) while the record ran alone in it, before it is a
	// poison record: dead-lettered with ReasonMaxDeliveries before it runs
	// again (the worker decides which losses are a record's own:
	// worker/poison.go). jetpool counts them itself (broker.RecordState),
	// not through the server's MaxDeliver advisories, which a full store
	// cannot keep.
	LostDeliveriesMax = 3
	// LostBeforeAlone is how many deliveries a record may lose with a
	// process before it runs alone in its process (worker/poison.go), its
	// later losses its own. A record's lost deliveries that made calls are
	// thus at most LostBeforeAlone + LostDeliveriesMax (Bound.Killed).
	LostBeforeAlone = 2
)

// Policy is the retry configuration of one action, both layers.
// The zero value is "retry off": one call, one delivery.
type Policy struct {
	Enabled     bool
	MaxAttempts int           // session calls per delivery; MaxAttemptsDefault
	Backoff     time.Duration // session base delay; BackoffDefault
	MaxBackoff  time.Duration // cap of one session delay; MaxBackoffDefault
	// Budget is the longest a session may spend waiting between its calls
	// (0: the sum of its scheduled delays). A Retry-After beyond what is left
	// hands the record over to the exec layer instead of sleeping.
	Budget           time.Duration
	OnExhausted      OnExhausted
	MaxDeliveries    int           // exec layer deliveries; MaxDeliveriesDefault
	RedeliverBackoff time.Duration // exec base delay; RedeliverBackoffDefault
	// MaxWait bounds the record's waits for its provider, in all
	// (MaxWaitDefault, also when retry is off).
	MaxWait time.Duration
}

// Reason is why a record ended in the dead-letter stream.
type Reason string

// Dead-letter reasons (docs/design.md §4).
const (
	ReasonPermanent        Reason = "permanent"
	ReasonExhausted        Reason = "exhausted"
	ReasonContextOverflow  Reason = "context_overflow"
	ReasonSchemaViolation  Reason = "schema_violation"
	ReasonProgrammingError Reason = "programming_error"
	ReasonBadInput         Reason = "bad_input"
	ReasonMaxDeliveries    Reason = "max_deliveries"
	ReasonBatchNotReturned Reason = "batch_not_returned"
	ReasonJobFailed        Reason = "job_failed"
	ReasonMaxCalls         Reason = "max_calls"
	// ReasonMaxWait: the record waited for its provider (a shared cooldown,
	// an open circuit) past max_wait; the diagnostic says whether any call
	// was made.
	ReasonMaxWait Reason = "max_wait"
	// ReasonTooLarge: the record, or the answer to store for it, is larger
	// than the server accepts (max_payload), so it can never be stored.
	ReasonTooLarge      Reason = "too_large"
	ReasonTruncated     Reason = "truncated"      // the answer was cut at max_tokens
	ReasonContentFilter Reason = "content_filter" // a safety filter stopped the answer
	// ReasonBudget: the job's max_cost was reached before the record's
	// call; nothing was spent on it. `jetpool retry` runs it once the
	// budget is raised.
	ReasonBudget Reason = "budget"
	// ReasonCancelled: the job was cancelled (jetpool job cancel) before
	// the record's next call; nothing more was spent on it. `jetpool retry
	// --reason cancelled` runs it.
	ReasonCancelled Reason = "cancelled"
)

// Reasons lists every reason.
var Reasons = []Reason{ReasonPermanent, ReasonExhausted, ReasonContextOverflow, ReasonSchemaViolation,
	ReasonProgrammingError, ReasonBadInput, ReasonMaxDeliveries, ReasonBatchNotReturned, ReasonJobFailed, ReasonMaxCalls,
	ReasonMaxWait, ReasonTooLarge, ReasonTruncated, ReasonContentFilter, ReasonBudget, ReasonCancelled}

// Clock abstracts time for the session loop so tests can use a fake.
type Clock interface {
	Now() time.Time
	// Sleep waits d or until ctx is done, returning ctx.Err() in that case.
	Sleep(ctx context.Context, d time.Duration) error
}

// History is a session's message history. Before each attempt the session
// remembers Len(); after a failed attempt it truncates back to it, so a failed
// assistant turn never reaches the next prompt.
type History interface {
	Len() int
	Truncate(n int)
}

// Attempt is one call, as recorded in a result's recovery and in diagnostics.
type Attempt struct {
	N        int       `json:"n"`        // 1-based across deliveries
	Delivery int       `json:"delivery"` // 1-based JetStream delivery
	Class    Class     `json:"class,omitempty"`
	Error    string    `json:"error,omitempty"` // "TypeName: message"
	At       time.Time `json:"at"`
	// Batch is true for a provider batch round (N is the round): a call
	// that counts against max_calls, not a repair of an online session.
	Batch bool `json:"batch,omitempty"`
}

// Verdict is what the exec layer does with a delivery.
type Verdict int

const (
	VerdictDone       Verdict = iota // ack: success, or a failure recorded under return_last
	VerdictRedeliver                 // NakWithDelay(Delay)
	VerdictDeadLetter                // dead-letter with Reason, then terminate
)

// Decision is the exec layer's answer for one delivery.
type Decision struct {
	Verdict Verdict
	Delay   time.Duration // for VerdictRedeliver
	Reason  Reason        // for VerdictDeadLetter
}
