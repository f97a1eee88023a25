package retry

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  *Error
		want bool
	}{
		{"nil", nil, false},
		{"rate limit", &Error{Status: 429, Message: "slow down"}, true},
		{"server", &Error{Status: 529, ProviderType: "overloaded_error", Message: "Overloaded"}, true},
		{"network", AsError(errors.New("read tcp: connection reset by peer")), true},
		{"context overflow", &Error{Status: 400, Message: "prompt is too long"}, false},
		{"context overflow with an empty-message class label", &Error{Class: ClassContextOverflow}, false},
		{"empty message", &Error{}, true},
		{"empty message labelled unknown", &Error{Class: ClassUnknown}, true},
		{"empty message with a permanent status", &Error{Status: 401}, false},
		{"empty 400 body", &Error{Status: 400}, false},
		{"auth", &Error{Status: 403, Message: "forbidden"}, false},
		{"auth type without status", &Error{ProviderType: "permission_error", Message: "nope"}, false},
		{"marker over a transient label", &Error{Class: ClassRateLimit, Message: "429: invalid api key"}, false},
		{"overflow over a transient label", &Error{Class: ClassServer, Message: "Context size has been exceeded."}, false},
		{"invalid request", &Error{Status: 422, Message: "bad"}, false},
		{"unknown", &Error{Message: "something odd"}, false},
		{"schema", &Error{Class: ClassSchemaViolation, Message: "missing title"}, false},
		{"programming", FromPanic("boom"), false},
	} {
		require.Equal(t, tc.want, Retryable(tc.err), tc.name)
		if tc.err != nil {
			require.Equal(t, tc.want, tc.err.Retryable(), tc.name)
		}
	}
}

func TestExecRetryable(t *testing.T) {
	t.Parallel()
	on, off := Policy{Enabled: true}, Policy{}
	for _, c := range Classes {
		e := &Error{Class: c, Message: "x"}
		require.Equal(t, !c.Permanent(), on.ExecRetryable(e), c)
		require.False(t, off.ExecRetryable(e), c)
	}
	require.True(t, on.ExecRetryable(&Error{Message: "something odd"}), "unknown: the exec layer retries")
	require.False(t, on.ExecRetryable(&Error{Class: ClassServer, Message: "re-authenticate"}))
	require.False(t, on.ExecRetryable(nil))
}
