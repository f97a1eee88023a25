package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// The GC target: Go's default in a process hosting the server, WorkerGOGC
// in one connected to a server elsewhere, each with a soft memory limit
// (a worker's sized by its concurrency), and $GOGC, when set, wins. (Not
// parallel: it sets the process's GC target.)
func TestTuneGC(t *testing.T) {
	if v, set := os.LookupEnv("GOGC"); set {
		require.NoError(t, os.Unsetenv("GOGC"))
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	if v, set := os.LookupEnv("GOMEMLIMIT"); set {
		require.NoError(t, os.Unsetenv("GOMEMLIMIT"))
		t.Cleanup(func() { os.Setenv("GOMEMLIMIT", v) })
	}
	t.Cleanup(func() { debug.SetMemoryLimit(math.MaxInt64) })
	ctx := t.Context()
	embedded := testenv.Broker(t)
	stop := tuneGC(ctx, embedded, 64)
	require.Equal(t, 100, gcPercent(), "hosting the server: Go's default")
	require.EqualValues(t, embeddedMemoryFloor, debug.SetMemoryLimit(-1), "and a soft memory limit")
	stop()
	debug.SetMemoryLimit(math.MaxInt64)

	tuneGC(ctx, testenv.Connect(t, embedded), 1000)()
	require.Equal(t, WorkerGOGC, gcPercent())
	require.EqualValues(t, workerMemoryFloor+1000*workerSlotMemory, debug.SetMemoryLimit(-1),
		"a worker of a server elsewhere: a floor and so much a slot")
	debug.SetMemoryLimit(math.MaxInt64)

	debug.SetGCPercent(100)
	t.Setenv("GOGC", "150") // read by tuneGC only: the runtime read it at start
	tuneGC(ctx, embedded, 64)()
	require.Equal(t, 100, gcPercent(), "$GOGC set: left to the runtime")
	require.EqualValues(t, math.MaxInt64, debug.SetMemoryLimit(-1))
}

// The limit follows the live heap once it passes the floor, and comes
// back down with it.
func TestFollowLiveHeap(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	const floor = 8 << 20
	stop := followLiveHeap(t.Context(), memoryTarget{floor: floor, headroom: 1.5, every: 50 * time.Millisecond})
	defer stop()
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 1<<20)) // 64 MiB live
	}
	runtime.GC()
	testenv.Eventually(t, 10*time.Second, func() bool {
		return debug.SetMemoryLimit(-1) >= 90<<20 // about 1.5 × 64 MiB, and the stacks beside
	}, "the limit follows a live heap of 64 MiB")
	runtime.KeepAlive(keep)
	keep = nil
	runtime.GC()
	testenv.Eventually(t, 10*time.Second, func() bool { return debug.SetMemoryLimit(-1) < 32<<20 }, "and comes back down")
}

// gcPercent is the process's GC target now (GOGC), read without setting it.
func gcPercent() int {
	s := []rtmetrics.Sample{{Name: "/gc/gogc:percent"}}
	rtmetrics.Read(s)
	return int(s[0].Value.Uint64())
}
