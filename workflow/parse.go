package workflow

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Load reads and parses the workflow file at path. A file that cannot be read
// yields the os error (wrapped); a bad workflow yields *Error values.
func Load(path string) (*Workflow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load workflow: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and validates a workflow. file names it in errors, and schema
// paths are relative to its directory. On failure it returns every problem,
// each an *Error, joined and sorted by line.
func Parse(file string, data []byte) (*Workflow, error) {
	p := &parser{file: file, dir: filepath.Dir(file)}
	return p.parse(data)
}

func (p *parser) parse(data []byte) (*Workflow, error) {
	root := p.document(data)
	if root == nil {
		return nil, joinErrors(p.errs)
	}
	w := p.workflow(root)
	if err := joinErrors(p.errs); err != nil {
		return nil, err
	}
	return w, nil
}

// document returns the root node of the only YAML document in data, or nil
// after reporting why there is none.
func (p *parser) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.empty()
		} else {
			p.yamlError(err)
		}
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || isNull(deref(doc.Content[0])) {
		p.empty()
		return nil
	}
	if err := checkExpansion(&doc); err != nil {
		var ee *expansionError
		errors.As(err, &ee)
		p.errorf(ee.line, "", "%s", ee.msg)
		return nil
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		if len(next.Content) > 0 && !isNull(next.Content[0]) {
			p.errorf(next.Content[0].Line, "", "a workflow is one YAML document; another starts here")
			return nil
		}
	case !errors.Is(err, io.EOF):
		p.yamlError(err)
		return nil
	}
	return deref(doc.Content[0])
}

func (p *parser) empty() {
	p.errorf(1, "", "the workflow is empty; it needs at least an actions: list")
}

var (
	actionNameRE   = regexp.MustCompile(`^[a-z0-9_-]+$`)
	providerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	envNameRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	tmplErrRE      = regexp.MustCompile(`^template: [^:]*:(\d+):(?:\d+:)? ?(.*)$`)
)

// credentialHeaders may not be set under headers: because headers are stored
// with the job; keys come only from api_key_env or api_key_file.
var credentialHeaders = []string{"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key"}

func (p *parser) workflow(root *yaml.Node) *Workflow {
	known := []string{"name", "providers", "defaults", "actions", "carry"}
	if p.encoded {
		known = append(known, "version", "file", "max_cost")
	}
	f, ok := p.fields(root, "", known...)
	if !ok {
		return nil
	}
	w := &Workflow{File: p.file, Providers: map[string]provider.Config{}}
	if p.encoded {
		w.File = "" // from the file key
	}
	if v, ok := f["name"]; ok {
		w.Name, _ = p.str(v)
	}
	if v, ok := f["file"]; ok {
		w.File, _ = p.str(v)
	}
	if v, ok := f["carry"]; ok {
		w.Carry, _ = p.carry(v)
	}
	if v, ok := f["max_cost"]; ok { // the encoded form's: a file says it under defaults:
		w.MaxCost, _ = p.money(v)
	}
	p.entries = map[string]*entry{}
	if v, ok := f["providers"]; ok {
		p.providers(v)
	}
	defaults := &spec{}
	if v, ok := f["defaults"]; ok {
		if d := p.spec(v.val, v.path, false); d != nil {
			defaults = d
			if d.maxCost.set {
				w.MaxCost = d.maxCost.v
			}
		}
	}
	acts, ok := f["actions"]
	if !ok {
		p.errorf(root.Line, "actions", "missing; a workflow needs at least one action")
		return w
	}
	if acts.val.Kind != yaml.SequenceNode {
		p.errorf(acts.val.Line, acts.path, "want a list of actions, got %s", describe(acts.val))
		return w
	}
	if len(acts.val.Content) == 0 {
		p.errorf(acts.val.Line, acts.path, "empty; a workflow needs at least one action")
		return w
	}
	first := map[string]int{}
	for i, n := range acts.val.Content {
		s := p.spec(n, fmt.Sprintf("actions[%d]", i), true)
		if s == nil {
			continue
		}
		if s.name.set {
			if line, dup := first[s.name.v]; dup {
				p.errorf(s.name.line, child(s.path, "name"), "duplicate action name %q (first at line %d)", s.name.v, line)
			} else {
				first[s.name.v] = s.name.line
			}
		}
		w.Actions = append(w.Actions, p.resolve(s, defaults, i, w))
	}
	if w.MaxCost > 0 {
		// A budget that cannot count an action's calls would never stop them.
		for _, a := range w.Actions {
			if a.Price == nil && a.Provider != "" {
				p.errorf(cmp.Or(defaults.maxCost.line, 1), "defaults.max_cost", "action %s (provider %s, model %s) has no known price, so the budget could not count its calls: give it a price: block",
					a.Name, a.Provider, cmp.Or(a.Model, "default"))
			}
			if o := a.Overflow; o != nil && o.FallbackModel != "" && o.FallbackPrice == nil {
				p.errorf(cmp.Or(defaults.maxCost.line, 1), "defaults.max_cost", "action %s's overflow fallback (provider %s, model %s) has no known price, so the budget could not count its calls: give its provider a price: block",
					a.Name, o.FallbackProvider, o.FallbackModel)
			}
		}
	}
	return w
}

// entry is one provider of the providers: block.
type entry struct {
	cfg   provider.Config
	price *pricing.Price // price:, for every model of the provider
	bad   bool           // already reported; actions using it add no errors of their own
}

func (p *parser) providers(f field) {
	n := f.val
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, f.path, "want a mapping of provider names to entries, got %s", describe(n))
		return
	}
	for _, kv := range pairs(n) {
		name := kv[0].Value
		path := child(f.path, name)
		if _, dup := p.entries[name]; dup {
			p.errorf(kv[0].Line, path, "duplicate provider")
			continue
		}
		if !providerNameRE.MatchString(name) {
			p.errorf(kv[0].Line, path, "bad provider name (want letters, digits, _, . and -)")
		}
		p.entries[name] = p.provider(name, field{key: kv[0], val: deref(kv[1]), path: path})
	}
}

func (p *parser) provider(name string, f field) *entry {
	cfg, preset := provider.Preset(name)
	if !preset {
		cfg = provider.Config{Name: name}
	}
	e := &entry{cfg: cfg}
	before := len(p.errs)
	defer func() { e.bad = len(p.errs) > before }()
	pf, ok := p.fields(f.val, f.path, "kind", "base_url", "api_key_env", "api_key_file", "timeout", "headers", "stream", "limits", "max_retry_after", "sim", "price")
	if !ok {
		return e
	}
	if v, ok := pf["kind"]; ok {
		if k, ok := p.str(v); ok {
			if slices.Contains(provider.Kinds, k) {
				e.cfg.Kind = k
			} else {
				p.errorf(v.val.Line, v.path, "unknown kind %q (want %s)", k, orList(provider.Kinds))
			}
		}
	} else if !preset {
		p.errorf(f.val.Line, child(f.path, "kind"), "missing; want %s (or name the entry after a preset: %s)",
			orList(provider.Kinds), strings.Join(provider.PresetNames(), ", "))
	}
	if v, ok := pf["base_url"]; ok {
		if s, ok := p.str(v); ok {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.errorf(v.val.Line, v.path, "want an http or https URL, got %q", s)
			} else {
				e.cfg.BaseURL = s
			}
		}
	}
	if v, ok := pf["api_key_env"]; ok {
		if s, ok := p.str(v); ok {
			if envNameRE.MatchString(s) {
				e.cfg.APIKeyEnv = s
			} else {
				// The value is not echoed: it may be the key itself.
				p.errorf(v.val.Line, v.path, "not an environment variable name (write the name of the variable that holds the key, such as GROQ_API_KEY, never the key)")
			}
		}
	}
	if v, ok := pf["api_key_file"]; ok {
		if s, ok := p.str(v); ok {
			// Read by the worker at call time, on its own machine: left as written.
			e.cfg.APIKeyFile = s
		}
	}
	if v, ok := pf["timeout"]; ok {
		e.cfg.Timeout, _ = p.duration(v)
	}
	if v, ok := pf["headers"]; ok {
		if h, ok := p.stringMap(v); ok {
			for k := range h {
				if slices.Contains(credentialHeaders, strings.ToLower(k)) {
					p.errorf(v.val.Line, child(v.path, k), "credentials may not be set as headers (headers are stored with the job); use api_key_env or api_key_file")
				}
			}
			if len(h) > 0 {
				e.cfg.Headers = h
			}
		}
	}
	if v, ok := pf["stream"]; ok {
		e.cfg.Stream, _ = p.boolean(v)
	}
	if v, ok := pf["limits"]; ok {
		p.limits(v, &e.cfg.Limits) // limits.go
	}
	if v, ok := pf["max_retry_after"]; ok {
		e.cfg.MaxRetryAfter, _ = p.durationIn(v, time.Second, MaxRetryAfterMax)
	}
	if v, ok := pf["price"]; ok {
		e.price, _ = p.price(v)
	}
	if v, ok := pf["sim"]; ok {
		if e.cfg.Kind != provider.KindSim {
			p.errorf(v.key.Line, v.path, "only for kind sim (this provider is kind %s)", cmp.Or(e.cfg.Kind, "unknown"))
		} else {
			e.cfg.Sim = p.sim(v)
		}
	}
	return e
}

var typeErrLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// sim decodes a sim: block into provider.SimConfig, refusing unknown fields.
func (p *parser) sim(f field) *provider.SimConfig {
	var sc provider.SimConfig
	if f.val.Kind != yaml.MappingNode {
		p.errorf(f.val.Line, f.path, "want a mapping, got %s", describe(f.val))
		return nil
	}
	if !p.knownKeys(f.val, reflect.TypeFor[provider.SimConfig](), f.path) {
		return nil
	}
	if err := f.val.Decode(&sc); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, msg := range te.Errors {
				line := f.val.Line
				if m := typeErrLineRE.FindStringSubmatch(msg); m != nil {
					line, _ = strconv.Atoi(m[1])
					msg = m[2]
				}
				p.errorf(line, f.path, "%s", msg)
			}
		} else {
			p.errorf(f.val.Line, f.path, "%v", err)
		}
		return nil
	}
	if v, ok := any(&sc).(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			p.errorf(f.val.Line, f.path, "%v", err)
			return nil
		}
	}
	return &sc
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// knownKeys reports the keys of n that name no field of t (by yaml tag),
// recursively: Node.Decode has no KnownFields option. Type mismatches are
// left to Decode.
func (p *parser) knownKeys(n *yaml.Node, t reflect.Type, path string) bool {
	n = deref(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return true
	}
	ok := true
	switch t.Kind() {
	case reflect.Struct:
		names, open := yamlFields(t)
		if n.Kind != yaml.MappingNode || open {
			return true
		}
		seen := map[string]int{}
		for _, kv := range pairs(n) {
			name := kv[0].Value
			fp := child(path, name)
			if line, dup := seen[name]; dup {
				p.errorf(kv[0].Line, fp, "duplicate field (first at line %d)", line)
				ok = false
				continue
			}
			seen[name] = kv[0].Line
			ft, known := names[name]
			if !known {
				p.errorf(kv[0].Line, fp, "unknown field%s", suggest(name, slices.Sorted(maps.Keys(names))))
				ok = false
				continue
			}
			ok = p.knownKeys(kv[1], ft, fp) && ok
		}
	case reflect.Slice, reflect.Array:
		if n.Kind == yaml.SequenceNode {
			for i, c := range n.Content {
				ok = p.knownKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)) && ok
			}
		}
	case reflect.Map:
		if n.Kind == yaml.MappingNode {
			for _, kv := range pairs(n) {
				ok = p.knownKeys(kv[1], t.Elem(), child(path, kv[0].Value)) && ok
			}
		}
	}
	return ok
}

// yamlFields maps the yaml keys of struct t to their types, as yaml.v3 names
// them. open is true when an inline map accepts any key.
func yamlFields(t reflect.Type) (names map[string]reflect.Type, open bool) {
	names = map[string]reflect.Type{}
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("yaml")
		if !sf.IsExported() || tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() != reflect.Struct {
				return names, true
			}
			sub, o := yamlFields(ft)
			maps.Copy(names, sub)
			open = open || o
			continue
		}
		if name == "" {
			name = strings.ToLower(sf.Name)
		}
		names[name] = sf.Type
	}
	return names, open
}

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
	maxCost      opt[float64]  // defaults: only
	overflow     *overflowSpec // actions only
	more         moreSpec      // multimodal.go: kind, input, images, documents, tools, tool_choice, cache, embed

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
		known = append([]string{"name", "prompt", "overflow", "kind", "input", "images", "documents", "tools", "tool_choice", "embed"}, specFields...)
		if p.encoded {
			known = append(known, "line")
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
		v, ok := f[name]
		if !ok {
			continue
		}
		line := v.val.Line
		switch name {
		case "name":
			if x, ok := p.str(v); ok {
				if actionNameRE.MatchString(x) {
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
				continue
			}
			x, err := toJSON(v.val)
			if err != nil {
				p.nodeError(err, v)
				continue
			}
			m := x.(map[string]any)
			if len(m) == 0 {
				m = nil
			}
			s.params = some(m, line)
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
		if m := tmplErrRE.FindStringSubmatch(msg); m != nil {
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

func (p *parser) retry(f field) (retry.Policy, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		on, _ := p.boolean(f)
		if !on {
			return retry.Policy{}, true
		}
		return retry.Policy{Enabled: true}.WithDefaults(), true
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, f.path, "want a mapping, or false to turn retry off, got %s", describe(n))
		return retry.Policy{}, false
	}
	before := len(p.errs)
	rf, _ := p.fields(n, f.path, "enabled", "max_attempts", "backoff", "max_backoff", "budget", "on_exhausted", "redeliver", "max_wait")
	pol := retry.Policy{Enabled: true}
	if v, ok := rf["enabled"]; ok {
		pol.Enabled, _ = p.boolean(v)
	}
	if v, ok := rf["max_attempts"]; ok {
		pol.MaxAttempts, _ = p.intIn(v, retry.MaxAttemptsMin, retry.MaxAttemptsMax)
	}
	if v, ok := rf["backoff"]; ok {
		pol.Backoff, _ = p.duration(v)
	}
	if v, ok := rf["max_backoff"]; ok {
		pol.MaxBackoff, _ = p.duration(v)
	}
	if v, ok := rf["budget"]; ok {
		pol.Budget, _ = p.duration(v)
	}
	if v, ok := rf["on_exhausted"]; ok {
		pol.OnExhausted, _ = p.onExhausted(v)
	}
	if v, ok := rf["max_wait"]; ok {
		pol.MaxWait, _ = p.duration(v)
	}
	if v, ok := rf["redeliver"]; ok {
		if df, ok := p.fields(v.val, v.path, "max_deliveries", "backoff"); ok {
			if x, ok := df["max_deliveries"]; ok {
				pol.MaxDeliveries, _ = p.intIn(x, 1, retry.MaxDeliveriesMax)
			}
			if x, ok := df["backoff"]; ok {
				pol.RedeliverBackoff, _ = p.duration(x)
			}
		}
	}
	if len(p.errs) > before {
		return retry.Policy{}, false
	}
	// The policy's own rules, across fields (max_backoff below backoff, …).
	if err := pol.Validate(); err != nil {
		fes := fieldErrors(err)
		for _, fe := range fes {
			p.errorf(lineOf(n, fe.Field), child(f.path, fe.Field), "%s", fe.Msg)
		}
		if len(fes) == 0 {
			p.errorf(n.Line, f.path, "%v", err)
		}
		return retry.Policy{}, false
	}
	if !pol.Enabled {
		// Off: one call, one delivery. An explicit raise is kept, so
		// `{enabled: false, on_exhausted: raise}` fails the job at once.
		// max_wait bounds waiting, which is not retrying: it stays too.
		off := retry.Policy{MaxWait: pol.MaxWait}
		if pol.OnExhausted == retry.Raise {
			off.OnExhausted = retry.Raise
		}
		return off, true
	}
	return pol.WithDefaults(), true
}

// fieldErrors unpacks the *retry.FieldError values in err.
func fieldErrors(err error) []*retry.FieldError {
	var out []*retry.FieldError
	var fe *retry.FieldError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
	} else if errors.As(err, &fe) {
		out = append(out, fe)
	}
	return out
}

// lineOf returns the line of the value at a dotted path under mapping n,
// or n's line when there is none.
func lineOf(n *yaml.Node, dotted string) int {
	cur := n
	for name := range strings.SplitSeq(dotted, ".") {
		next := (*yaml.Node)(nil)
		if cur.Kind == yaml.MappingNode {
			for _, kv := range pairs(cur) {
				if kv[0].Value == name {
					next = deref(kv[1])
				}
			}
		}
		if next == nil {
			return cur.Line
		}
		cur = next
	}
	return cur.Line
}

func (p *parser) onExhausted(f field) (retry.OnExhausted, bool) {
	s, ok := p.oneOf(f, string(retry.ReturnLast), string(retry.Raise))
	return retry.OnExhausted(s), ok
}

func (p *parser) expect(f field) (*Expect, bool) {
	known := []string{"format", "schema", "repair"}
	if p.encoded {
		known = append(known, "schema_file", "schema_line")
	}
	before := len(p.errs)
	ef, ok := p.fields(f.val, f.path, known...)
	if !ok {
		return nil, false
	}
	e := &Expect{RepairOnExhausted: retry.OnExhaustedDefault}
	format, hasFormat := ef["format"]
	if hasFormat {
		e.Format, _ = p.oneOf(format, FormatJSON, FormatText)
	}
	schema, hasSchema := ef["schema"]
	if hasSchema {
		e.SchemaLine = schema.val.Line
		switch n := schema.val; {
		case n.Kind == yaml.MappingNode:
			if x, err := toJSON(n); err != nil {
				p.nodeError(err, schema)
			} else {
				e.Schema = x.(map[string]any)
			}
		case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
			e.SchemaFile = n.Value
			e.Schema = p.schemaFile(schema)
		default:
			p.errorf(n.Line, schema.path, "want a mapping, or the path of a JSON or YAML file, got %s", describe(n))
		}
	}
	if v, ok := ef["schema_file"]; ok {
		e.SchemaFile, _ = p.str(v)
	}
	if v, ok := ef["schema_line"]; ok {
		e.SchemaLine, _ = p.intIn(v, 0, math.MaxInt)
	}
	switch {
	case hasSchema && e.Format == FormatText:
		p.errorf(format.val.Line, format.path, "text cannot have a schema (a schema implies json)")
	case hasSchema:
		e.Format = FormatJSON
	case !hasFormat:
		p.errorf(f.val.Line, f.path, "set format or schema")
	}
	if v, ok := ef["repair"]; ok {
		p.repair(v, e)
	}
	if len(p.errs) > before {
		return nil, false
	}
	if e.Schema != nil && SchemaCheck != nil {
		if err := SchemaCheck(e.Schema); err != nil {
			p.errorf(e.SchemaLine, child(f.path, "schema"), "%v", err)
			return nil, false
		}
	}
	return e, true
}

func (p *parser) repair(f field, e *Expect) {
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!bool" {
		if on, _ := p.boolean(f); on {
			e.RepairAttempts = RepairAttemptsDefault
		}
		return
	}
	rf, ok := p.fields(f.val, f.path, "max_attempts", "on_exhausted")
	if !ok {
		return
	}
	e.RepairAttempts = RepairAttemptsDefault
	if v, ok := rf["max_attempts"]; ok {
		e.RepairAttempts, _ = p.intIn(v, RepairAttemptsMin, RepairAttemptsMax)
	}
	if v, ok := rf["on_exhausted"]; ok {
		e.RepairOnExhausted, _ = p.onExhausted(v)
	}
}

// schemaFile reads a schema written as a path, relative to the workflow file.
func (p *parser) schemaFile(f field) map[string]any {
	name := strings.TrimSpace(f.val.Value)
	if name == "" {
		p.errorf(f.val.Line, f.path, "empty; want a mapping or the path of a JSON or YAML file")
		return nil
	}
	full := name
	if !filepath.IsAbs(name) {
		full = filepath.Join(p.dir, name)
	}
	data, err := os.ReadFile(full)
	if err != nil {
		p.errorf(f.val.Line, f.path, "cannot read schema file: %v", err)
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errorf(f.val.Line, f.path, "schema file %s: %s", full, strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	if len(doc.Content) == 0 {
		p.errorf(f.val.Line, f.path, "schema file %s is empty", full)
		return nil
	}
	if err := checkExpansion(&doc); err != nil {
		p.errorf(f.val.Line, f.path, "schema file %s: %v", full, err)
		return nil
	}
	x, err := toJSON(doc.Content[0])
	if err != nil {
		p.errorf(f.val.Line, f.path, "schema file %s: %v", full, err)
		return nil
	}
	m, ok := x.(map[string]any)
	if !ok {
		p.errorf(f.val.Line, f.path, "schema file %s holds %s, not a mapping", full, describe(deref(doc.Content[0])))
		return nil
	}
	return m
}

func (p *parser) batch(f field) (BatchConfig, bool) {
	before := len(p.errs)
	var b BatchConfig
	bf, ok := p.fields(f.val, f.path, "max_records", "max_wait", "poll")
	if !ok {
		return b, false
	}
	if v, ok := bf["max_records"]; ok {
		b.MaxRecords, _ = p.intIn(v, BatchMaxRecordsMin, BatchMaxRecordsMax)
	}
	if v, ok := bf["max_wait"]; ok {
		b.MaxWait, _ = p.duration(v)
	}
	if v, ok := bf["poll"]; ok {
		b.Poll, _ = p.duration(v)
	}
	return b, len(p.errs) == before
}

// usable returns the configuration of a provider that exists and has no
// reported problem.
func (p *parser) usable(name string) (provider.Config, bool) {
	if e, ok := p.entries[name]; ok {
		return e.cfg, !e.bad
	}
	return provider.Preset(name)
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
	a.Price = actionPrice(pick(s.price, d.price).v, entryPrice, a.Provider, a.Model)
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
	return a
}
