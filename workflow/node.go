package workflow

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// parser walks a workflow's YAML node tree and collects every problem.
type parser struct {
	file    string
	dir     string // schema paths are relative to it
	encoded bool   // reading Encode's output: accept its extra keys
	errs    []*Error

	entries map[string]*entry // providers: block

	pricesEnv string      // the price file PricesEnv names (Load only)
	prices    priceSource // the price file in use
	// actionsLine is the line of the actions: key (fitWorkers).
	actionsLine int
}

func (p *parser) errorf(line int, field, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// child returns the path of a field under path.
func child(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// MaxExpandedNodes bounds the YAML nodes of a workflow, and of a schema
// file, counted with every alias and merge key followed. The parser walks
// the document that way, so without a bound a few lines of aliases of
// aliases (a "billion laughs") expand to gigabytes: a 13-line one in
// params took validate to 14.6 GB. A workflow is a few hundred nodes, a
// large inline schema a few thousand.
const MaxExpandedNodes = 100_000

// expansionError is checkExpansion's refusal, at a line.
type expansionError struct {
	line int
	msg  string
}

func (e *expansionError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// checkExpansion counts the nodes of root with aliases followed, each node
// once (so it takes time in the size of the document, not of its
// expansion), and refuses a document past MaxExpandedNodes or with an alias
// inside the value it names (which no walk of the document would end). A
// document that is past the bound as written, aliases or not, is refused
// as too large, not as expanding: the message must name what is there.
func checkExpansion(root *yaml.Node) error {
	if n, line := countNodes(root, MaxExpandedNodes); n > MaxExpandedNodes {
		return &expansionError{line, tooLarge}
	}
	size := map[*yaml.Node]int{}
	const visiting = -1
	var count func(n *yaml.Node) (int, error)
	count = func(n *yaml.Node) (int, error) {
		if n.Kind == yaml.AliasNode && n.Alias != nil {
			switch s := size[n.Alias]; {
			case s == visiting:
				return 0, &expansionError{n.Line, fmt.Sprintf("alias *%s is inside the value it names", n.Value)}
			case s > 0:
				if s > MaxExpandedNodes {
					return 0, &expansionError{n.Line, tooManyNodes}
				}
				return s, nil
			}
			return count(n.Alias)
		}
		if s := size[n]; s > 0 {
			return s, nil
		}
		size[n] = visiting
		total := 1
		for _, c := range n.Content {
			s, err := count(c)
			if err != nil {
				return 0, err
			}
			if total += s; total > MaxExpandedNodes {
				return 0, &expansionError{c.Line, tooManyNodes}
			}
		}
		size[n] = total
		return total, nil
	}
	_, err := count(root)
	return err
}

var (
	tooManyNodes = fmt.Sprintf("its aliases expand the document past %d YAML nodes (write the values out, or alias less)", MaxExpandedNodes)
	tooLarge     = fmt.Sprintf("the document is more than %d YAML nodes (each key, value and list item is one), the most jetpool reads", MaxExpandedNodes)
)

// countNodes counts the nodes of root as written (an alias is one node),
// in document order, stopping once past limit; line is where the count
// passed it.
func countNodes(root *yaml.Node, limit int) (n, line int) {
	var walk func(*yaml.Node) bool
	walk = func(x *yaml.Node) bool {
		if n++; n > limit {
			line = x.Line
			return false
		}
		for _, c := range x.Content {
			if !walk(c) {
				return false
			}
		}
		return true
	}
	walk(root)
	return n, line
}

// deref follows aliases.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// field is one key of a mapping.
type field struct {
	key, val *yaml.Node
	path     string
}

// fields checks that n is a mapping whose keys are all known and unique and
// returns its fields by name. ok is false when n is no mapping.
func (p *parser) fields(n *yaml.Node, path string, known ...string) (map[string]field, bool) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, path, "want a mapping, got %s", describe(n))
		return nil, false
	}
	out := map[string]field{}
	for _, kv := range pairs(n) {
		name := kv[0].Value
		fp := child(path, name)
		if prev, dup := out[name]; dup {
			p.errorf(kv[0].Line, fp, "duplicate field (first at line %d)", prev.key.Line)
			continue
		}
		if path == "" && strings.HasPrefix(name, "x-") {
			continue // top-level extension field: a home for YAML anchors, as in Compose files
		}
		if !slices.Contains(known, name) {
			p.errorf(kv[0].Line, fp, "unknown field%s", suggest(name, known))
			continue
		}
		out[name] = field{key: kv[0], val: deref(kv[1]), path: fp}
	}
	return out, true
}

// pairs returns the key/value pairs of a mapping, expanding YAML merge keys
// (<<: *anchor); a key written in the mapping itself wins over a merged one.
func pairs(n *yaml.Node) [][2]*yaml.Node {
	var own, merged [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			v = deref(v)
			srcs := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				srcs = v.Content
			}
			for _, s := range srcs {
				if s = deref(s); s.Kind == yaml.MappingNode {
					merged = append(merged, pairs(s)...)
				}
			}
			continue
		}
		own = append(own, [2]*yaml.Node{k, v})
	}
	for _, m := range merged {
		if !slices.ContainsFunc(own, func(o [2]*yaml.Node) bool { return o[0].Value == m[0].Value }) {
			own = append(own, m)
		}
	}
	return own
}

// suggest names the closest known field, or lists them all.
func suggest(name string, known []string) string {
	// Close in spelling, or sharing a long enough prefix (retries → retry).
	best, bestD := "", 3
	for _, k := range known {
		d := editDistance(name, k)
		if d == 3 && commonPrefix(name, k) >= 4 {
			d = 2
		}
		if d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %s?)", best)
	}
	return fmt.Sprintf(" (want one of %s)", strings.Join(known, ", "))
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// describe names what a node is, for "want X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func (p *parser) str(f field) (string, bool) {
	n := f.val
	if n.Kind != yaml.ScalarNode || isNull(n) {
		p.errorf(n.Line, f.path, "want a string, got %s", describe(n))
		return "", false
	}
	return n.Value, true
}

// oneOf reads a string that must be one of allowed.
func (p *parser) oneOf(f field, allowed ...string) (string, bool) {
	s, ok := p.str(f)
	if !ok {
		return "", false
	}
	if !slices.Contains(allowed, s) {
		p.errorf(f.val.Line, f.path, "bad value %q (want %s)", s, orList(allowed))
		return "", false
	}
	return s, true
}

func orList(s []string) string {
	if len(s) <= 2 {
		return strings.Join(s, " or ")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

func (p *parser) boolean(f field) (bool, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		var b bool
		if err := n.Decode(&b); err == nil {
			return b, true
		}
	}
	p.errorf(n.Line, f.path, "want true or false, got %s", describe(n))
	return false, false
}

func (p *parser) integer(f field) (int, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int" {
		var i int
		if err := n.Decode(&i); err == nil {
			return i, true
		}
	}
	p.errorf(n.Line, f.path, "want a whole number, got %s", describe(n))
	return 0, false
}

// intIn reads an integer within [lo, hi].
func (p *parser) intIn(f field, lo, hi int) (int, bool) {
	i, ok := p.integer(f)
	if !ok {
		return 0, false
	}
	if i < lo || i > hi {
		if hi == math.MaxInt {
			p.errorf(f.val.Line, f.path, "%d is less than %d", i, lo)
		} else {
			p.errorf(f.val.Line, f.path, "%d is out of range %d-%d", i, lo, hi)
		}
		return 0, false
	}
	return i, true
}

// duration reads a Go duration ("500ms", "2s", "1m30s") that must be
// positive: a zero would silently mean "the default".
func (p *parser) duration(f field) (time.Duration, bool) {
	n := f.val
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		p.errorf(n.Line, f.path, "want a duration such as 500ms, 2s or 1m30s, got %s", describe(n))
		return 0, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		p.errorf(n.Line, f.path, "bad duration %q (want e.g. 500ms, 2s, 1m30s)", n.Value)
		return 0, false
	}
	if d <= 0 {
		p.errorf(n.Line, f.path, "%s is not positive", n.Value)
		return 0, false
	}
	return d, true
}

// stringMap reads a mapping of scalars.
func (p *parser) stringMap(f field) (map[string]string, bool) {
	n := f.val
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, f.path, "want a mapping of names to strings, got %s", describe(n))
		return nil, false
	}
	out := map[string]string{}
	ok := true
	for _, kv := range pairs(n) {
		v := deref(kv[1])
		if v.Kind != yaml.ScalarNode || isNull(v) {
			p.errorf(v.Line, child(f.path, kv[0].Value), "want a string, got %s", describe(v))
			ok = false
			continue
		}
		out[kv[0].Value] = v.Value
	}
	return out, ok
}

// nodeError is a problem found by toJSON, at a line.
type nodeError struct {
	line int
	msg  string
}

func (e *nodeError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// toJSON converts a node to the values encoding/json produces (map[string]any,
// []any, float64, string, bool, nil), so that a value reads the same after
// Parse as after Decode.
func toJSON(n *yaml.Node) (any, error) {
	return toJSONDepth(n, 0)
}

func toJSONDepth(n *yaml.Node, depth int) (any, error) {
	n = deref(n)
	if depth > 100 {
		return nil, &nodeError{n.Line, "nested too deeply"}
	}
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		for _, kv := range pairs(n) {
			if kv[0].Kind != yaml.ScalarNode {
				return nil, &nodeError{kv[0].Line, "a key must be a string"}
			}
			v, err := toJSONDepth(kv[1], depth+1)
			if err != nil {
				return nil, err
			}
			m[kv[0].Value] = v
		}
		return m, nil
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := toJSONDepth(c, depth+1)
			if err != nil {
				return nil, err
			}
			s = append(s, v)
		}
		return s, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			err := n.Decode(&b)
			return b, err
		case "!!int", "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, &nodeError{n.Line, fmt.Sprintf("bad number %q", n.Value)}
			}
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, &nodeError{n.Line, fmt.Sprintf("%s has no JSON form", n.Value)}
			}
			return f, nil
		}
		return n.Value, nil // strings, and timestamps or binary as written
	}
	return nil, &nodeError{n.Line, "unexpected YAML node"}
}

var yamlErrRE = lazyRegexp(`^yaml: (?:line (\d+): )?(.*)$`)

// yamlError reports a parse error of the YAML itself at the line it names.
func (p *parser) yamlError(err error) {
	line, msg := 0, err.Error()
	if m := yamlErrRE().FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	p.errorf(line, "", "malformed YAML: %s", msg)
}
