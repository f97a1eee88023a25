package worker

import (
	"errors"
	"time"

	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

// waitFor is a provider that cannot take a call now, for longer than a
// worker holds a slot (a shared cooldown, an open circuit): the record is
// parked until then, spending no attempt (an attempt is a call).
type waitFor struct {
	provider string
	until    time.Time
	cause    string      // what the provider is waiting out, e.g. the 429 that set the cooldown
	class    retry.Class // rate_limit for a cooldown, server for an open circuit
}

// asWait reads the limiter's refusal of a call (Limiter.Acquire).
func asWait(err error, providerName string) *waitFor {
	w := &waitFor{provider: providerName, class: retry.ClassRateLimit, cause: err.Error()}
	var e *retry.Error
	if errors.As(err, &e) {
		w.until = time.Now().Add(e.Wait())
		w.cause = e.Message
		if errors.Is(err, ratelimit.ErrCircuitOpen) {
			w.class = retry.ClassServer
		}
	}
	return w
}

// isWait reports whether err is the limiter refusing a call for now.
func isWait(err error) bool {
	return errors.Is(err, ratelimit.ErrCoolingDown) || errors.Is(err, ratelimit.ErrCircuitOpen)
}
