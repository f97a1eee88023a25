package provider

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// retryAfter reads Retry-After (seconds or an HTTP date) and OpenAI's
// retry-after-ms; the longer wins.
func retryAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	if v := h.Get("Retry-After"); v != "" {
		if x, ok := retry.ParseRetryAfter(v, now); ok {
			d = x
		}
	}
	if v := h.Get("Retry-After-Ms"); v != "" {
		if x, ok := retry.ParseRetryAfterMS(v); ok {
			d = max(d, x)
		}
	}
	return d
}

// capWaits cuts e's waits (Retry-After, reset, and the buckets' resets) to
// the provider's max_retry_after, noting the longest wait asked for in
// e.RateLimit.Capped: a cooldown always ends, whatever a header says.
func (c *client) capWaits(e *retry.Error) {
	limit := c.cfg.RetryAfterCap()
	capped := func(d time.Duration) time.Duration {
		if d > limit {
			e.RateLimit.Capped = max(e.RateLimit.Capped, d)
			return limit
		}
		return d
	}
	e.RetryAfter, e.Reset = capped(e.RetryAfter), capped(e.Reset)
	e.RateLimit.Requests.Reset = capped(e.RateLimit.Requests.Reset)
	e.RateLimit.Tokens.Reset = capped(e.RateLimit.Tokens.Reset)
}

// noteRateLimit fills the rate-limit headers of a 2xx response into the
// call's outcome: out on success, the *retry.Error of an error inside the
// body or stream (which has no headers of its own). Adapters defer it once
// send has returned the response.
func (c *client) noteRateLimit(h http.Header, out *Response, err *error) {
	rl := rateLimitOf(h, c.now())
	if !rl.Known() {
		return
	}
	e := &retry.Error{RateLimit: rl}
	c.capWaits(e)
	if *err == nil {
		out.RateLimit = e.RateLimit
		return
	}
	var re *retry.Error
	if errors.As(*err, &re) && !re.RateLimit.Known() {
		re.RateLimit.Requests, re.RateLimit.Tokens = e.RateLimit.Requests, e.RateLimit.Tokens
		re.RateLimit.Capped = max(re.RateLimit.Capped, e.RateLimit.Capped)
	}
}

// rateLimitHeaders name a bucket's limit, remaining and reset headers.
type rateLimitHeaders struct{ limit, remaining, reset string }

var (
	// requestBuckets: OpenAI, Groq and most compatible endpoints; the bare
	// x-ratelimit-* of some gateways (counted as requests); Anthropic.
	requestBuckets = []rateLimitHeaders{
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"},
		{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	}
	// tokenBuckets: OpenAI and Groq; Anthropic's combined, input and
	// output token buckets (the one with least left counts).
	tokenBuckets = []rateLimitHeaders{
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
		{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
		{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
		{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
	}
)

// rateLimitOf reads what a response's rate-limit headers say about the
// request and token buckets. Of several buckets of one kind, the one with
// the least left wins. Unreadable values are ignored.
func rateLimitOf(h http.Header, now time.Time) retry.RateLimit {
	return retry.RateLimit{Requests: bucketOf(h, requestBuckets, now), Tokens: bucketOf(h, tokenBuckets, now)}
}

func bucketOf(h http.Header, names []rateLimitHeaders, now time.Time) retry.Bucket {
	var out retry.Bucket
	for _, n := range names {
		rem, ok := headerInt(h, n.remaining)
		if !ok || (out.Known && rem >= out.Remaining) {
			continue
		}
		b := retry.Bucket{Known: true, Remaining: rem}
		b.Limit, _ = headerInt(h, n.limit)
		if v := h.Get(n.reset); v != "" {
			b.Reset, _ = retry.ParseReset(v, now)
		}
		out = b
	}
	return out
}

// headerInt reads a non-negative count (some gateways send "12.0").
func headerInt(h http.Header, k string) (int, bool) {
	v := strings.TrimSpace(h.Get(k))
	if v == "" {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1e15 {
		return 0, false
	}
	return int(f), true
}

// resetHeaders are the rate-limit reset headers of OpenAI (and Groq, and most
// compatible endpoints: "6m0s", "20ms") and of Anthropic (RFC 3339 times).
var resetHeaders = []string{
	"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens",
	"Anthropic-Ratelimit-Requests-Reset", "Anthropic-Ratelimit-Tokens-Reset",
	"Anthropic-Ratelimit-Input-Tokens-Reset", "Anthropic-Ratelimit-Output-Tokens-Reset",
}

// resetAfter is the longest of the reset headers.
func resetAfter(h http.Header, now time.Time) time.Duration {
	var d time.Duration
	for _, k := range resetHeaders {
		if v := h.Get(k); v != "" {
			if x, ok := retry.ParseReset(v, now); ok {
				d = max(d, x)
			}
		}
	}
	return d
}
