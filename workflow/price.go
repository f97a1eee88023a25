package workflow

import (
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/pricing"
)

// What an action does with an answer that is not a plain stop.
const (
	// OnTruncatedFail (the default): an answer cut at max_tokens fails the
	// record with class truncated, dead-lettered with the partial output —
	// unless the action's expect: block repairs it (OnTruncatedDefault).
	OnTruncatedFail = "fail"
	// OnTruncatedOK accepts the partial answer: status ok, finish_reason length.
	OnTruncatedOK = "ok"
	// OnTruncatedGrow asks again at once with max_tokens doubled, up to
	// GrowMax times; still cut, the record fails as with fail.
	OnTruncatedGrow = "grow"
	// OnTruncatedDefault is "" in Action.OnTruncated: fail, but an action
	// whose expect: block has repairs hands the cut answer to its checker,
	// which names the truncation in its correction.
	OnTruncatedDefault = ""

	OnFilteredFail = "fail" // the default: class content_filter, dead-lettered
	OnFilteredOK   = "ok"   // accept what the filter left (often nothing)
)

// GrowMax is how many times on_truncated: grow doubles max_tokens for one
// answer; GrowFrom is the max_tokens it doubles when the action sets none
// (the Anthropic adapter's default).
const (
	GrowMax  = 2
	GrowFrom = 1024
)

// MaxCostMin is the smallest positive max_cost (a thousandth of a cent).
const MaxCostMin = 0.00001

// money reads a non-negative amount of dollars.
func (p *parser) money(f field) (float64, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!int" || n.ShortTag() == "!!float") {
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsInf(v, 0) && !math.IsNaN(v) {
			if v < 0 {
				p.errorf(n.Line, f.path, "%s must not be negative", n.Value)
				return 0, false
			}
			return v, true
		}
	}
	p.errorf(n.Line, f.path, "want an amount in dollars such as 0.15, got %s", describe(n))
	return 0, false
}

// priceFields are the rates of a price: block, in US dollars per million tokens.
var priceFields = []string{"input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok",
	"batch_input_per_mtok", "batch_output_per_mtok"}

// tierFields are the fields of a price's long_context: block.
var tierFields = []string{"above_tokens", "input_per_mtok", "output_per_mtok", "cached_input_per_mtok", "cache_write_per_mtok"}

// price reads a price: block. input_per_mtok and output_per_mtok are
// required: a price that bills nothing for output is almost always a typo.
func (p *parser) price(f field) (*pricing.Price, bool) {
	before := len(p.errs)
	pf, ok := p.fields(f.val, f.path, append(priceFields, "long_context", "source")...)
	if !ok {
		return nil, false
	}
	pr := &pricing.Price{Source: "workflow"}
	p.rates(f, pf, map[string]*float64{"input_per_mtok": &pr.InputPerMTok, "output_per_mtok": &pr.OutputPerMTok,
		"cached_input_per_mtok": &pr.CachedInputPerMTok, "cache_write_per_mtok": &pr.CacheWritePerMTok,
		"batch_input_per_mtok": &pr.BatchInputPerMTok, "batch_output_per_mtok": &pr.BatchOutputPerMTok})
	if v, ok := pf["long_context"]; ok {
		pr.LongContext = p.tier(v)
	}
	if v, ok := pf["source"]; ok && p.encoded {
		pr.Source, _ = p.str(v)
	} else if ok {
		p.errorf(v.key.Line, v.path, "unknown field")
	}
	return pr, len(p.errs) == before
}

// rates reads the rates of a price: or long_context: block into dst;
// input_per_mtok and output_per_mtok are required.
func (p *parser) rates(f field, pf map[string]field, dst map[string]*float64) {
	for _, name := range priceFields {
		if v, ok := pf[name]; ok && dst[name] != nil {
			*dst[name], _ = p.money(v)
		}
	}
	for _, name := range []string{"input_per_mtok", "output_per_mtok"} {
		if _, ok := pf[name]; !ok {
			p.errorf(f.val.Line, child(f.path, name), "missing; a price needs input_per_mtok and output_per_mtok (dollars per million tokens)")
		}
	}
}

// tier reads a price's long_context: block: the rates of calls whose
// prompt has more than above_tokens input tokens.
func (p *parser) tier(f field) *pricing.Tier {
	tf, ok := p.fields(f.val, f.path, tierFields...)
	if !ok {
		return nil
	}
	t := &pricing.Tier{}
	if v, ok := tf["above_tokens"]; ok {
		t.AboveTokens, _ = p.intIn(v, 1, math.MaxInt)
	} else {
		p.errorf(f.val.Line, child(f.path, "above_tokens"), "missing; the tier's rates apply to calls whose prompt has more input tokens than this (200000 for Claude Sonnet 4 / 4.5 and Gemini 2.5 Pro)")
	}
	p.rates(f, tf, map[string]*float64{"input_per_mtok": &t.InputPerMTok, "output_per_mtok": &t.OutputPerMTok,
		"cached_input_per_mtok": &t.CachedInputPerMTok, "cache_write_per_mtok": &t.CacheWritePerMTok})
	return t
}

// carry reads carry: a list of record fields copied into each result line.
func (p *parser) carry(f field) ([]string, bool) {
	n := f.val
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, f.path, "want a list of record field names, got %s", describe(n))
		return nil, false
	}
	var out []string
	for i, c := range n.Content {
		c = deref(c)
		if c.Kind != yaml.ScalarNode || isNull(c) || c.Value == "" {
			p.errorf(c.Line, f.path+"["+strconv.Itoa(i)+"]", "want a field name, got %s", describe(c))
			return nil, false
		}
		out = append(out, c.Value)
	}
	return out, true
}
