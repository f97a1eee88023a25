// Package retry is jetpool's retry policy: how a failed model call is
// classified, and what each of the two retry layers does with it. It is
// pure policy — no NATS, no HTTP — so that every rule can be tested with a
// fake clock.
//
// # Classes
//
// [Classify] turns a failure into a [Class]: rate_limit, server and network
// are transient; context_overflow, auth, invalid_request, schema_violation
// and programming are permanent; unknown is a message that matches nothing.
// Structured signals (HTTP status, provider error type and code, Go error
// types) come first, message patterns last, and a permanent marker ("invalid
// api key", "not a valid image", …) is never retried by either layer.
//
// # Two layers
//
// The session layer ([Session.Run]) retries inside one JetStream delivery,
// in the worker: a few calls with exponential backoff, jitter and the
// provider's Retry-After as a floor, popping the failed assistant turn from
// the message history before each retry. It is cheap — no redelivery, no
// re-fetch — and it is where most rate limits and dropped streams end.
//
// The exec layer ([Policy.Decide]) is JetStream redelivery: when the session
// gives up on a transient or unknown error, the worker naks with a delay and
// the record comes back later, possibly to another worker. It outlives a
// crashed process and spreads a long outage over minutes instead of holding
// a worker slot.
//
// The layers multiply: a record may cost up to max_attempts × max_deliveries
// calls ([Policy.WorstCase]). Both layers therefore count attempts, and
// [Attempt.N] continues across deliveries, so the final diagnostic
// ([Diagnose]) lists every call that was paid for, and an operator can see
// at a glance whether a record failed on its first call or its ninth.
//
// # Hand-over
//
// A provider may ask for a long wait (Retry-After: 60). Sleeping in the
// session would hold a worker slot — and a MaxAckPending slot — doing
// nothing; so a Retry-After beyond the session's remaining budget ends the
// session with [Outcome.HandOver], and the exec layer redelivers the record
// no sooner than the provider asked. Waiting is JetStream's job, not a
// goroutine's.
package retry
