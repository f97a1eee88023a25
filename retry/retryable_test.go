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
		// Text without structure is retried like its structured form.
		{"a status in words", &Error{Message: "Error 429"}, true},
		{"error code in words", &Error{Message: "error code 500"}, true},
		{"upstream returned 5xx", &Error{Message: "upstream returned 5xx"}, true},
		{"a status and no body", &Error{Message: "500 status code (no body)"}, true},
		{"request cancelled", &Error{Message: "request cancelled"}, true},
		{"socket closed", &Error{Message: "The socket connection was closed unexpectedly"}, true},
		{"bedrock throttling", &Error{Message: "Too many tokens, please wait before trying again"}, true},
		{"batch token limit", &Error{ProviderCode: "token_limit_exceeded", Message: "Enqueued token limit reached"}, true},
		{"a count is not a status", &Error{Message: "prompt is too long: 500 tokens > 400 maximum"}, false},
		{"invalid api key beats the status in words", &Error{Message: "Error 500: invalid api key"}, false},
		// The unlisted-4xx rule: unknown, so the session layer leaves it to the exec layer.
		{"unlisted 4xx", &Error{Status: 418, Message: "I'm a teapot"}, false},
		{"listed transient 4xx", &Error{Status: 425, Message: "Too Early"}, true},
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
	require.True(t, on.ExecRetryable(&Error{Status: 418, Message: "I'm a teapot"}), "an unlisted 4xx: the exec layer retries")
	require.False(t, on.ExecRetryable(&Error{Status: 422, Message: "bad"}), "a listed 4xx is permanent")
	require.False(t, on.ExecRetryable(&Error{Class: ClassServer, Message: "re-authenticate"}))
	require.False(t, on.ExecRetryable(nil))
}
