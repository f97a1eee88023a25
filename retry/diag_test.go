package retry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDiagnose(t *testing.T) {
	t.Parallel()

	auth := &Error{Status: 401, TypeName: "AuthError", Message: "invalid api key"}
	rate := Attempt{N: 1, Delivery: 1, Class: ClassRateLimit, Error: "RateLimitError: 429 Too Many Requests"}
	drop := Attempt{N: 2, Delivery: 1, Class: ClassNetwork, Error: "NetworkError"}

	for _, tc := range []struct {
		name       string
		final      *Error
		attempts   []Attempt
		deliveries int
		want       string
	}{
		{"no failure", nil, nil, 1, ""},
		{"permanent at once", auth,
			[]Attempt{{N: 1, Delivery: 1, Class: ClassAuth, Error: auth.Error()}}, 1,
			"failed permanently: AuthError: invalid api key"},
		{"permanent without attempts", auth, nil, 0,
			"failed permanently: AuthError: invalid api key"},
		{"permanent after transient attempts", auth,
			[]Attempt{rate, drop, {N: 3, Delivery: 2, Class: ClassAuth, Error: auth.Error()}}, 2,
			"failed permanently: AuthError: invalid api key (after 3 attempts, 2 deliveries: " +
				"[1] RateLimitError: 429 Too Many Requests; [2] NetworkError; [3] AuthError: invalid api key)"},
		{"exhausted", &Error{Class: ClassNetwork},
			[]Attempt{rate, drop,
				{N: 3, Delivery: 1, Class: ClassServer, Error: "ServerError: Overloaded"},
				{N: 4, Delivery: 2, Class: ClassServer, Error: "ServerError: Overloaded"},
				{N: 5, Delivery: 2, Class: ClassRateLimit, Error: "RateLimitError: 429 Too Many Requests"},
				{N: 6, Delivery: 2, Class: ClassNetwork, Error: "NetworkError"}}, 2,
			"failed after 6 attempts (2 deliveries): [1] RateLimitError: 429 Too Many Requests; [2] NetworkError; " +
				"[3] ServerError: Overloaded; [4] ServerError: Overloaded; [5] RateLimitError: 429 Too Many Requests; [6] NetworkError"},
		{"one attempt, one delivery", &Error{Class: ClassNetwork},
			[]Attempt{drop}, 1,
			"failed after 1 attempt (1 delivery): [2] NetworkError"},
		{"deliveries taken from the attempts", &Error{Class: ClassServer, Message: "x"},
			[]Attempt{{N: 1, Delivery: 1, Error: "ServerError: x"}, {N: 2, Delivery: 3, Error: "ServerError: x"}}, 0,
			"failed after 2 attempts (3 deliveries): [1] ServerError: x; [2] ServerError: x"},
		{"class name when the attempt has no text", &Error{Class: ClassServer},
			[]Attempt{{N: 1, Delivery: 1, Class: ClassServer}}, 1,
			"failed after 1 attempt (1 delivery): [1] ServerError"},
		{"rate limits are attempts like any other", &Error{Class: ClassServer, Message: "x"},
			[]Attempt{{N: 1, Delivery: 1, Error: "RateLimitError: slow down"}, {N: 2, Delivery: 1, Error: "ServerError: x"}}, 1,
			"failed after 2 attempts (1 delivery): [1] RateLimitError: slow down; [2] ServerError: x"},
		{"unknown is not permanent", &Error{Message: "something odd"},
			[]Attempt{{N: 1, Delivery: 1, Class: ClassUnknown, Error: "Error: something odd"}}, 3,
			"failed after 1 attempt (3 deliveries): [1] Error: something odd"},
		{"multi-line bodies become one line", &Error{Status: 502, Message: "<html>\n<h1>502 Bad Gateway</h1>\n</html>"},
			[]Attempt{{N: 1, Delivery: 1, Error: "ServerError: <html>\n<h1>502 Bad Gateway</h1>\r\n</html>"}}, 1,
			"failed after 1 attempt (1 delivery): [1] ServerError: <html> <h1>502 Bad Gateway</h1> </html>"},
		{"keys are redacted", &Error{Class: ClassNetwork},
			[]Attempt{{N: 1, Delivery: 1, Error: `NetworkError: Post "https://x/v1?key=AIzaSyA1234567890abcdefghijklmnopqrstuv": EOF`}}, 1,
			`failed after 1 attempt (1 delivery): [1] NetworkError: Post "https://x/v1?key=REDACTED": EOF`},
	} {
		require.Equal(t, tc.want, Diagnose(tc.final, tc.attempts, tc.deliveries), tc.name)
	}
}

func TestDiagnoseTruncates(t *testing.T) {
	t.Parallel()
	long := "ServerError: " + strings.Repeat("é", 1000)
	got := Diagnose(&Error{Class: ClassServer}, []Attempt{{N: 1, Delivery: 1, Error: long}, {N: 2, Delivery: 1, Error: "NetworkError"}}, 1)

	first, rest, ok := strings.Cut(strings.TrimPrefix(got, "failed after 2 attempts (1 delivery): [1] "), "; ")
	require.True(t, ok)
	require.Len(t, []rune(first), DiagMaxLen)
	require.True(t, strings.HasSuffix(first, "é…"))
	require.Equal(t, "[2] NetworkError", rest)

	perm := Diagnose(&Error{Class: ClassAuth, Message: strings.Repeat("x", 500)}, nil, 1)
	require.Len(t, []rune(strings.TrimPrefix(perm, "failed permanently: ")), DiagMaxLen)
}
