package retry

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type sessionBundle struct {
	clock *fakeClock
	calls []int // the attempt numbers call saw
}

// setup returns a session with retry on (defaults), a fake clock and a
// jitter of 0.5 (no jitter).
func setup(t *testing.T) (*Session, *sessionBundle) {
	t.Helper()
	b := &sessionBundle{clock: newFakeClock()}
	s := &Session{
		Policy: Policy{Enabled: true},
		Clock:  b.clock,
		Jitter: func() float64 { return 0.5 },
	}
	return s, b
}

// failing returns a call that returns errs[i] on call i+1 (nil after the
// end), recording the attempt numbers.
func (b *sessionBundle) failing(errs ...error) func(context.Context, int) error {
	return func(_ context.Context, attempt int) error {
		b.calls = append(b.calls, attempt)
		if i := len(b.calls) - 1; i < len(errs) {
			return errs[i]
		}
		return nil
	}
}

var (
	errServer = &Error{Status: 503, ProviderType: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."}
	errAuth   = &Error{Status: 401, ProviderType: "authentication_error", Message: "invalid x-api-key"}
)

func TestSessionDelays(t *testing.T) {
	t.Parallel()
	s, b := setup(t)

	out := s.Run(t.Context(), b.failing(errServer, errServer, errServer))

	require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, b.clock.Sleeps())
	require.Equal(t, 3, out.Calls)
	require.Equal(t, []int{1, 2, 3}, b.calls)
	require.Equal(t, ClassServer, out.Err.Class)
	require.False(t, out.HandOver)
	require.False(t, out.Canceled)
	require.Len(t, out.Attempts, 3)
	for i, a := range out.Attempts {
		require.Equal(t, i+1, a.N)
		require.Equal(t, 1, a.Delivery)
		require.Equal(t, ClassServer, a.Class)
		require.Equal(t, "ServerError: The model is overloaded. Please try again later.", a.Error)
	}
	start := newFakeClock().Now()
	require.Equal(t, []time.Time{start, start.Add(2 * time.Second), start.Add(6 * time.Second)},
		[]time.Time{out.Attempts[0].At, out.Attempts[1].At, out.Attempts[2].At})
}

func TestSessionJitter(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	s.Jitter = func() float64 { return 0 }

	s.Run(t.Context(), b.failing(errServer, errServer, errServer))

	require.Equal(t, []time.Duration{1600 * time.Millisecond, 3200 * time.Millisecond}, b.clock.Sleeps())
}

func TestSessionSuccessAfterRetry(t *testing.T) {
	t.Parallel()
	s, b := setup(t)

	out := s.Run(t.Context(), b.failing(&Error{Status: 429}))

	require.Nil(t, out.Err)
	require.Equal(t, 2, out.Calls)
	require.Len(t, out.Attempts, 1, "the success is not listed")
	require.Equal(t, ClassRateLimit, out.Attempts[0].Class)
	require.Equal(t, []time.Duration{2 * time.Second}, b.clock.Sleeps())
}

func TestSessionRetryAfterFloor(t *testing.T) {
	t.Parallel()
	s, b := setup(t)

	out := s.Run(t.Context(), b.failing(
		&Error{Status: 429, RetryAfter: 3 * time.Second}, // longer than 2s: waits 3s
		&Error{Status: 429, RetryAfter: time.Second},     // shorter than 4s: waits 4s
		&Error{Status: 429},
	))

	require.Equal(t, []time.Duration{3 * time.Second, 4 * time.Second}, b.clock.Sleeps())
	require.Equal(t, 3, out.Calls)
	require.False(t, out.HandOver)
}

func TestSessionResetFloor(t *testing.T) {
	t.Parallel()
	s, b := setup(t)

	s.Run(t.Context(), b.failing(&Error{Status: 429, Reset: 2500 * time.Millisecond}))

	require.Equal(t, []time.Duration{2500 * time.Millisecond}, b.clock.Sleeps())
}

func TestSessionHandOver(t *testing.T) {
	t.Parallel()

	t.Run("Retry-After beyond the budget", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)

		out := s.Run(t.Context(), b.failing(&Error{Status: 429, RetryAfter: time.Minute}))

		require.True(t, out.HandOver)
		require.Equal(t, 1, out.Calls)
		require.Empty(t, b.clock.Sleeps(), "no worker slot sleeps for a minute")
		require.Equal(t, time.Minute, out.Err.Wait())
	})

	t.Run("beyond what is left of the budget", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t) // budget 6s
		out := s.Run(t.Context(), b.failing(
			&Error{Status: 429, RetryAfter: 5 * time.Second}, // fits: 6s left
			&Error{Status: 429, RetryAfter: 5 * time.Second}, // 1s left: hand over
		))
		require.True(t, out.HandOver)
		require.Equal(t, 2, out.Calls)
		require.Equal(t, []time.Duration{5 * time.Second}, b.clock.Sleeps())
	})

	t.Run("within an explicit budget", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		s.Policy.Budget = 2 * time.Minute
		out := s.Run(t.Context(), b.failing(&Error{Status: 429, RetryAfter: time.Minute}))
		require.False(t, out.HandOver)
		require.Nil(t, out.Err)
		require.Equal(t, []time.Duration{time.Minute}, b.clock.Sleeps())
	})

	t.Run("the own schedule is not cut by the budget", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		s.Policy.Budget = time.Second
		s.Jitter = func() float64 { return 0.99 }
		out := s.Run(t.Context(), b.failing(errServer, errServer, errServer))
		require.False(t, out.HandOver)
		require.Equal(t, 3, out.Calls)
		require.Len(t, b.clock.Sleeps(), 2)
	})
}

func TestSessionStopsOnPermanent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want Class
	}{
		{"auth", errAuth, ClassAuth},
		{"context overflow", &Error{Status: 400, Message: "prompt is too long: 208432 tokens > 200000 maximum"}, ClassContextOverflow},
		{"invalid request", &Error{Status: 400, Message: "messages: at least one message is required"}, ClassInvalidRequest},
		{"schema violation", &Error{Class: ClassSchemaViolation, Message: "missing property 'title'"}, ClassSchemaViolation},
		{"unknown is left to the exec layer", errors.New("the model said something odd"), ClassUnknown},
		{"a marker beats a transient label", &Error{Class: ClassServer, Message: "login expired"}, ClassAuth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			out := s.Run(t.Context(), b.failing(tc.err, tc.err, tc.err))
			require.Equal(t, 1, out.Calls)
			require.Equal(t, tc.want, out.Err.Class)
			require.Equal(t, tc.want, out.Attempts[0].Class)
			require.Empty(t, b.clock.Sleeps())
		})
	}
}

func TestSessionEmptyMessageRetried(t *testing.T) {
	t.Parallel()
	s, b := setup(t)

	out := s.Run(t.Context(), b.failing(&Error{}, &Error{Class: ClassUnknown}))

	require.Nil(t, out.Err)
	require.Equal(t, 3, out.Calls)
	require.Equal(t, "NetworkError", out.Attempts[0].Error)
	require.Equal(t, "Error", out.Attempts[1].Error)
}

func TestSessionDisabled(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	s.Policy = Policy{MaxAttempts: 5}

	out := s.Run(t.Context(), b.failing(errServer, errServer))

	require.Equal(t, 1, out.Calls)
	require.Equal(t, ClassServer, out.Err.Class)
	require.Empty(t, b.clock.Sleeps())
}

func TestSessionAttemptNumbersContinue(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	s.Delivery, s.PriorAttempts = 2, 3
	var seen []Attempt
	s.OnAttempt = func(a Attempt) { seen = append(seen, a) }

	out := s.Run(t.Context(), b.failing(errServer, errServer))

	require.Equal(t, []int{4, 5, 6}, b.calls)
	require.Len(t, out.Attempts, 2)
	require.Equal(t, out.Attempts, seen)
	require.Equal(t, 4, seen[0].N)
	require.Equal(t, 5, seen[1].N)
	require.Equal(t, 2, seen[1].Delivery)
}

func TestSessionCanceled(t *testing.T) {
	t.Parallel()

	t.Run("during a sleep", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b.clock.onSleep = cancel

		out := s.Run(ctx, b.failing(errServer, errServer, errServer))

		require.True(t, out.Canceled)
		require.Equal(t, 1, out.Calls, "no call after cancellation")
		require.Equal(t, ClassServer, out.Err.Class)
	})

	t.Run("during a call", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()

		out := s.Run(ctx, func(ctx context.Context, attempt int) error {
			b.calls = append(b.calls, attempt)
			cancel()
			return fmt.Errorf("post: %w", ctx.Err())
		})

		require.True(t, out.Canceled)
		require.Equal(t, []int{1}, b.calls)
		require.Empty(t, b.clock.Sleeps())
		require.ErrorIs(t, out.Err, context.Canceled)
	})

	t.Run("before the first call", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		out := s.Run(ctx, b.failing())

		require.True(t, out.Canceled)
		require.Zero(t, out.Calls)
		require.Empty(t, b.calls)
		require.ErrorIs(t, out.Err, context.Canceled)
	})

	t.Run("a deadline is the record's timeout, not a shutdown", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		defer cancel()

		out := s.Run(ctx, b.failing())

		require.False(t, out.Canceled)
		require.Zero(t, out.Calls)
		require.Equal(t, "TimeoutError: context deadline exceeded", out.Err.Error())
		require.Equal(t, ClassNetwork, out.Err.Class)
		require.Equal(t, VerdictRedeliver, s.Policy.Decide(out, 1).Verdict)
		require.Equal(t, 1500*time.Millisecond, s.Policy.Decide(out, 1).Delay)
	})

	t.Run("a permanent error is not masked by the cancellation", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()

		out := s.Run(ctx, func(context.Context, int) error { cancel(); return errAuth })

		require.False(t, out.Canceled)
		require.Equal(t, ClassAuth, out.Err.Class)
	})
}

func TestSessionHistoryPop(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	h := &fakeHistory{}
	h.Add("system: extract title and author", "user: record 1", "assistant: {\"title\": ", "user: that was not JSON, try again")
	s.History = h
	start := h.Turns()

	var before [][]string
	out := s.Run(t.Context(), func(_ context.Context, attempt int) error {
		before = append(before, h.Turns())
		b.calls = append(b.calls, attempt)
		// A turn that streams a partial answer, and a tool exchange, before failing.
		h.Add(fmt.Sprintf("assistant: partial %d", attempt), "tool: lookup", "assistant: more")
		if attempt < 3 {
			return &Error{} // the stream dropped
		}
		return nil
	})

	require.Nil(t, out.Err)
	require.Equal(t, [][]string{start, start, start}, before, "no failed turn reaches the next prompt")
	require.Equal(t, append(start, "assistant: partial 3", "tool: lookup", "assistant: more"), h.Turns(),
		"the successful turn stays")
}

func TestSessionHistoryPoppedOnFinalFailure(t *testing.T) {
	t.Parallel()
	s, b := setup(t)
	h := &fakeHistory{}
	h.Add("user: hi")
	s.History = h

	s.Run(t.Context(), func(ctx context.Context, attempt int) error {
		h.Add("assistant: half")
		return b.failing(errAuth)(ctx, attempt)
	})

	require.Equal(t, []string{"user: hi"}, h.Turns())
}

var panicLoc = regexp.MustCompile(` at retry/session_test\.go:(\d+)$`)

func TestSessionPanic(t *testing.T) {
	t.Parallel()

	t.Run("panic value", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		var line int
		out := s.Run(t.Context(), func(context.Context, int) error {
			b.calls = append(b.calls, 1)
			_, _, line, _ = runtime.Caller(0)
			panic("template names a missing field")
		})

		require.Equal(t, 1, out.Calls)
		require.Len(t, b.calls, 1, "a programming error is not retried")
		require.Equal(t, ClassProgramming, out.Err.Class)
		require.Equal(t, "PanicError", out.Err.TypeName)
		require.Equal(t, fmt.Sprintf("PanicError: template names a missing field at retry/session_test.go:%d", line+1), out.Err.Error())
		require.Equal(t, ReasonProgrammingError, s.Policy.Decide(out, 1).Reason)
	})

	t.Run("runtime error", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		var line int
		out := s.Run(t.Context(), func(context.Context, int) error {
			var m map[string]int
			_, _, line, _ = runtime.Caller(0)
			//lint:ignore SA5000 the nil-map panic is the runtime error under test
			m["x"] = 1
			return nil
		})

		require.Equal(t, ClassProgramming, out.Err.Class)
		require.Contains(t, out.Err.Message, "assignment to entry in nil map")
		m := panicLoc.FindStringSubmatch(out.Err.Message)
		require.NotNil(t, m, out.Err.Message)
		require.Equal(t, strconv.Itoa(line+2), m[1], "the assignment, below the lint directive")
		var re runtime.Error
		require.ErrorAs(t, out.Err, &re)
	})

	t.Run("nil dereference", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t)
		var line int
		out := s.Run(t.Context(), func(context.Context, int) error {
			var e *Error
			_, _, line, _ = runtime.Caller(0)
			_ = e.Message
			return nil
		})

		require.Contains(t, out.Err.Message, "nil pointer dereference")
		require.True(t, panicLoc.MatchString(out.Err.Message), out.Err.Message)
		require.Equal(t, strconv.Itoa(line+1), panicLoc.FindStringSubmatch(out.Err.Message)[1])
	})
}

func TestFromPanicOutsidePanic(t *testing.T) {
	t.Parallel()
	e := FromPanic(errors.New("boom"))
	require.Equal(t, "PanicError: boom", e.Error())
	require.Equal(t, ClassProgramming, e.Class)
}

func TestSystemClock(t *testing.T) {
	t.Parallel()
	var c SystemClock
	require.NoError(t, c.Sleep(t.Context(), 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, c.Sleep(ctx, time.Hour), context.Canceled, "returns at once when ctx is done")
	require.WithinDuration(t, time.Now(), c.Now(), time.Minute)
}
