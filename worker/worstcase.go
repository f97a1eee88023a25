package worker

import (
	"encoding/json"
	"sync/atomic"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// What a call's worst case counts, beside the text (worstCase).
const (
	// messageTokens is the framing each message may add: role markers and
	// separators (OpenAI documents 3–4 a message); requestTokens the
	// framing of the request and of the answer's start.
	messageTokens = 8
	requestTokens = 16
	// toolingTokens is the system prompt a provider adds for tools or a
	// structured output (Anthropic documents 313–346 for tool use).
	toolingTokens = 600
	// partTokens is what one image or document may count: an estimate
	// (a PDF of many pages can count more).
	partTokens = workflow.PartTokensEstimate
	// OutputReserveFallback is the output a call reserves when nothing
	// bounds it: a job dispatched before a budget required a max_tokens,
	// or one without a max_cost under its tenant's budget
	// (workflow.OutputBound).
	OutputReserveFallback = 4096
)

// warnedUnbounded is set once a worker has warned of a budget whose calls
// it had to reserve at OutputReserveFallback.
var warnedUnbounded atomic.Bool

// worstCase is the most a call of action a with request req may cost: all
// of its input (inputBound) at the dearer of the input and cache-write
// rates, and all the output its max_tokens allows. 0 without a price.
func (jr *jobRunner) worstCase(a *workflow.Action, req provider.Request, batch bool) float64 {
	if a.Price == nil {
		return 0
	}
	in := inputBound(req)
	kind := ""
	if cfg, ok := jr.providerConfig(a.Provider); ok {
		kind = cfg.Kind
	}
	out := 0
	if !a.IsEmbed() {
		n, ok := workflow.OutputBound(kind, req.Params)
		if !ok {
			n = OutputReserveFallback
			if warnedUnbounded.CompareAndSwap(false, true) {
				jr.p.log.Warn().Str("job", jr.id).Str("action", a.Name).Int("reserved_output_tokens", n).
					Msg("a job with a budget (its max_cost, or its tenant's) has an action without max_tokens: each call reserves this much output, and a longer answer can pass the budget by its excess")
			}
		}
		out = n
	}
	c := a.Price.Cost(provider.Usage{InputTokens: in, OutputTokens: out}, batch)
	// Written to the cache, input can cost more than read fresh
	// (Anthropic: 1.25×): the worst case takes the dearer.
	return max(c, a.Price.Cost(provider.Usage{InputTokens: in, CacheWriteTokens: in, OutputTokens: out}, batch))
}

// inputBound is the most input tokens req may count: a token of every
// tokenizer in use (byte-level BPE, SentencePiece with byte fallback) is at
// least one byte of text, so its bytes bound its text, plus the framing of
// each message, the tools and schema it sends, and partTokens an image or
// document.
func inputBound(req provider.Request) int {
	n := requestTokens + len(req.System)
	for _, m := range req.Messages {
		n += messageTokens + len(m.Content) + partTokens*len(m.Parts)
		for _, tc := range m.ToolCalls {
			n += len(tc.Name) + len(tc.Arguments) + messageTokens
		}
	}
	if len(req.Tools) > 0 || req.Schema != nil {
		n += toolingTokens
		if b, err := json.Marshal(req.Tools); err == nil && len(req.Tools) > 0 {
			n += len(b)
		}
		if b, err := json.Marshal(req.Schema); err == nil && req.Schema != nil {
			n += len(b)
		}
	}
	return n
}
