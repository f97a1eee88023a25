package provider_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// Rate-limit headers reach the limiter on successes and errors alike:
// OpenAI's and Groq's x-ratelimit-*, Anthropic's anthropic-ratelimit-*
// (the token bucket with least left counts), in every adapter that gets
// them.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	h := providertest.Header
	openaiHeaders := h("X-Ratelimit-Limit-Requests", "500", "X-Ratelimit-Remaining-Requests", "499",
		"X-Ratelimit-Reset-Requests", "120ms", "X-Ratelimit-Limit-Tokens", "200000",
		"X-Ratelimit-Remaining-Tokens", "150000", "X-Ratelimit-Reset-Tokens", "6m0s")
	openai := retry.RateLimit{Requests: retry.Bucket{Known: true, Limit: 500, Remaining: 499, Reset: 120 * time.Millisecond},
		Tokens: retry.Bucket{Known: true, Limit: 200000, Remaining: 150000, Reset: 6 * time.Minute}}
	// Anthropic's reset is a moment, to the second: the bucket's Reset is
	// the time left until it when the answer is read (checked below between
	// the time left before and after the call, not against a fixed 30 s a
	// loaded machine may be seconds late for).
	resetAt := time.Now().Add(30 * time.Second).UTC().Truncate(time.Second)
	reset := resetAt.Format(time.RFC3339)
	anthropicHeaders := h("Anthropic-Ratelimit-Requests-Limit", "50", "Anthropic-Ratelimit-Requests-Remaining", "0",
		"Anthropic-Ratelimit-Requests-Reset", reset,
		"Anthropic-Ratelimit-Input-Tokens-Limit", "40000", "Anthropic-Ratelimit-Input-Tokens-Remaining", "39000",
		"Anthropic-Ratelimit-Output-Tokens-Limit", "8000", "Anthropic-Ratelimit-Output-Tokens-Remaining", "120")
	for _, c := range []struct {
		name  string
		kind  string
		serve http.Handler
		err   bool
		want  retry.RateLimit
		// resetAt, when set, is the moment the request bucket resets.
		resetAt time.Time
	}{
		{name: "openai success", kind: provider.KindOpenAI,
			serve: providertest.Reply{Status: 200, Header: openaiHeaders, Body: providertest.OpenAIChat("m", "hi", 3, 1)}, want: openai},
		{name: "openai stream", kind: provider.KindOpenAI,
			serve: providertest.SSE{Header: openaiHeaders, Events: providertest.OpenAIStream("m", []string{"hi"}, 3, 1)}, want: openai},
		{name: "openai 429", kind: provider.KindOpenAI, err: true,
			serve: providertest.Reply{Status: 429, Header: openaiHeaders, Body: providertest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")},
			want:  openai},
		{name: "openai 500 keeps its headers too", kind: provider.KindOpenAI, err: true,
			serve: providertest.Reply{Status: 500, Header: openaiHeaders, Body: providertest.OpenAIError("boom", "server_error", "")},
			want:  openai},
		{name: "an error inside a 200 stream gets the stream's headers", kind: provider.KindOpenAI, err: true,
			serve: providertest.SSE{Header: openaiHeaders, Events: []string{"data: {\"error\":{\"message\":\"Error 500\",\"type\":\"server_error\"}}\n\n"}},
			want:  openai},
		{name: "anthropic success: the emptiest token bucket", kind: provider.KindAnthropic,
			serve: providertest.Reply{Status: 200, Header: anthropicHeaders, Body: providertest.AnthropicMessage("m", "hi", 3, 1)},
			want: retry.RateLimit{Requests: retry.Bucket{Known: true, Limit: 50, Remaining: 0},
				Tokens: retry.Bucket{Known: true, Limit: 8000, Remaining: 120}}, resetAt: resetAt},
		{name: "no headers, nothing known", kind: provider.KindOpenAI,
			serve: providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "hi", 3, 1)}},
		{name: "unreadable values are ignored", kind: provider.KindOpenAI,
			serve: providertest.Reply{Status: 200, Header: h("X-Ratelimit-Remaining-Requests", "lots"), Body: providertest.OpenAIChat("m", "hi", 3, 1)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := providertest.NewServer(t, c.serve)
			p := providertest.New(t, providertest.Config(c.kind, srv))
			before := time.Until(c.resetAt)
			resp, err := p.Call(context.Background(), provider.Request{Model: "m", Stream: c.serve != nil && isSSE(c.serve),
				Messages: []provider.Message{{Role: "user", Content: "hi"}}})
			after := time.Until(c.resetAt)
			got := resp.RateLimit
			if c.err {
				require.Error(t, err)
				got = retry.AsError(err).RateLimit
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, c.want.Requests.Known, got.Requests.Known)
			require.Equal(t, c.want.Requests.Limit, got.Requests.Limit)
			require.Equal(t, c.want.Requests.Remaining, got.Requests.Remaining)
			if c.resetAt.IsZero() {
				require.Equal(t, c.want.Requests.Reset, got.Requests.Reset)
			} else {
				require.GreaterOrEqual(t, got.Requests.Reset, after, "time left until the reset, read after the call began")
				require.LessOrEqual(t, got.Requests.Reset, before, "time left until the reset, read before the call ended")
			}
			require.Equal(t, c.want.Tokens.Known, got.Tokens.Known)
			require.Equal(t, c.want.Tokens.Limit, got.Tokens.Limit)
			require.Equal(t, c.want.Tokens.Remaining, got.Tokens.Remaining)
			require.Equal(t, c.want.Tokens.Reset, got.Tokens.Reset)
		})
	}
}

func isSSE(h http.Handler) bool {
	_, ok := h.(providertest.SSE)
	return ok
}

// A Retry-After (or a reset) above the provider's max_retry_after is cut to
// it, and the wait asked for is kept to be logged: a year's Retry-After, or
// a date in 2100, must not stop the provider for every job.
func TestRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	h := providertest.Header
	for _, c := range []struct {
		name   string
		header http.Header
		max    time.Duration
		wait   time.Duration
		capped time.Duration
	}{
		{name: "ten years, the default cap", header: h("Retry-After", "315360000"),
			wait: provider.MaxRetryAfterDefault, capped: 24 * time.Hour}, // retry.ParseRetryAfter clamps at a day first
		{name: "a date in 2100", header: h("Retry-After", "Fri, 01 Jan 2100 00:00:00 GMT"),
			wait: provider.MaxRetryAfterDefault, capped: time.Until(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))},
		{name: "a reset past a configured cap", header: h("X-Ratelimit-Reset-Requests", "6m0s", "X-Ratelimit-Remaining-Requests", "0"),
			max: time.Minute, wait: time.Minute, capped: 6 * time.Minute},
		{name: "within the cap: as sent", header: h("Retry-After", "20"), wait: 20 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := providertest.NewServer(t, providertest.Reply{Status: 429, Header: c.header,
				Body: providertest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")})
			cfg := providertest.Config(provider.KindOpenAI, srv)
			cfg.MaxRetryAfter = c.max
			p := providertest.New(t, cfg)
			_, err := p.Call(context.Background(), provider.Request{Model: "m", Messages: []provider.Message{{Role: "user", Content: "hi"}}})
			e := retry.AsError(err)
			require.Equal(t, retry.ClassRateLimit, e.Class)
			require.InDelta(t, c.wait, e.Wait(), float64(time.Second))
			require.InDelta(t, c.capped, e.RateLimit.Capped, float64(time.Minute))
			require.LessOrEqual(t, e.RateLimit.Requests.Reset, cfg.RetryAfterCap())
		})
	}
}
