package retry

import "testing"

// Compiled on first use, a pattern that does not compile would panic only
// when a call fails: every one is compiled here.
func TestPatternsCompile(t *testing.T) {
	if len(patterns) < 10 {
		t.Fatalf("%d patterns registered; the classifier's are missing", len(patterns))
	}
	for i, re := range patterns {
		if re() == nil {
			t.Errorf("pattern %d: nil", i)
		}
	}
}
