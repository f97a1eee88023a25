package workflow

import (
	"cmp"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// An action, or the defaults: block: its fields as written (spec), and the
// action resolved from them and the defaults.

// opt is a value that a workflow may or may not set, with its line.
type opt[T any] struct {
	v    T
	line int
	set  bool
}

func some[T any](v T, line int) opt[T] { return opt[T]{v: v, line: line, set: true} }

// pick returns own when set, else inherited.
func pick[T any](own, inherited opt[T]) opt[T] {
	if own.set {
		return own
	}
	return inherited
}

// spec is an action, or the defaults: block, as written.
type spec struct {
	path string
	line int
	node *yaml.Node

	name, provider, model, system, prompt, mode, fallback opt[string]

	params       opt[map[string]any]
	stream, json opt[bool]
	retry        opt[retry.Policy]
	expect       opt[*Expect]
	maxCalls     opt[int]
	batch        opt[BatchConfig]
	onTruncated  opt[string]
	onFiltered   opt[string]
	price        opt[*pricing.Price]
	maxCost      opt[float64] // defaults: only
	// contextWindow is the encoded form's: the window resolved at dispatch.
	contextWindow int
	overflow      *overflowSpec  // actions only
	fallbacks     []fallbackSpec // actions only (fallbacks.go)
	more          moreSpec       // multimodal.go: kind, input, images, documents, tools, tool_choice, cache, embed

	encodedLine int
	compiled    *compiledPrompt
	// written holds the fields present, valid or not, so that a field with a
	// reported problem is not reported again as missing.
	written map[string]bool
}

// specFields are the fields an action shares with defaults:.
var specFields = []string{"provider", "model", "system", "params", "stream", "json", "retry", "expect", "max_calls", "mode", "batch", "fallback",
	"on_truncated", "on_filtered", "price", "cache"}

func (p *parser) spec(n *yaml.Node, path string, action bool) *spec {
	n = deref(n)
	known := slices.Concat(specFields, []string{"max_cost", "overflow"}) // a job's budget: defaults: only
	if action {
		known = append([]string{"name", "prompt", "overflow", "fallbacks", "kind", "input", "images", "documents", "tools", "tool_choice", "embed"}, specFields...)
		if p.encoded {
			known = append(known, "line", "context_window")
		}
	}
	f, ok := p.fields(n, path, known...)
	if !ok {
		return nil
	}
	s := &spec{path: path, line: n.Line, node: n, written: map[string]bool{}}
	for name := range f {
		s.written[name] = true
	}
	for _, name := range known { // in a fixed order, so errors on one line keep it
		if v, ok := f[name]; ok {
			p.specField(s, name, v, action)
		}
	}
	if action {
		if _, ok := f["name"]; !ok {
			p.errorf(n.Line, child(path, "name"), "missing; every action needs a name")
		}
		if _, ok := f["prompt"]; !ok && s.more.kind.v != KindEmbed {
			p.errorf(n.Line, child(path, "prompt"), "missing; every action needs a prompt")
		}
	}
	return s
}

// specField reads one field of an action or the defaults: block into s:
// the request's parts here, how it runs in policyField.
func (p *parser) specField(s *spec, name string, v field, action bool) {
	line := v.val.Line
	switch name {
	case "name":
		if x, ok := p.str(v); ok {
			if actionNameRE().MatchString(x) {
				s.name = some(x, line)
			} else {
				p.errorf(line, v.path, "bad name %q (want lowercase letters, digits, _ and -)", x)
			}
		}
	case "prompt":
		if x, ok := p.str(v); ok {
			s.prompt = some(x, line)
			s.compiled = p.template(cmp.Or(s.name.v, "prompt"), v)
		}
	case "provider":
		if x, ok := p.str(v); ok {
			if _, preset := provider.Presets[x]; preset || p.entries[x] != nil {
				s.provider = some(x, line)
			} else {
				p.errorf(line, v.path, "unknown provider %q (not under providers: and not a preset: %s)",
					x, strings.Join(provider.PresetNames(), ", "))
			}
		}
	case "model":
		if x, ok := p.str(v); ok {
			if strings.TrimSpace(x) == "" {
				p.errorf(line, v.path, "empty")
			} else {
				s.model = some(x, line)
			}
		}
	case "system":
		if x, ok := p.str(v); ok {
			s.system = some(x, line)
		}
	case "params":
		if v.val.Kind != yaml.MappingNode {
			p.errorf(line, v.path, "want a mapping of parameter names to values, got %s", describe(v.val))
			return
		}
		x, err := toJSON(v.val)
		if err != nil {
			p.nodeError(err, v)
			return
		}
		m := x.(map[string]any)
		if len(m) == 0 {
			m = nil
		}
		s.params = some(m, line)
	default:
		p.policyField(s, name, v, action)
	}
}

// policyField reads a field that says how an action runs: streaming,
// retry, expectations, budgets, mode, overflow.
func (p *parser) policyField(s *spec, name string, v field, action bool) {
	line := v.val.Line
	switch name {
	case "stream":
		if x, ok := p.boolean(v); ok {
			s.stream = some(x, line)
		}
	case "json":
		if x, ok := p.boolean(v); ok {
			s.json = some(x, line)
		}
	case "retry":
		if x, ok := p.retry(v); ok {
			s.retry = some(x, line)
		}
	case "expect":
		if x, ok := p.expect(v); ok {
			s.expect = some(x, line)
		}
	case "max_calls":
		if x, ok := p.intIn(v, 1, math.MaxInt); ok {
			s.maxCalls = some(x, line)
		}
	case "mode":
		if x, ok := p.oneOf(v, ModeOnline, ModeBatch); ok {
			s.mode = some(x, line)
		}
	case "batch":
		if x, ok := p.batch(v); ok {
			s.batch = some(x, line)
		}
	case "fallback":
		if x, ok := p.oneOf(v, ModeOnline); ok {
			s.fallback = some(x, line)
		}
	case "line":
		s.encodedLine, _ = p.intIn(v, 1, math.MaxInt)
	case "context_window":
		s.contextWindow, _ = p.intIn(v, 1, math.MaxInt)
	case "on_truncated":
		if x, ok := p.oneOf(v, OnTruncatedFail, OnTruncatedOK, OnTruncatedGrow); ok {
			s.onTruncated = some(x, line)
		}
	case "on_filtered":
		if x, ok := p.oneOf(v, OnFilteredFail, OnFilteredOK); ok {
			s.onFiltered = some(x, line)
		}
	case "price":
		if x, ok := p.price(v); ok {
			s.price = some(x, line)
		}
	case "overflow":
		if !action {
			p.errorf(v.key.Line, v.path, "only on an action: it names a field of that action's prompt")
		} else if x, ok := p.overflow(v); ok {
			s.overflow = x
		}
	case "fallbacks":
		s.fallbacks, _ = p.fallbacks(v) // fallbacks.go: the entries without a problem
	case "max_cost":
		if x, ok := p.money(v); ok {
			if x > 0 && x < MaxCostMin {
				p.errorf(line, v.path, "%v is below %v (0 means no budget)", x, MaxCostMin)
			} else {
				s.maxCost = some(x, line)
			}
		}
	default:
		p.moreField(s, name, v) // multimodal.go
	}
}

// template compiles a prompt, reporting a parse error at its line in the file.
func (p *parser) template(name string, f field) *compiledPrompt {
	if strings.TrimSpace(f.val.Value) == "" {
		p.errorf(f.val.Line, f.path, "empty; every action needs a prompt")
		return nil
	}
	return p.compileTemplate(name, f)
}

// compileTemplate compiles the template of f, reporting a parse error at
// its line in the file.
func (p *parser) compileTemplate(name string, f field) *compiledPrompt {
	cp, err := compilePrompt(name, f.val.Value)
	if err != nil {
		line, msg := f.val.Line, err.Error()
		if m := tmplErrRE().FindStringSubmatch(msg); m != nil {
			tl, _ := strconv.Atoi(m[1])
			msg = m[2]
			if f.val.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
				line += tl // a block scalar starts on the line after its key
			} else {
				line += tl - 1
			}
		}
		p.errorf(line, f.path, "bad template: %s", msg)
		return nil
	}
	if !p.encoded {
		cp.line = f.val.Line
		if f.val.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
			cp.line++ // a block scalar starts on the line after its key
		}
	}
	return cp
}

func (p *parser) nodeError(err error, f field) {
	var ne *nodeError
	if errors.As(err, &ne) {
		p.errorf(ne.line, f.path, "%s", ne.msg)
		return
	}
	p.errorf(f.val.Line, f.path, "%v", err)
}

// resolve builds an action from its spec and the defaults.
func (p *parser) resolve(s, d *spec, index int, w *Workflow) *Action {
	a := &Action{Name: s.name.v, Index: index, Line: cmp.Or(s.encodedLine, s.line)}

	var cfg provider.Config
	known := false
	if prov := pick(s.provider, d.provider); prov.set {
		a.Provider = prov.v
		if cfg, known = p.usable(prov.v); known {
			w.Providers[prov.v] = cfg
		}
	} else if !s.written["provider"] && !d.written["provider"] {
		p.errorf(s.line, child(s.path, "provider"), "missing; set provider here or under defaults")
	}
	model := pick(s.model, d.model)
	a.Model = model.v
	if !model.set && known && cfg.Kind != provider.KindSim && !s.written["model"] && !d.written["model"] {
		p.errorf(s.line, child(s.path, "model"), "missing; provider %s (kind %s) needs a model, here or under defaults", a.Provider, cfg.Kind)
	}
	a.System = pick(s.system, d.system).v
	a.Prompt, a.prompt = s.prompt.v, s.compiled
	if d.params.v != nil || s.params.v != nil {
		a.Params = maps.Clone(d.params.v)
		if a.Params == nil {
			a.Params = map[string]any{}
		}
		maps.Copy(a.Params, s.params.v)
	}
	a.Stream = cfg.Stream
	if st := pick(s.stream, d.stream); st.set {
		a.Stream = st.v
	}
	a.JSON = pick(s.json, d.json).v
	a.Retry = pick(s.retry, d.retry).v
	if e := pick(s.expect, d.expect).v; e != nil {
		c := *e
		a.Expect = &c
	}
	a.MaxCalls = pick(s.maxCalls, d.maxCalls).v
	a.OnTruncated = pick(s.onTruncated, d.onTruncated).v
	a.OnFiltered = pick(s.onFiltered, d.onFiltered).v
	var entryPrice *pricing.Price
	if e, ok := p.entries[a.Provider]; ok {
		entryPrice = e.price
	}
	var m pricing.Model
	a.Price, m = p.resolvePrice(pick(s.price, d.price).v, entryPrice, a.Provider, a.Model, cmp.Or(model.line, s.line), child(s.path, "model"))
	a.ContextWindow, a.Retires = cmp.Or(s.contextWindow, m.ContextWindow), m.Retires
	if s.overflow != nil {
		a.Overflow = p.resolveOverflow(s.overflow, a, child(s.path, "overflow"), w) // overflow.go
	}
	a.Mode = cmp.Or(pick(s.mode, d.mode).v, ModeDefault)
	if a.Mode == ModeBatch {
		b := pick(s.batch, d.batch).v
		a.Batch = BatchConfig{
			MaxRecords: cmp.Or(b.MaxRecords, BatchMaxRecordsDefault),
			MaxWait:    cmp.Or(b.MaxWait, BatchMaxWaitDefault),
			Poll:       cmp.Or(b.Poll, BatchPollDefault),
		}
		a.Fallback = pick(s.fallback, d.fallback).v
	} else {
		// Inherited batch settings are simply unused; an action's own are a mistake.
		if s.batch.set {
			p.errorf(s.batch.line, child(s.path, "batch"), "only used with mode: batch (this action's mode is %s)", a.Mode)
		}
		if s.fallback.set {
			p.errorf(s.fallback.line, child(s.path, "fallback"), "only used with mode: batch (this action's mode is %s)", a.Mode)
		}
	}
	p.resolveMore(s, d, a, cfg, known) // multimodal.go
	if len(s.fallbacks) > 0 {
		a.Fallbacks = p.resolveFallbacks(s.fallbacks, a, child(s.path, "fallbacks"), w) // fallbacks.go
	}
	return a
}
