package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Adaptive concurrency with no push-back from the provider must grow to the
// pool's concurrency within a few round trips (slow start), not throttle a
// pool for good.
func TestAdaptiveGrowsWithoutPushBack(t *testing.T) {
	t.Parallel()
	r := newTestRegistry(t, NewMemStore(), retry.SystemClock{}, func(c *Config) { c.AdaptiveMax = 200 })
	l := r.For(provider.Config{Name: "quiet"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var peak, inflight atomic.Int64
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				p, err := l.Acquire(ctx, 1)
				if err != nil {
					return
				}
				n := inflight.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond) // the call
				inflight.Add(-1)
				p.Done(provider.Response{}, nil)
			}
		}()
	}
	wg.Wait()
	require.GreaterOrEqual(t, peak.Load(), int64(190), "grew to the pool's concurrency")
}
