package providertest

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// Rates is a model's price on the bill, in US dollars per million tokens.
type Rates struct {
	Input, Output float64
	// CachedInput is the rate of input read from the prompt cache, and
	// CacheWrite of input written to it (Anthropic bills 1.25× input).
	CachedInput, CacheWrite float64
	// Batch is the share of every rate a batch answer pays (0.5 when 0).
	Batch float64
	// LongAbove, when above 0, is the prompt size past which the whole
	// call pays the Long rates (Gemini 2.5 Pro and Claude Sonnet above
	// 200,000 input tokens).
	LongAbove                                              int
	LongInput, LongOutput, LongCachedInput, LongCacheWrite float64
}

// BillUsage is what one answer is billed for: Input counts every prompt
// token, CachedInput and CacheWrite the parts of it read from and written
// to the cache; Output every generated one, reasoning included.
type BillUsage struct {
	Input, CachedInput, CacheWrite, Output int
}

// BillLine is one answer on the bill.
type BillLine struct {
	Key     string // the call's marker ([[record:action]]), "" when it had none
	Model   string
	Batch   bool
	Usage   BillUsage
	Dollars float64
}

// Record is the record part of the line's key (before its ':').
func (l BillLine) Record() string {
	r, _, _ := strings.Cut(l.Key, ":")
	return r
}

// Biller is a provider's bill: every answer priced as it is given.
type Biller struct {
	rates map[string]Rates

	mu      sync.Mutex
	lines   []BillLine
	unknown map[string]bool
}

// NewBiller bills by rates, by model name.
func NewBiller(rates map[string]Rates) *Biller {
	return &Biller{rates: rates, unknown: map[string]bool{}}
}

// Charge bills one answer and returns what it cost. A model not in the
// table costs nothing and is listed by Unknown.
func (b *Biller) Charge(key, model string, u BillUsage, batch bool) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.rates[model]
	if !ok {
		b.unknown[model] = true
	}
	in, out, cached, write := r.Input, r.Output, r.CachedInput, r.CacheWrite
	if r.LongAbove > 0 && u.Input > r.LongAbove {
		in, out, cached, write = r.LongInput, r.LongOutput, r.LongCachedInput, r.LongCacheWrite
	}
	if cached == 0 {
		cached = in
	}
	if write == 0 {
		write = in
	}
	if batch {
		f := r.Batch
		if f == 0 {
			f = 0.5
		}
		in, out, cached, write = in*f, out*f, cached*f, write*f
	}
	fresh := u.Input - u.CachedInput - u.CacheWrite
	d := (float64(fresh)*in + float64(u.CachedInput)*cached + float64(u.CacheWrite)*write + float64(u.Output)*out) / 1e6
	b.lines = append(b.lines, BillLine{Key: key, Model: model, Batch: batch, Usage: u, Dollars: d})
	return d
}

// Total is the bill's sum.
func (b *Biller) Total() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s float64
	for _, l := range b.lines {
		s += l.Dollars
	}
	return s
}

// ByRecord is the bill by record (BillLine.Record).
func (b *Biller) ByRecord() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]float64{}
	for _, l := range b.lines {
		out[l.Record()] += l.Dollars
	}
	return out
}

// Lines returns the bill's lines so far.
func (b *Biller) Lines() []BillLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines)
}

// Unknown lists the models billed that the table did not have.
func (b *Biller) Unknown() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.unknown))
}

// Tokens is what the fake providers count a text as: a token for every
// four bytes, or part of four (a real tokenizer's count is between this
// and the text's bytes).
func Tokens(s string) int { return (len(s) + 3) / 4 }

// messageTokens is what a message's framing counts, beside its text.
const messageTokens = 4
