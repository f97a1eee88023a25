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
// size (docs/performance.md). Such a process also gets a soft
// memory limit that follows its live heap (followLiveHeap) unless
// $GOMEMLIMIT or $GOGC is set. The returned func ends the limit's watch;
// the limit and the GC target stay (the embedded server's shutdown, after
// it, writes its state under the same limit).
func tuneGC(ctx context.Context, b *broker.Broker) (stop func()) {
	_, gogc := os.LookupEnv("GOGC")
	if b.Server() == nil {
		if !gogc {
			debug.SetGCPercent(WorkerGOGC)
		}
		return func() {}
	}
	if _, limit := os.LookupEnv("GOMEMLIMIT"); gogc || limit {
		return func() {}
	}
	return followLiveHeap(ctx, embeddedMemoryFloor)
}

// embeddedMemoryFloor is the soft memory limit of a process hosting the
// embedded server while its live heap is small: the runtime collects more
// often as the heap nears it, rather than letting it grow to twice the
// live heap. `jetpool run` of 1M records of 1 KiB (live heap 146 MB at the
// end): 449 MiB peak RSS and 17,220 records/s without a limit, 276 MiB and
// 15,884 records/s with 256 MiB (docs/performance.md).
const embeddedMemoryFloor = 256 << 20

// liveHeapHeadroom is how far above the live heap the limit is kept once
// the floor is passed: a job whose server state outgrows the floor (10M
// records) must not make the collector run without pause.
const liveHeapHeadroom = 1.5

// followLiveHeap keeps the soft memory limit (debug.SetMemoryLimit) at
// floor, or at liveHeapHeadroom times the live heap once that is more,
// looking every half second, until ctx ends or stop is called. The limit
// it last set stays.
func followLiveHeap(ctx context.Context, floor int64) (stop func()) {
	debug.SetMemoryLimit(floor)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sample := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		limit := floor
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rtmetrics.Read(sample)
			if sample[0].Value.Kind() != rtmetrics.KindUint64 {
				return // a runtime without the metric: the floor stays
			}
			want := max(floor, int64(float64(sample[0].Value.Uint64())*liveHeapHeadroom))
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
