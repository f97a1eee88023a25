package worker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLogDiag(t *testing.T) {
	viol := "SchemaViolationError: 2 schema errors: at (root): missing property 'author'; at /title: got number, want string"
	output := strings.Repeat("Sure! Here is the answer in prose. ", 30)
	for _, tc := range []struct{ name, diag, want string }{{
		name: "repeated schema failures, permanent form",
		diag: "failed permanently: " + viol + " (after 4 attempts, 1 delivery: [1] " + viol + "; [2] " + viol + "; [3] " + viol + "; [4] " + viol + "); last output: " + output,
		want: "failed permanently: " + viol + " (after 4 attempts, 1 delivery: [1-4] " + viol + "); last output: " + output[:LogOutputMaxLen-1] + "…",
	}, {
		name: "runs of alike attempts among others",
		diag: "failed after 5 attempts (2 deliveries): [1] RateLimitError: 429; [2] RateLimitError: 429; [3] NetworkError; [4] RateLimitError: 429 (batch round); [5] RateLimitError: 429 (batch round)",
		want: "failed after 5 attempts (2 deliveries): [1-2] RateLimitError: 429; [3] NetworkError; [4-5] RateLimitError: 429 (batch round)",
	}, {
		name: "nothing to fold",
		diag: "failed permanently: AuthError: invalid api key",
		want: "failed permanently: AuthError: invalid api key",
	}, {
		name: "a list it cannot read is left alone",
		diag: "failed after 2 attempts (1 delivery): [1] X: see [7] Y; [3] X",
		want: "failed after 2 attempts (1 delivery): [1] X: see [7] Y; [3] X",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, logDiag(tc.diag))
		})
	}
	long := "failed after 10 attempts (1 delivery): [1] " + strings.Repeat("a", 300) + "; [2] " + strings.Repeat("b", 300) + "; [3] c"
	got := logDiag(long)
	require.Len(t, []rune(got), LogDiagMaxLen)
	require.True(t, strings.HasSuffix(got, "…"))
}
