package jetpool_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a Client starts (its workers, the catcher, the embedded
// server) is gone once Close returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
