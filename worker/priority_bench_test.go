package worker_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/worker"
)

// BenchmarkPriorities measures what priorities give two jobs on one pool
// of 64 slots, on the sim (docs/performance.md has the figures):
//
//   - shares: jobs at priorities 10 and 1, 3,000 records each, 50 ms a
//     call: the calls each started while both had work ("hi:lo").
//   - urgent: a 100-record job at priority 10, 100 ms a call, dispatched
//     while a large job at 1 runs, against the same job alone: the time
//     from its dispatch to its last result ("x_alone").
//
// Run it with
//
//	go test ./worker -run '^$' -bench BenchmarkPriorities -benchtime 1x -v
//
// JETPOOL_BENCH_BIG sets the large job's records (default 100000).
func BenchmarkPriorities(b *testing.B) {
	b.Run("shares", func(b *testing.B) {
		for range b.N {
			hi, lo := benchShares(b)
			b.ReportMetric(float64(hi)/float64(max(lo, 1)), "hi:lo")
			b.ReportMetric(float64(hi), "hi_calls")
			b.ReportMetric(float64(lo), "lo_calls")
		}
	})
	b.Run("urgent", func(b *testing.B) {
		big := 100_000
		if n := os.Getenv("JETPOOL_BENCH_BIG"); n != "" {
			fmt.Sscan(n, &big)
		}
		for range b.N {
			alone, _ := benchUrgent(b, 0)
			shared, bigCalls := benchUrgent(b, big)
			b.ReportMetric(alone.Seconds(), "s_alone")
			b.ReportMetric(shared.Seconds(), "s_beside_big")
			b.ReportMetric(shared.Seconds()/alone.Seconds(), "x_alone")
			b.ReportMetric(float64(bigCalls), "big_calls_meanwhile")
			b.ReportMetric(float64(big), "big_records")
		}
	})
}

// starts counts the calls each job starts, by the prompt's first word.
type starts struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (s *starts) wrap(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
	name, _, _ := strings.Cut(req.Messages[0].Content, " ")
	s.mu.Lock()
	s.at[name] = append(s.at[name], time.Now())
	s.mu.Unlock()
	return next()
}

func (s *starts) of(name string) []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.at[name])
}

// simJobAt dispatches a job called name of n records on the sim at
// latency, at priority.
func simJobAt(b testing.TB, bk *broker.Broker, name string, n, priority int, latency string) {
	wf := testenv.Workflow(b, "providers:\n  sim: {kind: sim, sim: {latency: "+latency+"}}\ndefaults: {provider: sim}\nactions:\n  - name: a\n    prompt: \""+name+" {{ .text }}\"\n")
	testenv.Dispatch(b, bk, wf, testenv.Records(b, n), dispatcher.Options{JobID: name, Priority: priority})
}

// benchShares runs "hi" at 10 and "lo" at 1 and counts the calls each
// started while both had work: from the later first call (and 200 ms
// more: a loop that found the pool alone took every slot) until hi had
// started all but its last tenth of calls (then its loop has little
// left to pull).
func benchShares(b *testing.B) (hi, lo int) {
	const n = 3000
	bk := testenv.Broker(b)
	simJobAt(b, bk, "hi", n, 10, "50ms")
	simJobAt(b, bk, "lo", n, 1, "50ms")
	s := &starts{at: map[string][]time.Time{}}
	counter := testenv.NewCounter()
	counter.Wrap = s.wrap
	testenv.Pool(b, bk, worker.Config{Concurrency: 64, NewProvider: counter.New})
	testenv.WaitFinished(b, bk, "hi", 5*time.Minute)
	h, l := s.of("hi"), s.of("lo")
	from, to := h[0], h[len(h)*9/10]
	if len(l) > 0 && l[0].After(from) {
		from = l[0]
	}
	from = from.Add(200 * time.Millisecond)
	in := func(ts []time.Time) (k int) {
		for _, at := range ts {
			if !at.Before(from) && !at.After(to) {
				k++
			}
		}
		return k
	}
	return in(h), in(l)
}

// benchUrgent times a 100-record job at priority 10 from its dispatch to
// its last result, alone (big 0) or dispatched once a job of big records
// at priority 1 runs on every slot; bigCalls is the calls the big job
// started meanwhile.
func benchUrgent(b *testing.B, big int) (took time.Duration, bigCalls int) {
	ctx := context.Background()
	bk := testenv.Broker(b)
	s := &starts{at: map[string][]time.Time{}}
	counter := testenv.NewCounter()
	counter.Wrap = s.wrap
	if big > 0 {
		simJobAt(b, bk, "big", big, 1, "100ms")
	}
	pool := testenv.Pool(b, bk, worker.Config{Concurrency: 64, NewProvider: counter.New})
	if big > 0 {
		testenv.Eventually(b, 5*time.Minute, func() bool { return len(s.of("big")) >= 640 }, "the big job runs")
	} else {
		// The pool is up and serving before the clock starts, as beside
		// the big job.
		testenv.Eventually(b, time.Minute, func() bool { return pool.Snapshot().Worker != "" }, "the pool runs")
	}
	before := len(s.of("big"))
	began := time.Now()
	simJobAt(b, bk, "urgent", 100, 10, "100ms")
	j, _, err := bk.GetJob(ctx, "urgent")
	if err != nil {
		b.Fatal(err)
	}
	for {
		c, err := bk.JobCounts(ctx, j, false)
		if err != nil {
			b.Fatal(err)
		}
		if c.Done >= 100 {
			break
		}
		if time.Since(began) > 5*time.Minute {
			b.Fatalf("the urgent job is not done: %+v", c)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(began), len(s.of("big")) - before
}
