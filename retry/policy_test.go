package retry

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestWithDefaults(t *testing.T) {
	t.Parallel()

	p := Policy{Enabled: true}.WithDefaults()
	require.Equal(t, Policy{
		Enabled:          true,
		MaxAttempts:      MaxAttemptsDefault,
		Backoff:          BackoffDefault,
		MaxBackoff:       MaxBackoffDefault,
		Budget:           6 * time.Second, // 2s + 4s
		OnExhausted:      ReturnLast,
		MaxDeliveries:    MaxDeliveriesDefault,
		RedeliverBackoff: RedeliverBackoffDefault,
		MaxWait:          MaxWaitDefault,
	}, p)

	// Set fields are kept; the budget follows the schedule.
	p = Policy{Enabled: true, MaxAttempts: 5, Backoff: time.Second, MaxBackoff: 5 * time.Second, OnExhausted: Raise}.WithDefaults()
	require.Equal(t, 5, p.MaxAttempts)
	require.Equal(t, Raise, p.OnExhausted)
	require.Equal(t, (1+2+4+5)*time.Second, p.Budget)
	require.Equal(t, p, p.WithDefaults(), "idempotent")

	// Off: one call, one delivery.
	off := Policy{MaxAttempts: 7, MaxDeliveries: 5}.WithDefaults()
	require.Equal(t, 1, off.MaxAttempts)
	require.Equal(t, 1, off.MaxDeliveries)
	require.Equal(t, ReturnLast, off.OnExhausted)
}

func TestValidate(t *testing.T) {
	t.Parallel()

	require.NoError(t, Policy{}.Validate())
	require.NoError(t, Policy{Enabled: true}.Validate())
	require.NoError(t, Policy{Enabled: true}.WithDefaults().Validate())
	require.NoError(t, Policy{Enabled: true, MaxAttempts: 10, MaxDeliveries: 20, OnExhausted: Raise}.Validate())

	for _, tc := range []struct {
		p    Policy
		want string
	}{
		{Policy{Enabled: true, MaxAttempts: 12}, "max_attempts: 12 is out of range 1-10"},
		{Policy{Enabled: true, MaxAttempts: -1}, "max_attempts: -1 is out of range 1-10"},
		{Policy{Backoff: -time.Second}, "backoff: -1s must not be negative"},
		{Policy{MaxBackoff: -time.Second}, "max_backoff: -1s must not be negative"},
		{Policy{MaxBackoff: time.Second}, "max_backoff: 1s is shorter than backoff 2s"},
		{Policy{Backoff: 10 * time.Second, MaxBackoff: 5 * time.Second}, "max_backoff: 5s is shorter than backoff 10s"},
		{Policy{Budget: -time.Second}, "budget: -1s must not be negative"},
		{Policy{OnExhausted: "retry"}, `on_exhausted: "retry" is not one of return_last, raise`},
		{Policy{MaxDeliveries: 21}, "redeliver.max_deliveries: 21 is out of range 1-20"},
		{Policy{RedeliverBackoff: -time.Millisecond}, "redeliver.backoff: -1ms must not be negative"},
	} {
		err := tc.p.Validate()
		require.EqualError(t, err, tc.want)
		var fe *FieldError
		require.ErrorAs(t, err, &fe)
	}

	// Every bad field is reported.
	err := Policy{MaxAttempts: 0, Backoff: -1, MaxDeliveries: 99}.Validate()
	require.EqualError(t, err, "backoff: -1ns must not be negative\nredeliver.max_deliveries: 99 is out of range 1-20")
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		require.True(t, errors.As(e, &fe))
		fields = append(fields, fe.Field)
	}
	require.Equal(t, []string{"backoff", "redeliver.max_deliveries"}, fields)
}

func TestAttemptsDeliveries(t *testing.T) {
	t.Parallel()
	require.Equal(t, 1, Policy{}.Attempts())
	require.Equal(t, 1, Policy{MaxAttempts: 5}.Attempts(), "off means one call")
	require.Equal(t, 1, Policy{MaxDeliveries: 5}.Deliveries(), "off means one delivery")
	require.Equal(t, 3, Policy{Enabled: true}.Attempts())
	require.Equal(t, 3, Policy{Enabled: true}.Deliveries())
	require.Equal(t, 5, Policy{Enabled: true, MaxAttempts: 5}.Attempts())
	require.Equal(t, 1, Policy{Enabled: true, MaxDeliveries: 1}.Deliveries())
}

func TestSessionDelay(t *testing.T) {
	t.Parallel()
	p := Policy{Enabled: true}
	for _, tc := range []struct {
		n      int
		jitter float64
		want   time.Duration
	}{
		{1, 0.5, 2 * time.Second},
		{2, 0.5, 4 * time.Second},
		{3, 0.5, 8 * time.Second},
		{0, 0.5, 2 * time.Second}, // n < 1 counts as 1
		{1, 0, 1600 * time.Millisecond},
		{1, 0.999999, 2399999200 * time.Nanosecond},
		{2, 0.25, 3600 * time.Millisecond},
		{6, 0.5, 60 * time.Second},  // 64s capped
		{6, 0.99, 60 * time.Second}, // jitter never exceeds the cap
		{6, 0, 48 * time.Second},
		{1000, 0.5, 60 * time.Second}, // no overflow
		{1, -3, 1600 * time.Millisecond},
	} {
		require.Equal(t, tc.want, p.SessionDelay(tc.n, tc.jitter), "n=%d jitter=%v", tc.n, tc.jitter)
	}
	require.Equal(t, 5*time.Second, Policy{Enabled: true, Backoff: time.Second, MaxBackoff: 5 * time.Second}.SessionDelay(4, 0.5))
}

func TestRedeliverDelay(t *testing.T) {
	t.Parallel()
	p := Policy{Enabled: true}
	require.Equal(t, 1500*time.Millisecond, p.RedeliverDelay(1, 0))
	require.Equal(t, 3*time.Second, p.RedeliverDelay(2, 0))
	require.Equal(t, 6*time.Second, p.RedeliverDelay(3, 0))
	require.Equal(t, 45*time.Second, p.RedeliverDelay(1, 45*time.Second), "at least Retry-After")
	require.Equal(t, 3*time.Second, p.RedeliverDelay(2, time.Second))
	require.Equal(t, time.Hour, p.RedeliverDelay(1, 5*time.Hour), "capped")
	require.Equal(t, time.Hour, p.RedeliverDelay(500, 0), "no overflow")
	require.Equal(t, 10*time.Second, Policy{Enabled: true, RedeliverBackoff: 5 * time.Second}.RedeliverDelay(2, 0))
}

func TestWorstCase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		p       Policy
		calls   int
		elapsed time.Duration
	}{
		// (2s+4s)·3 deliveries + 1.5s + 3s
		{"defaults", Policy{Enabled: true}, 9, 22500 * time.Millisecond},
		{"off", Policy{}, 1, 0},
		{"single responsibility", Policy{Enabled: true, MaxAttempts: 5, MaxDeliveries: 1}, 5, (2 + 4 + 8 + 16) * time.Second},
		{"one attempt, redelivery only", Policy{Enabled: true, MaxAttempts: 1, MaxDeliveries: 4}, 4, (1500 + 3000 + 6000) * time.Millisecond},
	} {
		calls, elapsed := tc.p.WorstCase()
		require.Equal(t, tc.calls, calls, tc.name)
		require.Equal(t, tc.elapsed, elapsed, tc.name)
	}
}

func TestSessionBudget(t *testing.T) {
	t.Parallel()
	require.Equal(t, 6*time.Second, Policy{Enabled: true}.SessionBudget())
	require.Equal(t, time.Minute, Policy{Enabled: true, Budget: time.Minute}.SessionBudget())
	require.Zero(t, Policy{}.SessionBudget())
}
