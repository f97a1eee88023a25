package retry

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// SystemClock is the real Clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Sleep waits d, or until ctx is done, in which case it returns ctx.Err().
func (SystemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Session is the session retry layer: the calls of one record and action
// within one JetStream delivery. A Session is used for one Run.
type Session struct {
	Policy Policy // used through WithDefaults
	Clock  Clock  // nil: SystemClock
	// Jitter returns a number in [0,1) for each delay; nil: math/rand/v2.
	Jitter func() float64
	// History, when set, is truncated back after every failed attempt, so a
	// failed assistant turn never reaches the next prompt.
	History History
	// Delivery is the 1-based JetStream delivery this session runs in
	// (0 counts as 1).
	Delivery int
	// PriorAttempts is the number of attempts made in earlier deliveries, so
	// that attempt numbers continue across deliveries.
	PriorAttempts int
	// OnAttempt, when set, is called after each failed attempt.
	OnAttempt func(Attempt)
}

// Outcome is what a session ended with.
type Outcome struct {
	// Err is nil on success; otherwise the last failure, classified.
	Err *Error
	// Attempts are this delivery's failed attempts, in order (a success is
	// not listed).
	Attempts []Attempt
	// Calls is the number of times call ran.
	Calls int
	// HandOver is true when the session stopped early because the provider
	// asked to wait longer than the session's remaining budget: the exec
	// layer takes over, and no worker slot sleeps for a minute.
	HandOver bool
	// Canceled is true when ctx was canceled (the worker is shutting down):
	// the record should be handed back, not failed. A ctx whose deadline
	// passed also stops the session at once, but that is the record's own
	// timeout: Canceled stays false and Err is a network TimeoutError, which
	// the exec layer treats like any other transient failure.
	Canceled bool
	// NotCalled is set when the session ended because a call could not go
	// at all (an error wrapped in *NotCalled: a provider in a shared
	// cooldown or with an open circuit, for longer than a worker holds a
	// slot). It is not an attempt and is not in Attempts; Err is the last
	// real failure, if any.
	NotCalled error
}

// NotCalled wraps an error that ended an attempt before any request reached
// the provider: waiting is not an attempt (an attempt is a call), so the
// session makes no further call and reports it in Outcome.NotCalled, and the
// caller decides how the record waits.
type NotCalled struct{ Err error }

func (e *NotCalled) Error() string { return "no call was made: " + e.Err.Error() }
func (e *NotCalled) Unwrap() error { return e.Err }

// AsNotCalled is err's NotCalled (errors.As), nil when it has none. A nil
// err, every successful call's, is answered without errors.As, whose
// target would be an allocation a call.
func AsNotCalled(err error) *NotCalled {
	if err == nil {
		return nil
	}
	var nc *NotCalled
	if errors.As(err, &nc) {
		return nc
	}
	return nil
}

// Run calls call up to Policy.Attempts() times, until it succeeds or fails
// with an error that is not Retryable. attempt is 1-based and continues
// across deliveries (PriorAttempts + n). Between calls it waits
// max(SessionDelay(n), the provider's Retry-After); a Retry-After that is
// longer than the schedule and than what is left of the budget hands over
// instead. The budget limits how far a provider may stretch the session; the
// session's own jittered schedule is always honoured. When ctx is done, Run
// makes no further call. A panic in call is recovered as a ClassProgramming
// error (see FromPanic).
func (s *Session) Run(ctx context.Context, call func(ctx context.Context, attempt int) error) Outcome {
	p := s.Policy.WithDefaults()
	var clock Clock = SystemClock{}
	if s.Clock != nil {
		clock = s.Clock
	}
	jitter := s.Jitter
	if jitter == nil {
		jitter = rand.Float64
	}
	delivery := max(s.Delivery, 1)

	var (
		out   Outcome
		slept time.Duration
	)
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			if out.Err == nil {
				out.Err = normalized(AsError(err))
			}
			out.Canceled = errors.Is(err, context.Canceled)
			return out
		}
		mark := -1
		if s.History != nil {
			mark = s.History.Len()
		}
		attempt := s.PriorAttempts + n
		err := safeCall(ctx, call, attempt)
		if nc := AsNotCalled(err); nc != nil {
			out.NotCalled = nc.Err
			return out
		}
		out.Calls++
		if err == nil {
			out.Err = nil
			return out
		}
		if mark >= 0 {
			s.History.Truncate(mark)
		}
		e := normalized(AsError(err))
		out.Err = e
		a := Attempt{N: attempt, Delivery: delivery, Class: e.Class, Error: e.Error(), At: clock.Now()}
		out.Attempts = append(out.Attempts, a)
		if s.OnAttempt != nil {
			s.OnAttempt(a)
		}

		switch {
		case ctx.Err() != nil && !e.Class.Permanent():
			// The failure is most likely the cancellation itself.
			out.Canceled = errors.Is(ctx.Err(), context.Canceled)
			return out
		case !Retryable(e), n >= p.Attempts():
			return out
		}

		delay := p.SessionDelay(n, jitter())
		wait := e.Wait()
		if wait > delay && wait > p.Budget-slept {
			out.HandOver = true
			return out
		}
		d := max(delay, wait)
		if err := clock.Sleep(ctx, d); err != nil {
			out.Canceled = errors.Is(err, context.Canceled)
			return out
		}
		slept += d
	}
}

// safeCall runs call, turning a panic into a ClassProgramming *Error.
func safeCall(ctx context.Context, call func(context.Context, int) error, attempt int) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = FromPanic(v)
		}
	}()
	return call(ctx, attempt)
}

// FromPanic turns a recovered panic value into a ClassProgramming *Error
// whose message names the value and the file:line that panicked, e.g.
// "PanicError: runtime error: index out of range [3] with length 3 at
// worker/pool.go:88". Call it from the deferred function that recovered, so
// that the panicking frame is still on the stack; runtime frames are
// skipped. A panic value that is an error is kept as Err.
func FromPanic(v any) *Error {
	e := &Error{Class: ClassProgramming, TypeName: "PanicError", Message: fmt.Sprint(v)}
	if err, ok := v.(error); ok {
		e.Err = err
	}
	if loc := panicLocation(); loc != "" {
		e.Message += " at " + loc
	}
	return e
}

// panicLocation is "dir/file.go:line" of the first frame below the runtime's
// panic machinery, "" when there is none (FromPanic called outside a panic).
func panicLocation() string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs) // skip Callers, panicLocation, FromPanic
	frames := runtime.CallersFrames(pcs[:n])
	inRuntime := false
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, "runtime.") {
			inRuntime = true
		} else if inRuntime {
			return filepath.Base(filepath.Dir(f.File)) + "/" + filepath.Base(f.File) + fmt.Sprintf(":%d", f.Line)
		}
		if !more {
			return ""
		}
	}
}
