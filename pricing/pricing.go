// Package pricing turns token usage into money: a price per million tokens
// of each kind a provider bills (input, cached input, cache writes, output;
// online and batch; a long-context tier), where prices come from (the
// built-in table of the presets' models, a price file in LiteLLM's format),
// and the cost of one call's usage.
//
// Only a model's exact id, or a dated snapshot of it, takes a price from a
// table (Lookup, File.Lookup): a model the table does not know is unpriced,
// never priced as a neighbour whose name it starts with.
//
// A workflow's price: block (on a provider entry, or on an action or
// defaults:) overrides a price file, which overrides the table;
// workflow.Parse resolves each action's price once, on the dispatching
// machine, and the resolved price travels with the job, so every worker of
// a fleet bills a job alike whatever its version's table says.
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
	// Anthropic's cache_creation_input_tokens at its 5-minute rate
	// (InputPerMTok when 0).
	CacheWritePerMTok float64 `json:"cache_write_per_mtok,omitempty"`
	// BatchInputPerMTok and BatchOutputPerMTok are the rates of mode: batch
	// (half the online rates when 0: OpenAI Batch, Anthropic Message
	// Batches and Gemini's batch mode all bill half).
	BatchInputPerMTok  float64 `json:"batch_input_per_mtok,omitempty"`
	BatchOutputPerMTok float64 `json:"batch_output_per_mtok,omitempty"`
	// LongContext is the tier of calls with long prompts (nil: none).
	LongContext *Tier `json:"long_context,omitempty"`
	// Source says where the price came from: "workflow", "built-in DATE:
	// ENTRY" or "price file FILE: ENTRY".
	Source string `json:"source,omitempty"`
}

// Tier is a long-context tier: a call whose prompt holds more than
// AboveTokens input tokens pays these rates for all its tokens, input and
// output, as Anthropic (Claude Sonnet 4 / 4.5 above 200k), Google (Gemini
// 2.5 Pro above 200k) and OpenAI (GPT-5.4 and later above 272k) bill them.
// The prompt is every input token of the call, cached and cache writes
// included (Usage.InputTokens).
type Tier struct {
	AboveTokens   int     `json:"above_tokens"`
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
	// CachedInputPerMTok and CacheWritePerMTok, when 0, are the online
	// price's, scaled as InputPerMTok is.
	CachedInputPerMTok float64 `json:"cached_input_per_mtok,omitempty"`
	CacheWritePerMTok  float64 `json:"cache_write_per_mtok,omitempty"`
}

// BatchFactorDefault is the batch rate as a share of the online rate when
// a price sets no batch rate.
const BatchFactorDefault = 0.5

// Rates returns p with its optional rates filled in, its tier's too.
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
	if t := p.LongContext; t != nil {
		r := *t
		scale := 1.0
		if p.InputPerMTok > 0 {
			scale = r.InputPerMTok / p.InputPerMTok
		}
		if r.CachedInputPerMTok == 0 {
			r.CachedInputPerMTok = p.CachedInputPerMTok * scale
		}
		if r.CacheWritePerMTok == 0 {
			r.CacheWritePerMTok = p.CacheWritePerMTok * scale
		}
		p.LongContext = &r
	}
	return p
}

// Cost is what one call's usage costs at p, in dollars. Cached and
// cache-write tokens are the parts of InputTokens billed at their own
// rates; reasoning tokens are output tokens (billed as such by every
// provider). A call whose prompt passes the long-context tier's threshold
// pays the tier's rates for all its tokens. Batch calls pay the batch
// rates: every input rate (tier, cached and cache writes included) scaled
// as the input rate is, every output rate as the output rate is.
//
// u must be one call's: the tier is chosen by the call's prompt, so the
// sum of several calls' usage would be priced wrongly.
func (p Price) Cost(u provider.Usage, batch bool) float64 {
	r := p.Rates()
	in, out := r.InputPerMTok, r.OutputPerMTok
	cached, write := r.CachedInputPerMTok, r.CacheWritePerMTok
	if t := r.LongContext; t != nil && t.AboveTokens > 0 && u.InputTokens > t.AboveTokens {
		in, out, cached, write = t.InputPerMTok, t.OutputPerMTok, t.CachedInputPerMTok, t.CacheWritePerMTok
	}
	if batch {
		fin, fout := BatchFactorDefault, BatchFactorDefault
		if r.InputPerMTok > 0 {
			fin = r.BatchInputPerMTok / r.InputPerMTok
		}
		if r.OutputPerMTok > 0 {
			fout = r.BatchOutputPerMTok / r.OutputPerMTok
		}
		in, out, cached, write = in*fin, out*fout, cached*fin, write*fin
	}
	plain := max(u.InputTokens-u.CachedInputTokens-u.CacheWriteTokens, 0)
	micro := float64(plain)*in + float64(u.CachedInputTokens)*cached + float64(u.CacheWriteTokens)*write +
		float64(u.OutputTokens)*out
	return micro / 1e6
}

// Validate reports a negative rate, or a tier without a threshold, naming
// its field.
func (p Price) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{{"input_per_mtok", p.InputPerMTok}, {"output_per_mtok", p.OutputPerMTok},
		{"cached_input_per_mtok", p.CachedInputPerMTok}, {"cache_write_per_mtok", p.CacheWritePerMTok},
		{"batch_input_per_mtok", p.BatchInputPerMTok}, {"batch_output_per_mtok", p.BatchOutputPerMTok}}
	if t := p.LongContext; t != nil {
		if t.AboveTokens <= 0 {
			return fmt.Errorf("long_context.above_tokens: %d must be positive", t.AboveTokens)
		}
		rates = append(rates, []struct {
			name string
			v    float64
		}{{"long_context.input_per_mtok", t.InputPerMTok}, {"long_context.output_per_mtok", t.OutputPerMTok},
			{"long_context.cached_input_per_mtok", t.CachedInputPerMTok},
			{"long_context.cache_write_per_mtok", t.CacheWritePerMTok}}...)
	}
	for _, f := range rates {
		if f.v < 0 {
			return fmt.Errorf("%s: %v must not be negative", f.name, f.v)
		}
	}
	return nil
}

// String is "$0.15 in, $0.6 out per Mtok, cached $0.075 (built-in
// 2026-07-24: gpt-4o-mini)", with the cache-write rate, batch rates that
// are not half, and the long-context tier when there are such.
func (p Price) String() string {
	s := "$" + num(p.InputPerMTok) + " in, $" + num(p.OutputPerMTok) + " out per Mtok"
	if p.CachedInputPerMTok > 0 && p.CachedInputPerMTok != p.InputPerMTok {
		s += ", cached $" + num(p.CachedInputPerMTok)
	}
	if p.CacheWritePerMTok > 0 && p.CacheWritePerMTok != p.InputPerMTok {
		s += ", cache write $" + num(p.CacheWritePerMTok)
	}
	if r := p.Rates(); r.BatchInputPerMTok != p.InputPerMTok*BatchFactorDefault || r.BatchOutputPerMTok != p.OutputPerMTok*BatchFactorDefault {
		s += ", batch $" + num(r.BatchInputPerMTok) + " in, $" + num(r.BatchOutputPerMTok) + " out"
	}
	if t := p.LongContext; t != nil {
		s += "; above " + thousands(t.AboveTokens) + " input tokens $" + num(t.InputPerMTok) + " in, $" + num(t.OutputPerMTok) + " out"
		if t.CachedInputPerMTok > 0 {
			s += ", cached $" + num(t.CachedInputPerMTok)
		}
		if t.CacheWritePerMTok > 0 {
			s += ", cache write $" + num(t.CacheWritePerMTok)
		}
	}
	if p.Source != "" {
		s += " (" + p.Source + ")"
	}
	return s
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// thousands renders 200000 as "200,000".
func thousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
