package retry

import (
	"strconv"
	"strings"
	"time"
)

// httpDateLayouts are the three date formats HTTP allows (RFC 9110 §5.6.7),
// the same as net/http.ParseTime, which this package may not import.
var httpDateLayouts = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT", // IMF-fixdate
	time.RFC850,
	time.ANSIC,
}

// ParseRetryAfter parses a Retry-After header: delay-seconds (fractional
// seconds accepted, as some proxies send them) or an HTTP-date, relative to
// now. A date in the past or a negative number is 0. ok is false when v is
// empty or unreadable.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		return seconds(secs), true
	}
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return max(t.Sub(now), 0), true
		}
	}
	return 0, false
}

// ParseRetryAfterMS parses OpenAI's and Anthropic's retry-after-ms header
// (milliseconds, possibly fractional).
func ParseRetryAfterMS(v string) (time.Duration, bool) {
	ms, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil {
		return 0, false
	}
	return seconds(ms / 1000), true
}

// ParseReset parses a rate-limit reset header: OpenAI's and Groq's
// x-ratelimit-reset-requests / -tokens ("1s", "6m0s", "20ms", "1m30.5s"),
// Anthropic's anthropic-ratelimit-*-reset (an RFC 3339 timestamp), or bare
// seconds — a value above 10^9 is taken as a Unix time, as some gateways
// send. The result is relative to now and never negative.
func ParseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(v); err == nil {
		return max(d, 0), true
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs > 1e9 {
			return max(time.Unix(0, int64(secs*1e9)).Sub(now), 0), true
		}
		return seconds(secs), true
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// seconds converts a float number of seconds, clamping to [0, 24h] so that a
// hostile header can neither go negative nor overflow.
func seconds(s float64) time.Duration {
	switch {
	case !(s > 0): // also NaN
		return 0
	case s > 24*60*60:
		return 24 * time.Hour
	}
	return time.Duration(s * float64(time.Second))
}
