// Package pricing turns token usage into money: a price per million tokens
// of each kind a provider bills (input, cached input, cache writes, output;
// online and batch), the built-in table of the presets' common models, and
// the cost of one call's usage.
//
// A workflow's price: block (on a provider entry, or on an action or
// defaults:) overrides the table; workflow.Parse resolves each action's
// price once, on the dispatching machine, and the resolved price travels
// with the job, so every worker of a fleet bills a job alike whatever its
// version's table says.
package pricing

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jetpool/jetpool/provider"
)

// Price is what a model costs, in US dollars per million tokens. Zero
// optional rates take their defaults (Rates).
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
	// CachedInputPerMTok is the rate of input tokens read from the
	// provider's prompt cache (InputPerMTok when 0).
	CachedInputPerMTok float64 `json:"cached_input_per_mtok,omitempty"`
	// CacheWritePerMTok is the rate of input tokens written to the cache,
	// Anthropic's cache_creation_input_tokens (InputPerMTok when 0).
	CacheWritePerMTok float64 `json:"cache_write_per_mtok,omitempty"`
	// BatchInputPerMTok and BatchOutputPerMTok are the rates of mode: batch
	// (half the online rates when 0: OpenAI Batch and Anthropic Message
	// Batches both bill half).
	BatchInputPerMTok  float64 `json:"batch_input_per_mtok,omitempty"`
	BatchOutputPerMTok float64 `json:"batch_output_per_mtok,omitempty"`
	// Source says where the price came from: "workflow" or "built-in <date>".
	Source string `json:"source,omitempty"`
}

// BatchFactorDefault is the batch rate as a share of the online rate when
// a price sets no batch rate.
const BatchFactorDefault = 0.5

// Rates returns p with its optional rates filled in.
func (p Price) Rates() Price {
	if p.CachedInputPerMTok == 0 {
		p.CachedInputPerMTok = p.InputPerMTok
	}
	if p.CacheWritePerMTok == 0 {
		p.CacheWritePerMTok = p.InputPerMTok
	}
	if p.BatchInputPerMTok == 0 {
		p.BatchInputPerMTok = p.InputPerMTok * BatchFactorDefault
	}
	if p.BatchOutputPerMTok == 0 {
		p.BatchOutputPerMTok = p.OutputPerMTok * BatchFactorDefault
	}
	return p
}

// Cost is what usage costs at p, in dollars. Cached and cache-write tokens
// are the parts of InputTokens billed at their own rates; reasoning tokens
// are output tokens (billed as such by every provider). Batch calls pay the
// batch rates, their cached tokens the batch input rate's share of the
// cached rate.
func (p Price) Cost(u provider.Usage, batch bool) float64 {
	r := p.Rates()
	in, out := r.InputPerMTok, r.OutputPerMTok
	cached, write := r.CachedInputPerMTok, r.CacheWritePerMTok
	if batch {
		f := 1.0
		if r.InputPerMTok > 0 {
			f = r.BatchInputPerMTok / r.InputPerMTok
		}
		in, out, cached, write = r.BatchInputPerMTok, r.BatchOutputPerMTok, cached*f, write*f
	}
	plain := max(u.InputTokens-u.CachedInputTokens-u.CacheWriteTokens, 0)
	micro := float64(plain)*in + float64(u.CachedInputTokens)*cached + float64(u.CacheWriteTokens)*write +
		float64(u.OutputTokens)*out
	return micro / 1e6
}

// Validate reports a negative rate, naming its field.
func (p Price) Validate() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input_per_mtok", p.InputPerMTok}, {"output_per_mtok", p.OutputPerMTok},
		{"cached_input_per_mtok", p.CachedInputPerMTok}, {"cache_write_per_mtok", p.CacheWritePerMTok},
		{"batch_input_per_mtok", p.BatchInputPerMTok}, {"batch_output_per_mtok", p.BatchOutputPerMTok}} {
		if f.v < 0 {
			return fmt.Errorf("%s: %v must not be negative", f.name, f.v)
		}
	}
	return nil
}

// String is "$0.15 in, $0.6 out per Mtok (built-in 2025-08)".
func (p Price) String() string {
	s := "$" + num(p.InputPerMTok) + " in, $" + num(p.OutputPerMTok) + " out per Mtok"
	if p.CachedInputPerMTok > 0 && p.CachedInputPerMTok != p.InputPerMTok {
		s += ", cached $" + num(p.CachedInputPerMTok)
	}
	if p.Source != "" {
		s += " (" + p.Source + ")"
	}
	return s
}

// Lookup is the built-in price of model on the preset called providerName
// (openai, anthropic, gemini, gemini-openai, groq), matched by the longest
// known model name that prefixes it at a word boundary, so that a dated
// snapshot ("gpt-4o-mini-2024-07-18", "claude-sonnet-4-5-20250929") gets its
// family's price and "gpt-4o-mini" is never priced as "gpt-4o".
func Lookup(providerName, model string) (Price, bool) {
	models, ok := builtin[providerName]
	if !ok {
		return Price{}, false
	}
	model = strings.TrimPrefix(model, "models/")
	best := ""
	for name := range models {
		if len(name) > len(best) && strings.HasPrefix(model, name) &&
			(len(model) == len(name) || strings.ContainsRune("-:@", rune(model[len(name)]))) {
			best = name
		}
	}
	if best == "" {
		return Price{}, false
	}
	p := models[best]
	p.Source = "built-in " + TableDate
	return p, true
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
