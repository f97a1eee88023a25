package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// BenchmarkRamp measures what the adaptive window costs a job on an
// endpoint that never pushes back, apart from the pool and JetStream (which
// on two cores are CPU-bound at concurrency 1000): 20,000 calls of 100 ms
// at concurrency 1000 through the limiter, ramp included, against the
// ideal of concurrency ÷ latency (2 s), with the default adaptive window
// and with adaptive: false.
//
//	go test ./ratelimit -run '^$' -bench BenchmarkRamp -benchtime 3x
func BenchmarkRamp(b *testing.B) {
	for _, c := range []struct {
		name   string
		limits provider.Limits
	}{{"adaptive", provider.Limits{}}, {"adaptive_false", provider.Limits{NoAdaptive: true}}} {
		b.Run(c.name, func(b *testing.B) {
			const conc, calls, latency = 1000, 20000, 100 * time.Millisecond
			var sum float64
			for range b.N {
				r, err := NewRegistry(context.Background(), NewMemStore(), Config{Clock: retry.SystemClock{}, AdaptiveMax: conc})
				if err != nil {
					b.Fatal(err)
				}
				l := r.For(provider.Config{Name: "quiet", Limits: c.limits})
				var left atomic.Int64
				left.Store(calls)
				start := time.Now()
				var wg sync.WaitGroup
				for range conc {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for left.Add(-1) >= 0 {
							p, err := l.Acquire(context.Background(), 0)
							if err != nil {
								b.Error(err)
								return
							}
							time.Sleep(latency) // the call
							p.Done(provider.Response{}, nil)
						}
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				r.Close()
				ideal := time.Duration(calls/conc) * latency
				sum += ideal.Seconds() / elapsed.Seconds()
			}
			b.ReportMetric(100*sum/float64(b.N), "%_of_ideal")
		})
	}
}

// BenchmarkAcquireDone measures the limiter's CPU a call at zero latency,
// where the pool spends it: 128 goroutines a core acquiring and reporting
// successes through one adaptive window, as a worker's handlers do (-cpu 1
// for the CPU a call without the contention of the mutex).
//
//	go test ./ratelimit -run '^$' -bench BenchmarkAcquireDone -count 3 -cpu 1
func BenchmarkAcquireDone(b *testing.B) {
	r, err := NewRegistry(context.Background(), NewMemStore(), Config{Clock: retry.SystemClock{}, AdaptiveMax: 1000})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	l := r.For(provider.Config{Name: "quiet"})
	b.SetParallelism(128)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			p, err := l.Acquire(context.Background(), 0)
			if err != nil {
				b.Error(err)
				return
			}
			p.Done(provider.Response{Usage: provider.Usage{InputTokens: 10, OutputTokens: 5}}, nil)
		}
	})
}
