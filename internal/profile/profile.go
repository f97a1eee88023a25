// Package profile writes the pprof profiles a jetpool process is asked for:
// a CPU profile of a command ($JETPOOL_CPUPROFILE, or `jetpool bench
// --cpuprofile-work` of its zero-latency run) and a heap profile
// ($JETPOOL_MEMPROFILE, when a worker is told to stop, when `run` or `retry`
// has every result of its job, or after the bench's zero-latency run).
package profile

import (
	"os"
	"runtime"
	"runtime/pprof"
)

// StartCPU starts a CPU profile written to path; stop ends it and closes the
// file.
func StartCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// WriteHeap writes a heap profile to path, after a collection, so that it
// shows what is live; an empty path writes nothing. A profile that cannot be
// written is skipped: it must not fail the command it describes.
func WriteHeap(path string) {
	if path == "" {
		return
	}
	if f, err := os.Create(path); err == nil {
		runtime.GC()
		_ = pprof.WriteHeapProfile(f)
		f.Close()
	}
}
