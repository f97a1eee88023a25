package ratelimit

import (
	"errors"
	"fmt"
	"time"
)

// Kinds of WaitError: what the call would have waited for.
const (
	WaitCooldown = "cooldown" // the provider's shared cooldown after 429s
	WaitCircuit  = "circuit"  // an open circuit, or another worker's probe
	WaitSchedule = "schedule" // the rpm/tpm schedule shared by every worker
)

// ErrWait is matched by errors.Is for every *WaitError.
var ErrWait = errors.New("ratelimit: the call must wait")

// WaitError is returned by Acquire when the call would have to wait longer
// than the registry's hold limit (Config.WaitMax) for a shared cooldown, an
// open circuit or the shared schedule. No request was sent: it is not a
// failed attempt (not a *retry.Error) and must never be counted as one. The
// caller hands the record back until Until (plus its own jitter) without
// spending an attempt or a delivery, and so frees the worker slot.
type WaitError struct {
	Provider string
	Until    time.Time // when a call may go
	Kind     string    // WaitCooldown, WaitCircuit or WaitSchedule
	Cause    string    // why, as the provider said it (the 429's text, the circuit's last error)
}

func (e *WaitError) Error() string {
	what := map[string]string{WaitCooldown: "is in a shared cooldown", WaitCircuit: "has an open circuit",
		WaitSchedule: "has its shared schedule booked"}[e.Kind]
	if what == "" {
		what = "must wait"
	}
	s := fmt.Sprintf("provider %s %s until %s; no call was made", e.Provider, what, e.Until.UTC().Format("15:04:05.000Z"))
	if e.Cause != "" {
		s += " (" + e.Cause + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrWait) true.
func (e *WaitError) Is(target error) bool { return target == ErrWait }
