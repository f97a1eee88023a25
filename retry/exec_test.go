package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecide(t *testing.T) {
	t.Parallel()
	on := Policy{Enabled: true} // 3 deliveries, 1.5s·2^(d-1)
	off := Policy{}

	fail := func(c Class) Outcome { return Outcome{Err: &Error{Class: c, Message: "x"}} }
	redeliver := func(d time.Duration) Decision { return Decision{Verdict: VerdictRedeliver, Delay: d} }
	dead := func(r Reason) Decision { return Decision{Verdict: VerdictDeadLetter, Reason: r} }

	permanent := map[Class]Reason{
		ClassAuth:            ReasonPermanent,
		ClassInvalidRequest:  ReasonPermanent,
		ClassContextOverflow: ReasonContextOverflow,
		ClassSchemaViolation: ReasonSchemaViolation,
		ClassProgramming:     ReasonProgrammingError,
		ClassTruncated:       ReasonTruncated,
		ClassContentFilter:   ReasonContentFilter,
		ClassBudget:          ReasonBudget,
	}
	for _, c := range Classes {
		for delivery := 1; delivery <= 4; delivery++ {
			var want, wantOff Decision
			if r, ok := permanent[c]; ok {
				want, wantOff = dead(r), dead(r)
			} else {
				wantOff = dead(ReasonExhausted)
				switch delivery {
				case 1:
					want = redeliver(1500 * time.Millisecond)
				case 2:
					want = redeliver(3 * time.Second)
				default:
					want = dead(ReasonExhausted)
				}
			}
			require.Equal(t, want, on.Decide(fail(c), delivery), "%s delivery %d", c, delivery)
			require.Equal(t, wantOff, off.Decide(fail(c), delivery), "off: %s delivery %d", c, delivery)
		}
	}

	// Success.
	require.Equal(t, Decision{Verdict: VerdictDone}, on.Decide(Outcome{Calls: 2}, 1))
	require.Equal(t, Decision{Verdict: VerdictDone}, off.Decide(Outcome{Calls: 1}, 1))

	// Canceled: handed back at once, whatever the delivery or policy.
	canceled := Outcome{Err: &Error{Class: ClassNetwork}, Canceled: true}
	require.Equal(t, redeliver(0), on.Decide(canceled, 1))
	require.Equal(t, redeliver(0), on.Decide(canceled, 3))
	require.Equal(t, redeliver(0), off.Decide(canceled, 1))

	// A hand-over waits at least the provider's Retry-After.
	handOver := Outcome{Err: &Error{Status: 429, RetryAfter: time.Minute}, HandOver: true}
	require.Equal(t, redeliver(time.Minute), on.Decide(handOver, 1))
	require.Equal(t, dead(ReasonExhausted), on.Decide(handOver, 3))

	// An unclassified error is classified; a marker makes it permanent.
	require.Equal(t, dead(ReasonPermanent), on.Decide(Outcome{Err: &Error{Status: 401}}, 1))
	require.Equal(t, dead(ReasonPermanent), on.Decide(Outcome{Err: &Error{Class: ClassNetwork, Message: "Login failed"}}, 1))
	require.Equal(t, redeliver(1500*time.Millisecond), on.Decide(Outcome{Err: &Error{}}, 1))

	// Single responsibility: max_deliveries 1.
	require.Equal(t, dead(ReasonExhausted), Policy{Enabled: true, MaxDeliveries: 1}.Decide(fail(ClassServer), 1))
}
