package workflow

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// An action's fallbacks: other provider/model pairs a record moves to, in
// order, when its action's own cannot answer it.

// FallbackOutage is the trigger of a provider that takes no calls: its
// circuit is open, its shared cooldown or schedule lasts longer than a
// worker holds a slot, or the session's attempts ended on a server or
// network error (an overload, a 503, a dropped connection).
const FallbackOutage = "outage"

// FallbackOn are the triggers a fallback's on: may list: FallbackOutage
// and the classes of a record's failure it takes over.
var FallbackOn = []string{FallbackOutage, string(retry.ClassRateLimit), string(retry.ClassServer), string(retry.ClassNetwork),
	string(retry.ClassContentFilter), string(retry.ClassContextOverflow), string(retry.ClassTruncated),
	string(retry.ClassInvalidRequest), string(retry.ClassAuth)}

// FallbackOnDefault is a fallback's on: when it lists none.
var FallbackOnDefault = []string{FallbackOutage}

// FallbacksMax bounds an action's fallbacks: each adds a round of attempts
// to the record's worst case.
const FallbacksMax = 5

// Fallback is one entry of an action's fallbacks:.
type Fallback struct {
	Provider string // a key of Workflow.Providers
	Model    string
	// On are the triggers it is taken on (FallbackOn; FallbackOnDefault
	// when the workflow lists none).
	On []string
	// Price bills its calls (its own price:, its provider's, the price
	// file's or the built-in table's); nil when unknown.
	Price         *pricing.Price
	ContextWindow int
}

// Takes reports whether f is taken on trigger.
func (f Fallback) Takes(trigger string) bool { return slices.Contains(f.On, trigger) }

// String is "provider/model".
func (f Fallback) String() string { return f.Provider + "/" + f.Model }

// FallbackTrigger is the trigger of a round's failure of class c: outage
// for a server or network error, c itself otherwise.
func FallbackTrigger(c retry.Class) []string {
	if c == retry.ClassServer || c == retry.ClassNetwork {
		return []string{FallbackOutage, string(c)}
	}
	return []string{string(c)}
}

// fallbackSpec is a fallbacks: entry as written.
type fallbackSpec struct {
	f                              Fallback
	index, line, modelLine, onLine int
	price                          *pricing.Price
}

// fallbacks reads an action's fallbacks: list.
func (p *parser) fallbacks(f field) ([]fallbackSpec, bool) {
	if f.val.Kind != yaml.SequenceNode || len(f.val.Content) == 0 {
		p.errorf(f.val.Line, f.path, "want a list of {provider, model, on}, got %s", describe(f.val))
		return nil, false
	}
	if len(f.val.Content) > FallbacksMax {
		p.errorf(f.val.Line, f.path, "%d fallbacks: at most %d", len(f.val.Content), FallbacksMax)
		return nil, false
	}
	before := len(p.errs)
	known := []string{"provider", "model", "on", "price"}
	if p.encoded {
		known = append(known, "context_window")
	}
	var out []fallbackSpec
	for i, n := range f.val.Content {
		path := fmt.Sprintf("%s[%d]", f.path, i)
		entryErrs := len(p.errs)
		ff, ok := p.fields(n, path, known...)
		if !ok {
			continue
		}
		s := fallbackSpec{index: i, line: deref(n).Line}
		if v, ok := ff["provider"]; ok {
			if x, ok := p.str(v); ok {
				if _, preset := provider.Presets[x]; preset || p.entries[x] != nil {
					s.f.Provider = x
				} else {
					p.errorf(v.val.Line, v.path, "unknown provider %q (not under providers: and not a preset: %s)",
						x, strings.Join(provider.PresetNames(), ", "))
				}
			}
		}
		if v, ok := ff["model"]; ok {
			if x, ok := p.str(v); ok && strings.TrimSpace(x) != "" {
				s.f.Model, s.modelLine = x, v.val.Line
			} else if ok {
				p.errorf(v.val.Line, v.path, "empty")
			}
		}
		if v, ok := ff["on"]; ok {
			s.onLine = v.val.Line
			s.f.On = p.fallbackOn(v)
		}
		if v, ok := ff["price"]; ok {
			s.price, _ = p.price(v)
		}
		if v, ok := ff["context_window"]; ok {
			s.f.ContextWindow, _ = p.intIn(v, 1, math.MaxInt)
		}
		if len(p.errs) == entryErrs {
			out = append(out, s) // one with a problem is not resolved, nor reported again
		}
	}
	return out, len(p.errs) == before
}

// fallbackOn reads on: a trigger or a list of them.
func (p *parser) fallbackOn(v field) []string {
	items := []*yaml.Node{v.val}
	if v.val.Kind == yaml.SequenceNode {
		items = v.val.Content
	}
	var out []string
	for i, n := range items {
		path := v.path
		if v.val.Kind == yaml.SequenceNode {
			path = fmt.Sprintf("%s[%d]", v.path, i)
		}
		x, ok := p.str(field{key: v.key, val: deref(n), path: path})
		switch {
		case !ok:
		case !slices.Contains(FallbackOn, x):
			p.errorf(deref(n).Line, path, "unknown trigger %q (want one of %s)", x, strings.Join(FallbackOn, ", "))
		case slices.Contains(out, x):
			p.errorf(deref(n).Line, path, "%s listed twice", x)
		default:
			out = append(out, x)
		}
	}
	if len(out) == 0 && len(items) == 0 {
		p.errorf(v.val.Line, v.path, "empty; leave on: out for [%s]", strings.Join(FallbackOnDefault, ", "))
	}
	return out
}

// resolveFallbacks checks an action's fallbacks against it (online chat
// actions only; none is the action's own model or another's twin), resolves
// each one's provider, model and price, and adds their providers to the
// workflow's: a worker that does not hold a fallback's key refuses the job
// as it does for the action's own.
func (p *parser) resolveFallbacks(specs []fallbackSpec, a *Action, path string, w *Workflow) []Fallback {
	if a.Mode == ModeBatch || a.IsEmbed() {
		what := "mode: batch (its stragglers have fallback: online)"
		if a.IsEmbed() {
			what = "kind: embed"
		}
		p.errorf(specs[0].line, path, "not with %s", what)
		return nil
	}
	out := make([]Fallback, 0, len(specs))
	seen := map[string]int{a.Provider + "/" + a.Model: a.Line}
	for _, s := range specs {
		f, fp := s.f, fmt.Sprintf("%s[%d]", path, s.index)
		f.Provider = cmp.Or(f.Provider, a.Provider)
		cfg, known := p.usable(f.Provider)
		if known {
			w.Providers[f.Provider] = cfg
		}
		if f.Model == "" && (!known || cfg.Kind != provider.KindSim) {
			p.errorf(s.line, child(fp, "model"), "missing; a fallback names the model to move to")
			continue
		}
		if first, dup := seen[f.String()]; dup {
			p.errorf(cmp.Or(s.modelLine, s.line), fp, "%s is already tried (line %d)", f, first)
			continue
		}
		seen[f.String()] = s.line
		if len(f.On) == 0 {
			f.On = slices.Clone(FallbackOnDefault)
		}
		var entryPrice *pricing.Price
		if e, ok := p.entries[f.Provider]; ok {
			entryPrice = e.price
		}
		var m pricing.Model
		f.Price, m = p.resolvePrice(s.price, entryPrice, f.Provider, f.Model, cmp.Or(s.modelLine, s.line), child(fp, "model"))
		f.ContextWindow = cmp.Or(f.ContextWindow, m.ContextWindow)
		out = append(out, f)
	}
	return out
}

// wireFallback is a fallbacks: entry in the encoded form, its price and
// window resolved where the job was dispatched.
type wireFallback struct {
	Provider      string         `json:"provider"`
	Model         string         `json:"model,omitempty"`
	On            []string       `json:"on"`
	Price         *pricing.Price `json:"price,omitempty"`
	ContextWindow int            `json:"context_window,omitempty"`
}

func encodeFallbacks(fs []Fallback) []wireFallback {
	if len(fs) == 0 {
		return nil
	}
	out := make([]wireFallback, len(fs))
	for i, f := range fs {
		out[i] = wireFallback(f)
	}
	return out
}

// describeFallbacks writes an action's routing for `jetpool validate`.
func (w *Workflow) describeFallbacks(a *Action, row func(label, format string, args ...any)) {
	if len(a.Fallbacks) == 0 {
		return
	}
	for i, f := range a.Fallbacks {
		label := ""
		if i == 0 {
			label = "fallbacks"
		}
		kind := w.Providers[f.Provider].Kind
		price := "unpriced: its calls' cost is not counted"
		if f.Price != nil {
			price = "billed at " + f.Price.String()
		}
		row(label, "%d. %s (%s) on %s; %s", i+1, f, kind, strings.Join(f.On, ", "), price)
		for _, c := range ParamChanges(kind, f.Model, a.Params) {
			row("", "   params: %s", c)
		}
	}
	row("", "each fallback taken is a round of its own: the worst case below counts %s more", count(len(a.Fallbacks), "round", "rounds"))
}
