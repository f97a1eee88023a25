package retry

import "strings"

// Retryable is the session layer's decision (docs/design.md §1), in this order:
//
//  1. no error: nothing to retry;
//  2. a permanent class — context overflow (compaction's job, not retry's),
//     a permanent structured signal (401/403, authentication_error, …), a
//     permanent marker in the text, an invalid request, a schema violation
//     (the repair loop's job) or a programming error — is never retried;
//  3. an empty message is retried: a stream that dropped before any error
//     body arrived is almost always transient;
//  4. a transient class (rate_limit, server, network) is retried; anything
//     else, unknown included, is not — the exec layer may still retry it.
func Retryable(e *Error) bool {
	if e == nil {
		return false
	}
	c := classOf(e)
	switch {
	case c.Permanent():
		return false
	case strings.TrimSpace(e.Message) == "":
		return true
	}
	return c.Transient()
}

// Retryable reports whether the session layer retries e; see Retryable.
func (e *Error) Retryable() bool { return Retryable(e) }

// ExecRetryable reports whether the exec layer would redeliver e under p:
// transient and unknown errors yes, permanent classes never, and nothing
// when retry is off (one call, one delivery). Whether deliveries remain is
// Decide's business.
func (p Policy) ExecRetryable(e *Error) bool {
	return p.Enabled && e != nil && !classOf(e).Permanent()
}

// classOf is the class both layers act on: e.Class, or Classify(e) when it
// is unset. A class the provider set is trusted, except that a transient or
// unknown label never overrides the permanent text signals of docs/design.md §1
// (context overflow, the permanent markers), which no layer may retry.
func classOf(e *Error) Class {
	c := e.Class
	if c == ClassNone {
		return Classify(e)
	}
	if c.Permanent() {
		return c
	}
	text := strings.ToLower(matchText(e))
	if isOverflowText(text) {
		return ClassContextOverflow
	}
	if m, ok := markerClass(text); ok {
		return m
	}
	return c
}

// normalized returns e with Class set to classOf(e), copying e when that
// changes it, so that callers never see an *Error they did not create mutate.
func normalized(e *Error) *Error {
	if e == nil {
		return nil
	}
	if c := classOf(e); c != e.Class {
		cp := *e
		cp.Class = c
		return &cp
	}
	return e
}
