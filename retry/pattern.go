package retry

import (
	"regexp"
	"sync"
)

// pattern is a regular expression compiled on its first use. The
// classifier's patterns are read only when a call fails, and compiled
// they are a large share of a worker's heap at rest: a worker whose calls
// succeed never pays for them, in memory or at its start.
func pattern(expr string) func() *regexp.Regexp {
	re := sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
	patterns = append(patterns, re)
	return re
}

// patterns are every pattern, for the test that compiles them all.
var patterns []func() *regexp.Regexp
