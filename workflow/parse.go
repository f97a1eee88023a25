package workflow

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/provider"
)

// Load reads and parses the workflow file at path, looking up prices in the
// price file PricesEnv names unless the workflow names its own (prices:).
// A file that cannot be read yields the os error (wrapped); a bad workflow
// yields *Error values.
func Load(path string) (*Workflow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load workflow: %w", err)
	}
	p := &parser{file: path, dir: filepath.Dir(path), pricesEnv: os.Getenv(PricesEnv)}
	return p.parse(data)
}

// Parse parses and validates a workflow. file names it in errors, and schema
// and price file paths are relative to its directory; PricesEnv is not read. On failure it returns every problem,
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
	if len(p.errs) == 0 && !p.encoded {
		p.fitWorkers(w) // size.go
	}
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
	actionNameRE   = lazyRegexp(`^[a-z0-9_-]+$`)
	providerNameRE = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	envNameRE      = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
	tmplErrRE      = lazyRegexp(`^template: [^:]*:(\d+):(?:\d+:)? ?(.*)$`)
)

// credentialHeaders may not be set under headers: because headers are stored
// with the job; keys come only from api_key_env or api_key_file.
var credentialHeaders = []string{"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key"}

func (p *parser) workflow(root *yaml.Node) *Workflow {
	known := []string{"name", "providers", "defaults", "actions", "carry", "priority"}
	if p.encoded {
		known = append(known, "version", "file", "max_cost")
	} else {
		known = append(known, "prices") // resolved into each action's price in the encoded form
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
	if v, ok := f["priority"]; ok {
		w.Priority, _ = p.intIn(v, PriorityMin, PriorityMax)
	}
	if v, ok := f["max_cost"]; ok { // the encoded form's: a file says it under defaults:
		w.MaxCost, _ = p.money(v)
	}
	if v, ok := f["prices"]; ok {
		p.loadPrices(&v)
	} else if !p.encoded {
		p.loadPrices(nil)
	}
	if p.prices.file != nil {
		w.Prices = p.prices.file.Name
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
	p.actionsLine = acts.key.Line
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
	if w.MaxCost > 0 && !p.encoded {
		// A budget that cannot count an action's calls would never stop
		// them, and one that cannot bound a call could not reserve it
		// (budget.go). A job's encoded workflow is not checked again: a
		// worker serves the jobs an earlier version dispatched.
		for _, a := range w.Actions {
			if msg := w.budgetProblem(a); msg != "" {
				p.errorf(cmp.Or(defaults.maxCost.line, 1), "defaults.max_cost", "%s", msg)
			}
		}
	}
	return w
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

// lazyRegexp is a pattern compiled on its first use: most of the parser's
// are read only to word an error, and a process that parses no workflow
// compiles none of them.
func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
