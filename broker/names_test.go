package broker

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// ValidName is the token rule it always was, ^[A-Za-z0-9_-]{1,64}$, as a
// loop.
func TestValidName(t *testing.T) {
	t.Parallel()
	rule := regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	for _, s := range []string{"", "a", "job-1_x", "Z9", "a.b", "a b", "é", "a*", "a>", "\x00", strings.Repeat("x", 64),
		strings.Repeat("x", 65), "h_abc", "-", "_"} {
		require.Equal(t, rule.MatchString(s), ValidName(s), "%q", s)
	}
}
