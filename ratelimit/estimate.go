package ratelimit

import (
	"github.com/jetpool/jetpool/provider"
)

// OutputTokensDefault is the output estimate of a request that sets no
// max_tokens: the booking is corrected by the usage the provider reports.
const OutputTokensDefault = 256

// Estimate is the tokens a request is booked for before it is sent: its
// text at four characters a token, plus its max_tokens (providers count the
// requested maximum against TPM when the request arrives). Done corrects it
// by the usage reported.
func Estimate(req provider.Request) int {
	chars := len(req.System)
	for _, m := range req.Messages {
		chars += len(m.Content) + 4 // role and framing
	}
	out := OutputTokensDefault
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens", "maxOutputTokens"} {
		if n, ok := asInt(req.Params[k]); ok && n > 0 {
			out = n
			break
		}
	}
	return chars/4 + 1 + out
}

func asInt(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int64:
		return int(n), true
	case float64:
		return int(n), true
	case uint64:
		return int(n), true
	}
	return 0, false
}
