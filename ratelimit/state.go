package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/jetpool/jetpool/provider"
)

// State is the shared state of one provider+key, the value of its entry in
// the JETPOOL_LIMITS bucket. Times are wall-clock: processes sharing a
// budget are assumed to have synchronised clocks (NTP), as JetStream's own
// TTLs assume.
type State struct {
	Provider string `json:"provider"`
	// Of is the provider whose deployment Provider is ("": a provider's
	// own limiter).
	Of     string          `json:"of,omitempty"`
	Limits provider.Limits `json:"limits,omitzero"`

	// ReqTAT and TokTAT are the GCRA theoretical arrival times of the
	// request and token budgets.
	ReqTAT time.Time `json:"req_tat,omitzero"`
	TokTAT time.Time `json:"tok_tat,omitzero"`
	// PaceTAT is the next free slot of the learned pace (adaptive): one
	// schedule for every process, at the sum of their learned shares.
	PaceTAT time.Time `json:"pace_tat,omitzero"`

	// Leases are the calls in flight, per process, for limits.concurrency.
	Leases map[string]Lease `json:"leases,omitempty"`

	// CooldownUntil is the end of the shared cooldown set by a 429.
	CooldownUntil time.Time `json:"cooldown_until,omitzero"`
	CooldownCause string    `json:"cooldown_cause,omitempty"`
	CooldownSet   time.Time `json:"cooldown_set,omitzero"`
	Cooldowns     int       `json:"cooldowns,omitempty"` // how many were set

	// CongestedAt is the last congestion event (a new cooldown, or
	// rate-limit headers saying a bucket is empty): every process cuts its
	// adaptive window once for each.
	CongestedAt time.Time `json:"congested_at,omitzero"`

	Breaker Breaker `json:"breaker,omitzero"`

	// Windows are the adaptive windows of the processes calling the
	// provider (no limits configured), each as its process last published
	// it: at most once a second, and on every cut.
	Windows map[string]Window `json:"windows,omitempty"`

	// Changed and Reason are the last change of the cooldown or the
	// circuit and why ("cooldown 1s: 3 429s in the last second: …").
	Changed time.Time `json:"changed,omitzero"`
	Reason  string    `json:"reason,omitempty"`

	Updated time.Time `json:"updated,omitzero"`
}

// Window is one process's adaptive window as it published it.
type Window struct {
	N       int       `json:"n"`
	Change  Change    `json:"change,omitzero"` // its last cut or change of mode, and why
	Pace    float64   `json:"pace,omitempty"`  // the request rate it learned (calls/s; 0: none)
	Expires time.Time `json:"expires"`         // a dead process's window lapses, as its leases do
}

// LiveWindows returns the windows not lapsed at now, by process.
func (s *State) LiveWindows(now time.Time) map[string]Window {
	out := map[string]Window{}
	for h, w := range s.Windows {
		if now.Before(w.Expires) {
			out[h] = w
		}
	}
	return out
}

// note records a change of the cooldown or circuit.
func (s *State) note(now time.Time, reason string) {
	s.Changed, s.Reason = now, reason
}

// bound makes every wait in s end: a cooldown within maxCooldown of now
// (the provider's max_retry_after), an open circuit within maxOpen, a probe
// within maxProbe. A state written by an older version, or a hostile value
// that got through, is read as the longest wait allowed. It reports
// whether it changed s.
func (s *State) bound(now time.Time, maxCooldown, maxOpen, maxProbe time.Duration) bool {
	changed := false
	clip := func(t *time.Time, d time.Duration) {
		if d > 0 && t.After(now.Add(d)) {
			*t = now.Add(d)
			changed = true
		}
	}
	clip(&s.CooldownUntil, maxCooldown)
	clip(&s.Breaker.Until, maxOpen)
	clip(&s.Breaker.ProbeUntil, maxProbe)
	return changed
}

// Lease is one process's calls in flight.
type Lease struct {
	N       int       `json:"n"`
	Expires time.Time `json:"expires"` // refreshed on every change; a dead process's lease lapses
}

// InFlight is the number of calls in flight under live leases at now.
func (s *State) InFlight(now time.Time) int {
	n := 0
	for _, l := range s.Leases {
		if now.Before(l.Expires) {
			n += l.N
		}
	}
	return n
}

// Cooling reports whether the shared cooldown is on at now.
func (s *State) Cooling(now time.Time) bool { return now.Before(s.CooldownUntil) }

// Key is the KV key of a provider and API key: the provider's name (made a
// safe key token) and the first 12 hex digits of the key's SHA-256. The
// key itself never leaves the process.
func Key(providerName, apiKey string) string {
	h := "nokey"
	if apiKey != "" {
		sum := sha256.Sum256([]byte(apiKey))
		h = hex.EncodeToString(sum[:6])
	}
	return token(providerName) + "." + h
}

// ProviderOf is the provider part of a Key.
func ProviderOf(key string) string {
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		return key[:i]
	}
	return key
}

func token(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}
