package testenv

import (
	"flag"
	"strconv"
)

// ParallelWaits runs a package's parallel tests n at a time, unless the
// command line says -parallel: for a package whose tests mostly wait (on
// AckWait, backoffs, faults), not compute, GOMAXPROCS at a time leaves a
// 2-core machine idle. Call it in TestMain, before m.Run.
func ParallelWaits(n int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", strconv.Itoa(n))
	}
}
