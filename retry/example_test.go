package retry_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// instantClock sleeps for no time, so that the example runs at once.
type instantClock struct{ now time.Time }

func (c *instantClock) Now() time.Time { return c.now }
func (c *instantClock) Sleep(ctx context.Context, d time.Duration) error {
	fmt.Println("  sleep", d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

// A record whose calls keep failing goes through both layers: three calls
// per delivery, three deliveries, then the dead-letter stream.
func Example() {
	policy := retry.Policy{Enabled: true} // retry: {max_attempts: 3}
	calls, elapsed := policy.WorstCase()
	fmt.Printf("worst case: %d calls, %s of waiting\n", calls, elapsed)

	var attempts []retry.Attempt
	for delivery := 1; ; delivery++ {
		s := &retry.Session{
			Policy:        policy,
			Clock:         &instantClock{},
			Jitter:        func() float64 { return 0.5 },
			Delivery:      delivery,
			PriorAttempts: len(attempts),
		}
		out := s.Run(context.Background(), func(ctx context.Context, attempt int) error {
			if attempt == 2 {
				return &retry.Error{} // the stream dropped before any error body
			}
			return &retry.Error{Status: 503, Message: "Service Unavailable"}
		})
		attempts = append(attempts, out.Attempts...)

		d := policy.Decide(out, delivery)
		if d.Verdict == retry.VerdictRedeliver {
			fmt.Printf("delivery %d: nak, redeliver in %s\n", delivery, d.Delay)
			continue
		}
		fmt.Printf("delivery %d: dead letter, reason %s\n", delivery, d.Reason)
		fmt.Println(retry.Diagnose(out.Err, attempts, delivery))
		break
	}
	// Output:
	// worst case: 9 calls, 22.5s of waiting
	//   sleep 2s
	//   sleep 4s
	// delivery 1: nak, redeliver in 1.5s
	//   sleep 2s
	//   sleep 4s
	// delivery 2: nak, redeliver in 3s
	//   sleep 2s
	//   sleep 4s
	// delivery 3: dead letter, reason exhausted
	// failed after 9 attempts (3 deliveries): [1] ServerError: Service Unavailable; [2] NetworkError; [3] ServerError: Service Unavailable; [4] ServerError: Service Unavailable; [5] ServerError: Service Unavailable; [6] ServerError: Service Unavailable; [7] ServerError: Service Unavailable; [8] ServerError: Service Unavailable; [9] ServerError: Service Unavailable
}

// A bad key is never retried: one call, and the record is dead-lettered at once.
func ExamplePolicy_Decide() {
	policy := retry.Policy{Enabled: true}
	s := &retry.Session{Policy: policy}
	out := s.Run(context.Background(), func(context.Context, int) error {
		return &retry.Error{Status: 401, ProviderType: "authentication_error", TypeName: "AuthError", Message: "invalid api key"}
	})
	d := policy.Decide(out, 1)
	fmt.Println(out.Calls, d.Reason)
	fmt.Println(retry.Diagnose(out.Err, out.Attempts, 1))
	// Output:
	// 1 permanent
	// failed permanently: AuthError: invalid api key
}
