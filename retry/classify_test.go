package retry

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// timeoutError is what net/http returns for "timeout awaiting response
// headers" and Client.Timeout: a net.Error whose Timeout() is true.
type timeoutError struct{ msg string }

func (e timeoutError) Error() string   { return e.msg }
func (e timeoutError) Timeout() bool   { return true }
func (e timeoutError) Temporary() bool { return true }

// urlErr wraps err as net/http's client does.
func urlErr(err error) error {
	return &url.Error{Op: "Post", URL: "https://api.openai.com/v1/chat/completions", Err: err}
}

func truncatedJSON() error {
	var v map[string]any
	return json.Unmarshal([]byte(`{"error": {"message": "Rate`), &v)
}

func TestClassifyNil(t *testing.T) {
	t.Parallel()
	require.Equal(t, ClassNone, Classify(nil))
}

func TestAsError(t *testing.T) {
	t.Parallel()

	require.Nil(t, AsError(nil))

	e := AsError(urlErr(context.DeadlineExceeded))
	require.Equal(t, ClassNetwork, e.Class)
	require.Equal(t, "TimeoutError", e.TypeName)
	require.Equal(t, `TimeoutError: Post "https://api.openai.com/v1/chat/completions": context deadline exceeded`, e.Error())
	require.ErrorIs(t, e, context.DeadlineExceeded)

	require.Equal(t, "DNSError", AsError(&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}).TypeName)
	require.Equal(t, "TLSError", AsError(urlErr(x509.UnknownAuthorityError{})).TypeName)
	require.Equal(t, "CanceledError", AsError(context.Canceled).TypeName)
	require.Equal(t, "NetworkError", AsError(fmt.Errorf("read: %w", syscall.ECONNRESET)).TypeName)
	require.Equal(t, "Error", AsError(errors.New("something odd")).TypeName)
	require.Equal(t, ClassUnknown, AsError(errors.New("something odd")).Class)

	// An *Error without a class is classified on a copy; the original stays untouched.
	orig := &Error{Status: 429}
	got := AsError(fmt.Errorf("wrapped: %w", orig))
	require.Equal(t, ClassRateLimit, got.Class)
	require.Equal(t, ClassNone, orig.Class)

	// An *Error with a class is returned as it is.
	set := &Error{Class: ClassServer}
	require.Same(t, set, AsError(set))
}

func TestRedact(t *testing.T) {
	t.Parallel()
	e := AsError(urlErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscallErr("connect", syscall.ECONNREFUSED)}))
	e2 := AsError(&url.Error{Op: "Post", URL: "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent?alt=sse&key=AIzaSyA1234567890abcdefghijklmnopqrstuv", Err: io.EOF})
	require.NotContains(t, e2.Message, "AIza")
	require.Equal(t, `NetworkError: Post "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent?alt=sse&key=REDACTED": EOF`, e2.Error())
	require.Contains(t, e.Message, "connection refused")
	require.Equal(t, "Authorization: Bearer REDACTED", Redact("Authorization: Bearer sk-abcdefghijklmnop"))
	require.Equal(t, "key REDACTED leaked", Redact("key sk-proj-abcdefghijklmnopqrstuvwxyz leaked"))
	require.Equal(t, "Incorrect API key provided: sk-proj-****abcd.", Redact("Incorrect API key provided: sk-proj-****abcd."))
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30", 30 * time.Second, true},
		{" 2 ", 2 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"0", 0, true},
		{"-5", 0, true},
		{"Sat, 01 Mar 2025 12:01:30 GMT", 90 * time.Second, true},
		{"Saturday, 01-Mar-25 12:00:10 GMT", 10 * time.Second, true},
		{"Sat Mar  1 12:00:05 2025", 5 * time.Second, true},
		{"Sat, 01 Mar 2025 11:59:00 GMT", 0, true}, // in the past
		{"9999999999", 24 * time.Hour, true},       // clamped
		{"", 0, false},
		{"soon", 0, false},
	} {
		d, ok := ParseRetryAfter(tc.in, now)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, d, tc.in)
	}
}

func TestParseRetryAfterMS(t *testing.T) {
	t.Parallel()
	d, ok := ParseRetryAfterMS("1500")
	require.True(t, ok)
	require.Equal(t, 1500*time.Millisecond, d)
	d, ok = ParseRetryAfterMS("20.5")
	require.True(t, ok)
	require.Equal(t, 20500*time.Microsecond, d)
	d, ok = ParseRetryAfterMS("-1")
	require.True(t, ok)
	require.Zero(t, d)
	_, ok = ParseRetryAfterMS("")
	require.False(t, ok)
}

func TestParseReset(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1s", time.Second, true},             // x-ratelimit-reset-requests
		{"6m0s", 6 * time.Minute, true},       // x-ratelimit-reset-tokens
		{"20ms", 20 * time.Millisecond, true}, // OpenAI
		{"1m30.5s", 90*time.Second + 500*time.Millisecond, true},
		{"2m59.56s", 2*time.Minute + 59560*time.Millisecond, true}, // Groq
		{"2025-03-01T12:00:42Z", 42 * time.Second, true},           // anthropic-ratelimit-tokens-reset
		{"2025-03-01T13:00:00.5+01:00", 500 * time.Millisecond, true},
		{"2025-03-01T11:00:00Z", 0, true}, // in the past
		{"7", 7 * time.Second, true},
		{"1740830460", time.Minute, true}, // Unix time
		{"", 0, false},
		{"tomorrow", 0, false},
	} {
		d, ok := ParseReset(tc.in, now)
		require.Equal(t, tc.ok, ok, tc.in)
		require.Equal(t, tc.want, d, tc.in)
	}
}

// syscallErr builds what the net package wraps a failed syscall in.
func syscallErr(call string, err error) error { return fmt.Errorf("%s: %w", call, err) }
