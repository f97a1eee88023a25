package workflow

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Keeps of an overflow: block: which part of the field a cut keeps.
const (
	KeepHead    = "head"   // the beginning; the end is cut
	KeepTail    = "tail"   // the end; the beginning is cut
	KeepMiddle  = "middle" // the middle; as much is cut from each end
	KeepDefault = KeepHead
)

// Bounds of an overflow: block's max_rounds.
const (
	OverflowRoundsDefault = 2
	OverflowRoundsMin     = 1
	OverflowRoundsMax     = 5
)

// Overflow is an action's answer to a context overflow (overflow:, off
// when nil): a prompt longer than the model's context window is shortened
// (a field the prompt reads is cut, at the size the provider's error
// implies) or moved to a larger-context model, and called again. Each
// round is a call, counted against max_calls and in validate's worst case.
type Overflow struct {
	// Truncate is the field to shorten (a field the prompt reads: of the
	// record, or an earlier action's text output); "" when only a fallback.
	Truncate string
	// Keep is the part of the field a cut keeps: KeepHead, KeepTail or
	// KeepMiddle (KeepDefault).
	Keep string
	// FallbackModel is a larger-context model to move to on the first
	// overflow, before any cut; "" when none. FallbackProvider is its
	// provider (a key of Workflow.Providers): the action's unless set.
	FallbackModel    string
	FallbackProvider string
	// FallbackPrice bills the fallback's calls (nil: unknown), and
	// FallbackContextWindow is the fallback model's window (0: unknown), as
	// Action.Price and Action.ContextWindow are the action's.
	FallbackPrice         *pricing.Price
	FallbackContextWindow int
	// MaxRounds bounds the rounds of one delivery (OverflowRoundsDefault).
	MaxRounds int
}

// Rounds is how many rounds the block can spend in one delivery: a
// fallback alone has one move to make.
func (o *Overflow) Rounds() int {
	if o == nil {
		return 0
	}
	if o.Truncate == "" {
		return min(o.MaxRounds, 1)
	}
	return o.MaxRounds
}

// describe says what the block does, for `jetpool validate`.
func (o *Overflow) describe() string {
	var steps []string
	if o.FallbackModel != "" {
		steps = append(steps, fmt.Sprintf("move to %s/%s", o.FallbackProvider, o.FallbackModel))
	}
	if o.Truncate != "" {
		steps = append(steps, fmt.Sprintf("shorten .%s (keep its %s) by what the provider says is over, plus a margin", o.Truncate, o.Keep))
	}
	s := "on a context overflow: " + strings.Join(steps, ", then ")
	return s + fmt.Sprintf("; up to %s a delivery, each a call", count(o.Rounds(), "round", "rounds"))
}

// worstCase is the worst case of a with its overflow rounds
// (retry.Action.Bound), for `jetpool validate`: "27 calls: 3 attempts × 3
// rounds (the first, 2 overflow rounds) × 3 deliveries".
func (o *Overflow) worstCase(a *Action) string {
	repairs := 0
	if a.Expect != nil {
		repairs = a.Expect.RepairAttempts
	}
	b := retry.Action{Policy: a.Retry, Repairs: repairs, OverflowRounds: o.Rounds(), Fallbacks: len(a.Fallbacks), MaxCalls: a.MaxCalls}.Bound()
	parts := []string{"the first"}
	if repairs > 0 {
		parts = append(parts, count(repairs, "repair", "repairs"))
	}
	parts = append(parts, count(o.Rounds(), "overflow round", "overflow rounds"))
	s := fmt.Sprintf("%s: %s × %s (%s) × %s", count(b.Uncapped, "call", "calls"), count(a.Retry.Attempts(), "attempt", "attempts"),
		count(1+repairs+o.Rounds(), "round", "rounds"), strings.Join(parts, ", "), count(a.Retry.Deliveries(), "delivery", "deliveries"))
	if b.Calls < b.Uncapped {
		s += fmt.Sprintf(", capped at %d by max_calls", b.Calls)
	}
	return s
}

// overflowSpec is an overflow: block as written; resolve checks it
// against the action.
type overflowSpec struct {
	o                                          Overflow
	line, truncateLine, providerLine, keepLine int
	price                                      *pricing.Price // the encoded form's resolved price
	contextWindow                              int            // the encoded form's resolved window
}

// overflow reads an action's overflow: block.
func (p *parser) overflow(f field) (*overflowSpec, bool) {
	before := len(p.errs)
	known := []string{"truncate", "keep", "fallback_model", "provider", "max_rounds"}
	if p.encoded {
		known = append(known, "price", "context_window")
	}
	of, ok := p.fields(f.val, f.path, known...)
	if !ok {
		return nil, false
	}
	s := &overflowSpec{o: Overflow{MaxRounds: OverflowRoundsDefault}, line: f.val.Line}
	if v, ok := of["truncate"]; ok {
		if x, ok := p.str(v); ok && x != "" {
			s.o.Truncate, s.truncateLine = x, v.val.Line
		} else if ok {
			p.errorf(v.val.Line, v.path, "empty; name the field the prompt reads to shorten")
		}
	}
	if v, ok := of["keep"]; ok {
		s.o.Keep, _ = p.oneOf(v, KeepHead, KeepTail, KeepMiddle)
		s.keepLine = v.val.Line
	}
	if v, ok := of["fallback_model"]; ok {
		if x, ok := p.str(v); ok && strings.TrimSpace(x) != "" {
			s.o.FallbackModel = x
		} else if ok {
			p.errorf(v.val.Line, v.path, "empty")
		}
	}
	if v, ok := of["provider"]; ok {
		if x, ok := p.str(v); ok {
			if _, preset := provider.Presets[x]; preset || p.entries[x] != nil {
				s.o.FallbackProvider, s.providerLine = x, v.val.Line
			} else {
				p.errorf(v.val.Line, v.path, "unknown provider %q (not under providers: and not a preset: %s)",
					x, strings.Join(provider.PresetNames(), ", "))
			}
		}
	}
	if v, ok := of["max_rounds"]; ok {
		s.o.MaxRounds, _ = p.intIn(v, OverflowRoundsMin, OverflowRoundsMax)
	}
	if v, ok := of["price"]; ok {
		s.price, _ = p.price(v)
	}
	if v, ok := of["context_window"]; ok {
		s.contextWindow, _ = p.intIn(v, 1, math.MaxInt)
	}
	if _, ok := of["truncate"]; !ok {
		if _, ok := of["fallback_model"]; !ok {
			p.errorf(f.val.Line, f.path, "needs truncate (a field the prompt reads, to shorten), fallback_model (a larger-context model), or both")
		}
	}
	return s, len(p.errs) == before
}

// resolveOverflow checks an action's overflow: block against the action
// (the field is one its prompt reads; the fallback is another model) and
// adds the fallback's provider to the workflow's.
func (p *parser) resolveOverflow(s *overflowSpec, a *Action, path string, w *Workflow) *Overflow {
	o := s.o
	if o.Truncate != "" {
		o.Keep = cmp.Or(o.Keep, KeepDefault)
		if fields := a.Fields(); a.prompt != nil && !slices.Contains(fields, o.Truncate) {
			p.errorf(s.truncateLine, child(path, "truncate"), "the prompt reads no field %q%s", o.Truncate, readsList(fields))
		}
	} else if o.Keep != "" {
		p.errorf(s.keepLine, child(path, "keep"), "only used with truncate")
	}
	if o.FallbackModel == "" {
		if o.FallbackProvider != "" {
			p.errorf(s.providerLine, child(path, "provider"), "only used with fallback_model (the model to move to on that provider)")
		}
		o.FallbackProvider = ""
		return &o
	}
	o.FallbackProvider = cmp.Or(o.FallbackProvider, a.Provider)
	if o.FallbackProvider == a.Provider && o.FallbackModel == a.Model {
		p.errorf(s.line, child(path, "fallback_model"), "%s is the action's own model: a fallback must be a model with a larger context window", o.FallbackModel)
	}
	var entryPrice *pricing.Price
	if cfg, ok := p.usable(o.FallbackProvider); ok {
		w.Providers[o.FallbackProvider] = cfg
	}
	if e, ok := p.entries[o.FallbackProvider]; ok {
		entryPrice = e.price
	}
	var m pricing.Model
	o.FallbackPrice, m = p.resolvePrice(s.price, entryPrice, o.FallbackProvider, o.FallbackModel, s.line, child(path, "fallback_model"))
	o.FallbackContextWindow = cmp.Or(s.contextWindow, m.ContextWindow)
	return &o
}

func readsList(fields []string) string {
	if len(fields) == 0 {
		return " (it reads none)"
	}
	return " (it reads " + strings.Join(fields, ", ") + ")"
}

// wireOverflow is an overflow: block in the encoded form.
type wireOverflow struct {
	Truncate      string         `json:"truncate,omitempty"`
	Keep          string         `json:"keep,omitempty"`
	FallbackModel string         `json:"fallback_model,omitempty"`
	Provider      string         `json:"provider,omitempty"`
	MaxRounds     int            `json:"max_rounds"`
	Price         *pricing.Price `json:"price,omitempty"`
	ContextWindow int            `json:"context_window,omitempty"`
}

func encodeOverflow(o *Overflow) *wireOverflow {
	if o == nil {
		return nil
	}
	return &wireOverflow{Truncate: o.Truncate, Keep: o.Keep, FallbackModel: o.FallbackModel, Provider: o.FallbackProvider,
		MaxRounds: o.MaxRounds, Price: o.FallbackPrice, ContextWindow: o.FallbackContextWindow}
}
