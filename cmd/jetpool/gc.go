package main

import (
	"context"
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// tuneGC applies WorkerGOGC unless $GOGC says otherwise or b's server runs
// in this process. A process that hosts the embedded server keeps Go's
// default target: its live heap holds the server's state, which grows with
// the job (the results stream's subject index, about 150 bytes a record),
// so a higher target multiplies a growing base: `jetpool run` of 1M records
// peaked far higher at 200 than at 100, for no measurable speed-up at that
// size (docs/performance.md). Either process also gets a soft memory limit
// that follows its live heap (followLiveHeap) unless $GOMEMLIMIT or $GOGC
// is set: a worker's, sized by its concurrency (workerMemory), keeps
// WorkerGOGC's few collections while its heap is small and caps the five
// times its live heap that WorkerGOGC would let it grow to. The returned
// func ends the limit's watch; the limit and the GC target stay (the
// embedded server's shutdown, after it, writes its state under the same
// limit).
func tuneGC(ctx context.Context, b *broker.Broker, concurrency int) (stop func()) {
	_, gogc := os.LookupEnv("GOGC")
	_, limit := os.LookupEnv("GOMEMLIMIT")
	if b.Server() == nil && !gogc {
		debug.SetGCPercent(WorkerGOGC)
	}
	if gogc || limit {
		return func() {}
	}
	if b.Server() == nil {
		return followLiveHeap(ctx, workerMemory(concurrency))
	}
	return followLiveHeap(ctx, memoryTarget{floor: embeddedMemoryFloor, headroom: liveHeapHeadroom, every: 500 * time.Millisecond})
}

// memoryTarget is how a soft memory limit follows the live heap: at least
// floor, else headroom times the live heap plus what the runtime holds
// beside the heap (goroutine stacks above all), looked at every so often.
type memoryTarget struct {
	floor    int64
	headroom float64
	every    time.Duration
}

// workerMemory is a worker process's limit: a floor for the process and
// workerSlotMemory for each call slot (a handler's stack and its record
// grow the live heap by about that much a slot, which the floor
// anticipates so that a pool filling its slots does not collect without
// pause before the next look), and twice the live heap past it, looked at
// often since a pool's heap grows as fast as its slots fill.
func workerMemory(concurrency int) memoryTarget {
	return memoryTarget{floor: workerMemoryFloor + int64(max(concurrency, 1))*workerSlotMemory, headroom: 2,
		every: 100 * time.Millisecond}
}

const (
	workerMemoryFloor = 32 << 20
	workerSlotMemory  = 12 << 10
)

// embeddedMemoryFloor is the soft memory limit of a process hosting the
// embedded server while its live heap is small: the runtime collects more
// often as the heap nears it, rather than letting it grow to twice the
// live heap: `jetpool run` of a million records peaks far lower with it, at
// a small cost in rate (docs/performance.md has the runs).
const embeddedMemoryFloor = 256 << 20

// liveHeapHeadroom is how far above the live heap the limit is kept once
// the floor is passed: a job whose server state outgrows the floor (10M
// records) must not make the collector run without pause.
const liveHeapHeadroom = 1.5

// followLiveHeap keeps the soft memory limit (debug.SetMemoryLimit) at
// t.floor, or at t.headroom times the live heap and the goroutine stacks
// plus the rest of the runtime's memory beside the heap once that is more,
// looking every t.every, until ctx ends or stop is called. The limit it
// last set stays. The stacks count with the live heap, as they do in Go's
// own heap goal: a collection scans both, so a pool whose records wait out
// backoffs in thousands of goroutines, with a small heap, would otherwise
// collect after every few megabytes allocated, scanning every stack each
// time.
func followLiveHeap(ctx context.Context, t memoryTarget) (stop func()) {
	debug.SetMemoryLimit(t.floor)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/total:bytes"},
			{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
			{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/heap/released:bytes"},
			{Name: "/memory/classes/heap/stacks:bytes"}}
		tick := time.NewTicker(t.every)
		defer tick.Stop()
		limit := t.floor
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rtmetrics.Read(sample)
			var v [7]uint64
			for i, s := range sample {
				if s.Value.Kind() != rtmetrics.KindUint64 {
					return // a runtime without the metric: the floor stays
				}
				v[i] = s.Value.Uint64()
			}
			beside := int64(v[1]) - int64(v[2]+v[3]+v[4]+v[5]) // stacks, metadata, buffers
			stacks := int64(v[6])
			want := max(t.floor, int64(float64(v[0]+v[6])*t.headroom)+max(beside-stacks, 0))
			if want > limit+limit/20 || want < limit-limit/20 {
				limit = want
				debug.SetMemoryLimit(limit)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
