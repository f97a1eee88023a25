package worker

import (
	"errors"
	"time"

	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

// waitFor is a provider that cannot take a call now, for longer than a
// worker holds a slot (a shared cooldown, an open circuit, a booked
// schedule): the record is parked until then, spending no attempt (an
// attempt is a call).
type waitFor struct {
	provider string
	until    time.Time
	cause    string      // what the provider is waiting out, e.g. the 429 that set the cooldown
	class    retry.Class // rate_limit for a cooldown or the schedule, server for an open circuit
	kind     string      // ratelimit.WaitCooldown, WaitCircuit or WaitSchedule
}

// what says what the record waited for, for its diagnostic.
func (w *waitFor) what() string {
	switch w.kind {
	case ratelimit.WaitCircuit:
		return "its circuit breaker was open"
	case ratelimit.WaitSchedule:
		return "its schedule was booked"
	}
	return "it was in a shared cooldown"
}

// asWait reads the limiter's refusal of a call (a *ratelimit.WaitError
// from Limiter.Acquire, wrapped in a *retry.NotCalled).
func asWait(err error, providerName string) *waitFor {
	w := &waitFor{provider: providerName, class: retry.ClassRateLimit, cause: err.Error(), until: time.Now()}
	var we *ratelimit.WaitError
	if errors.As(err, &we) {
		w.until, w.kind = we.Until, we.Kind
		if we.Cause != "" {
			w.cause = we.Cause
		}
		if we.Kind == ratelimit.WaitCircuit {
			w.class = retry.ClassServer
		}
	}
	return w
}
