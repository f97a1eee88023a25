// Package ratelimit keeps a pool of workers inside a provider's limits
// without storms: one budget per provider and API key shared by every worker
// process through the NATS KV bucket JETPOOL_LIMITS.
//
// # Shared state
//
// Each provider+key has one KV entry, named <provider>.<hash of the key> (the
// key itself is never stored), holding a State: two GCRA clocks (requests and
// tokens), the concurrency leases of each process, the shared cooldown set by
// a 429, and the circuit breaker. Every change is a compare-and-set on that
// entry, so any number of processes agree without an elected leader; see
// docs/ratelimits.md for why this beat leases-only and an elected limiter.
//
// # Modes
//
// With limits (rpm, tpm, concurrency) configured, Acquire reserves a slot
// in the shared GCRA schedule (one CAS), then sleeps until it: waiters are
// spaced by the schedule, never woken together. Without limits, each process
// runs an adaptive window (AIMD): a ramp in time until the provider first
// answers, slow start, then additive growth; congestion (429s that are not
// one-off, overloads, rate-limit headers saying a bucket is empty) cuts it in
// every process, faults (5xx, dropped streams) only trim it when they rise.
// A provider that congests is also paced: the rate it took between two
// congestion events (learnedPace), a little under it, spaces the calls of
// every process on one shared schedule, probed upward slowly.
//
// # Waits and attempts
//
// Every call that reached the provider is an attempt; Done sees its whole
// response. Waiting is not: Acquire waits at most Config.WaitMax for a
// shared cooldown, an open circuit or the schedule, and beyond it returns a
// *WaitError (errors.Is ErrWait) saying until when, so the worker parks the
// record instead of spending an attempt or a delivery on it.
//
// # Shared decisions
//
// Done's shared-state rule is the pure function decide (and effect.apply):
// congestion sets a shared cooldown until the provider's Retry-After,
// capped by its max_retry_after; a one-off 429 only makes its record wait.
// The circuit breaker opens on a failure ratio over a window, lets one
// waiting record's call through as the probe after its cooldown, and closes
// on any answer. Reset clears a provider's cooldown and circuit.
//
// The arithmetic (GCRA, AIMD, the rule, breaker transitions) is pure and
// tested with a fake clock; Store has an in-memory and a KV implementation.
package ratelimit
