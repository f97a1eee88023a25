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
// runs adaptive concurrency (AIMD): it grows while calls succeed and cuts on
// 429 or overload, converging to what the provider allows.
//
// In both modes a 429 puts the provider+key into a shared cooldown until the
// provider's Retry-After or reset, which every process sees through a KV
// watch; it ends with jitter (adaptive) or on the paced schedule (limits).
// A circuit breaker opens after consecutive server or network failures,
// lets one probe through after its cooldown, and closes on success.
//
// The arithmetic (GCRA, AIMD, breaker transitions) is pure and tested with a
// fake clock; Store has an in-memory and a KV implementation.
package ratelimit
