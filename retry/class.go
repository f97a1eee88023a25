package retry

import (
	"errors"
	"time"
)

// Class is the category of a failed call. It decides what each retry layer does.
type Class string

// The classes of docs/design.md §1.
const (
	ClassNone            Class = ""
	ClassRateLimit       Class = "rate_limit"
	ClassServer          Class = "server"
	ClassNetwork         Class = "network"
	ClassContextOverflow Class = "context_overflow"
	ClassAuth            Class = "auth"
	ClassInvalidRequest  Class = "invalid_request"
	ClassSchemaViolation Class = "schema_violation"
	ClassProgramming     Class = "programming"
	ClassUnknown         Class = "unknown"
	// ClassTruncated: the call succeeded but the answer was cut at
	// max_tokens (finish_reason length). The same request is cut again, so
	// neither layer calls again; the partial answer is kept.
	ClassTruncated Class = "truncated"
	// ClassContentFilter: the call succeeded but a safety filter stopped or
	// refused the answer (finish_reason content_filter). Permanent too.
	ClassContentFilter Class = "content_filter"
	// ClassBudget: the job's max_cost left no room for the call's worst
	// case, so no call was made. Permanent for both layers: only a larger
	// budget (jetpool retry --max-cost) runs the record.
	ClassBudget Class = "budget"
)

// Classes lists every class, in the order of docs/design.md §1.
var Classes = []Class{ClassRateLimit, ClassServer, ClassNetwork, ClassContextOverflow,
	ClassAuth, ClassInvalidRequest, ClassSchemaViolation, ClassProgramming, ClassUnknown,
	ClassTruncated, ClassContentFilter, ClassBudget}

// Transient reports whether the class is one that both layers retry.
func (c Class) Transient() bool {
	return c == ClassRateLimit || c == ClassServer || c == ClassNetwork
}

// Permanent reports whether neither layer may ever retry the class.
func (c Class) Permanent() bool {
	switch c {
	case ClassAuth, ClassInvalidRequest, ClassContextOverflow, ClassSchemaViolation, ClassProgramming,
		ClassTruncated, ClassContentFilter, ClassBudget:
		return true
	}
	return false
}

// TypeName is the diagnostic type name used for errors of the class when the
// provider gave none, e.g. "RateLimitError".
func (c Class) TypeName() string {
	switch c {
	case ClassRateLimit:
		return "RateLimitError"
	case ClassServer:
		return "ServerError"
	case ClassNetwork:
		return "NetworkError"
	case ClassContextOverflow:
		return "ContextOverflowError"
	case ClassAuth:
		return "AuthError"
	case ClassInvalidRequest:
		return "InvalidRequestError"
	case ClassSchemaViolation:
		return "SchemaViolationError"
	case ClassProgramming:
		return "ProgrammingError"
	case ClassTruncated:
		return "TruncatedError"
	case ClassContentFilter:
		return "ContentFilterError"
	case ClassBudget:
		return "BudgetError"
	}
	return "Error"
}

// Error is one failed call, normalised. Providers return it; the retry layers
// read it. Its text is always "TypeName: message", or just "TypeName".
type Error struct {
	Class    Class  // decided by Classify when empty
	TypeName string // e.g. "RateLimitError"; Class.TypeName() when empty
	Message  string // the provider's own message, never an API key

	Status       int    // HTTP status, 0 when none
	ProviderType string // provider error type, e.g. "overloaded_error", "RESOURCE_EXHAUSTED"
	ProviderCode string // provider error code, e.g. "context_length_exceeded", "API_KEY_INVALID"

	// RetryAfter is the provider's Retry-After (or retry-after-ms), 0 when none.
	RetryAfter time.Duration
	// Reset is the longest of the provider's rate-limit reset headers
	// (x-ratelimit-reset-*, anthropic-ratelimit-*-reset), 0 when none.
	Reset time.Duration
	// RateLimit is what the response's rate-limit headers said (the
	// provider's buckets), and whether a wait was capped.
	RateLimit RateLimit

	Provider string
	Model    string

	Err error // the underlying Go error, if any
}

func (e *Error) Error() string {
	name := e.TypeName
	if name == "" {
		name = e.Class.TypeName()
	}
	if e.Message == "" {
		return name
	}
	return name + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// Wait is the shortest time the provider asked us to wait before calling again.
func (e *Error) Wait() time.Duration {
	return max(e.RetryAfter, e.Reset)
}

// AsError returns err as an *Error, classifying it when it is not one already.
// It returns nil for a nil err.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Class == ClassNone {
			c := *e
			c.Class = Classify(&c)
			return &c
		}
		return e
	}
	e = &Error{Err: err, Message: Redact(err.Error())}
	e.Class = Classify(e)
	e.TypeName = goTypeName(err, e.Class)
	return e
}
