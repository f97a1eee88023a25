package bench

import (
	"fmt"
	"runtime/metrics"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the CPU this process, its waited-for children (the nats
// CLI) and the running processes pids (an external server) have used: the
// server's side of a run counts with the client's, whichever process each
// is.
func cpuTime(pids ...int) time.Duration {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	tv := func(t syscall.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime) + serverCPU(pids...)
}

// cpuUse is the CPU a measure took: per message, and as cores busy; and
// the heap bytes this process allocated a message (the embedded server's
// with the client's; against an external server, the client's alone). At
// zero latency the garbage collector's share of the CPU follows the
// allocation: GOGC=300 took jetpool's work from 55 to 44 µs a record and
// the raw work loop's from 32 to 28.
type cpuUse struct {
	perMsg time.Duration
	cores  float64
	alloc  float64
	// server is the part of perMsg the external server took (0 on the
	// embedded one, whose CPU is this process's): with the client's part,
	// it says on which side of the connection a gap is.
	server time.Duration
}

// meterCPU starts metering (cpuTime of pids, and this process's heap
// allocation); the returned func ends it for n messages.
func meterCPU(pids ...int) func(n int) cpuUse {
	c0, s0, a0, t0 := cpuTime(pids...), serverCPU(pids...), heapAllocated(), time.Now()
	return func(n int) cpuUse {
		c, sv, a, t := cpuTime(pids...)-c0, serverCPU(pids...)-s0, heapAllocated()-a0, time.Since(t0)
		per := time.Duration(max(n, 1))
		return cpuUse{perMsg: c / per, cores: c.Seconds() / t.Seconds(), alloc: float64(a) / float64(max(n, 1)), server: sv / per}
	}
}

// serverCPU is the CPU of the processes pids alone (the external server).
func serverCPU(pids ...int) time.Duration {
	var c time.Duration
	for _, pid := range pids {
		if pid > 0 {
			c += procCPU(pid)
		}
	}
	return c
}

// heapAllocated is the bytes this process has allocated on its heap.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

func rate(r float64) string { return fmt.Sprintf("%.0f/s", r) }

// cpuText gives a measure's CPU over its runs: µs a message (or record),
// of them the external server's (server; nil on the embedded one), and
// cores busy, each as spread gives it.
func cpuText(us, server, cores []float64, per string) string {
	micros := func(v float64) string { return fmt.Sprintf("%.0f", v) }
	s := "CPU " + spread(us, micros) + " µs a " + per
	if server != nil {
		s += " (" + spread(server, micros) + " of them the server's)"
	}
	return s + ", " + spread(cores, func(v float64) string { return fmt.Sprintf("%.2f", v) }) + " cores busy"
}

// allocText gives a measure's heap allocation over its runs, in KiB a
// message (cpuUse.alloc).
func allocText(bytes []float64, per string) string {
	return spread(bytes, func(v float64) string { return fmt.Sprintf("%.1f", v/1024) }) + " KiB allocated a " + per
}

// spread is the median of v, with its range when there is more than one:
// "97/s (96–100)", "97% (96–100%)".
func spread(v []float64, format func(float64) string) string {
	v = slices.Sorted(slices.Values(v))
	s := format(v[len(v)/2])
	if len(v) > 1 {
		lo, hi := strings.TrimSuffix(format(v[0]), "/s"), strings.TrimSuffix(format(v[len(v)-1]), "/s")
		s += " (" + strings.TrimSuffix(lo, "%") + "–" + hi + ")"
	}
	return s
}

func pct(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*a/b)
}
