//go:build chaos

package e2e

import (
	"os"
	"testing"
	"time"
)

const chaosBuild = true

// longChaos skips, unless JETPOOL_CHAOS_LONG is set, a chaos case whose
// fault alone lasts longer than CI's budget allows (the default AckWait's
// freezes of 40 s and more): run by hand before a release
// (docs/durability.md).
func longChaos(t *testing.T, fault time.Duration) {
	t.Helper()
	if fault >= 30*time.Second && os.Getenv("JETPOOL_CHAOS_LONG") == "" {
		t.Skipf("a %s fault: JETPOOL_CHAOS_LONG=1 go test -tags chaos -run '^TestChaos' ./e2e/", fault)
	}
}
