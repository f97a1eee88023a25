package retry

import "time"

// RateLimit is what a response's rate-limit headers said about the
// provider's buckets (OpenAI's and Groq's x-ratelimit-*, Anthropic's
// anthropic-ratelimit-*), on a success or an error alike. The zero value
// knows nothing: a bucket's counts mean something only when Known.
type RateLimit struct {
	Requests Bucket `json:"requests,omitzero"`
	Tokens   Bucket `json:"tokens,omitzero"`
	// Capped is the wait the provider asked for (Retry-After or a reset)
	// when it was longer than the provider's max_retry_after and was cut
	// to it; 0 when nothing was cut.
	Capped time.Duration `json:"capped,omitempty"`
}

// Bucket is one of a provider's rate-limit buckets, as a response saw it.
type Bucket struct {
	Known     bool          `json:"known,omitempty"`     // a remaining count was sent
	Limit     int           `json:"limit,omitempty"`     // the bucket's size; 0 when not sent
	Remaining int           `json:"remaining,omitempty"` // what is left
	Reset     time.Duration `json:"reset,omitempty"`     // until it is full again (OpenAI) or resets; 0 when not sent
}

// Empty reports whether a bucket the headers describe has nothing left.
func (r RateLimit) Empty() bool {
	return (r.Requests.Known && r.Requests.Remaining <= 0) || (r.Tokens.Known && r.Tokens.Remaining <= 0)
}

// Known reports whether the headers described any bucket.
func (r RateLimit) Known() bool { return r.Requests.Known || r.Tokens.Known }

// EmptyReset is the reset of the empty buckets (the longest), 0 when none
// is empty or none said when it resets.
func (r RateLimit) EmptyReset() time.Duration {
	var d time.Duration
	for _, b := range []Bucket{r.Requests, r.Tokens} {
		if b.Known && b.Remaining <= 0 {
			d = max(d, b.Reset)
		}
	}
	return d
}
