package main

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// The GC target: Go's default in a process hosting the server, WorkerGOGC
// in one connected to a server elsewhere, and $GOGC, when set, wins. (Not
// parallel: it sets the process's GC target.)
func TestTuneGC(t *testing.T) {
	if v, set := os.LookupEnv("GOGC"); set {
		require.NoError(t, os.Unsetenv("GOGC"))
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	embedded := testenv.Broker(t)
	tuneGC(embedded)
	require.Equal(t, 100, gcPercent(), "hosting the server: Go's default")

	tuneGC(testenv.Connect(t, embedded))
	require.Equal(t, WorkerGOGC, gcPercent())

	debug.SetGCPercent(100)
	t.Setenv("GOGC", "150") // read by tuneGC only: the runtime read it at start
	tuneGC(embedded)
	require.Equal(t, 100, gcPercent(), "$GOGC set: left to the runtime")
}
