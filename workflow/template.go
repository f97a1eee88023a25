package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"

	"github.com/jetpool/jetpool/retry"
)

// TemplateFuncs are the functions a prompt may call besides text/template's
// built-ins: json renders a value (an earlier action's parsed output, say) as
// compact JSON.
var TemplateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

// ErrMissingField is returned (wrapped in a *retry.Error of class
// programming) by Render when the prompt reads a field the data lacks.
var ErrMissingField = errors.New("missing field")

// Bounds of one Render. A prompt is a program over a record: without
// bounds, two nested {{range}}s over a 300-element field took a worker to
// 3.4 GB, and over 2,000 elements never finished.
const (
	// MaxPromptBytes caps a rendered prompt (ErrPromptTooLarge): 8 MiB, the
	// largest record jetpool's embedded server takes, and more than any
	// model's context window.
	MaxPromptBytes = 8 << 20
	// MaxBuiltBytes caps the text one render builds with printf, print,
	// println, json, html, js and urlquery, which allocate before anything
	// is written (ErrPromptTooLarge).
	MaxBuiltBytes = 4 * MaxPromptBytes
	// MaxTemplateSteps caps the work of one render (ErrRenderTooLong): a
	// {{range}} counts, before it starts, the nodes of its body times the
	// elements it ranges over (at least one a element), and a {{template}}
	// call the nodes of the template. At most about a second of a worker's
	// CPU (BenchmarkRender).
	MaxTemplateSteps = 2_000_000
	// MaxPrintfWidth caps a printf width or precision (%9999999d would
	// allocate its width first).
	MaxPrintfWidth = 1 << 16
)

// ErrBadInput is matched by the errors of a record that cannot be rendered
// within the bounds above: a worker dead-letters such a record with reason
// bad_input and goes on (the record, not the worker, is at fault).
var ErrBadInput = errors.New("bad input")

var (
	// ErrPromptTooLarge is returned (wrapped in a *retry.Error of class
	// invalid_request) by Render when the prompt passes MaxPromptBytes or
	// builds more than MaxBuiltBytes. It wraps ErrBadInput.
	ErrPromptTooLarge = fmt.Errorf("prompt too large: %w", ErrBadInput)
	// ErrRenderTooLong is returned (wrapped in a *retry.Error of class
	// invalid_request) by Render when it passes MaxTemplateSteps. It wraps
	// ErrBadInput.
	ErrRenderTooLong = fmt.Errorf("prompt takes too long to render: %w", ErrBadInput)
)

// templateTypeName is the diagnostic type name of Render's errors.
const templateTypeName = "TemplateError"

// The functions instrument puts into a prompt's {{range}}s and
// {{template}} calls, which count the work of one render as it runs.
const (
	loopFunc = "_jetpool_range"    // {{range PIPE | _jetpool_range COST}}
	callFunc = "_jetpool_template" // {{template "t" (PIPE | _jetpool_template COST)}}
)

// budget is what one render has spent; the bounded functions of a
// renderer charge it.
type budget struct {
	steps, built int
}

// charge adds n steps.
func (b *budget) charge(n int) error {
	if n < 0 || n > MaxTemplateSteps-b.steps {
		b.steps = MaxTemplateSteps + 1
		return fmt.Errorf("more than %d steps (nested {{range}}s over large fields?): %w", MaxTemplateSteps, ErrRenderTooLong)
	}
	b.steps += n
	return nil
}

// loop is a {{range}}'s charge: cost for each element of v, which it passes
// on. Counting before the loop runs needs one call a loop, not one an
// element (a call costs as much as a few nodes).
func (b *budget) loop(cost int, v any) (any, error) {
	n := 0
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map, reflect.Chan, reflect.String:
		n = rv.Len()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n = int(min(max(rv.Int(), 0), MaxTemplateSteps+1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		n = int(min(rv.Uint(), MaxTemplateSteps+1))
	}
	if n > 0 && cost > (MaxTemplateSteps+1)/n {
		return nil, b.charge(-1)
	}
	return v, b.charge(cost * n)
}

// call is a {{template}} call's charge; it passes the call's data on (none
// when the call has none).
func (b *budget) call(cost int, v ...any) (any, error) {
	if err := b.charge(cost); err != nil {
		return nil, err
	}
	if len(v) == 0 {
		return nil, nil
	}
	return v[0], nil
}

// build charges s, built by a function, and returns it.
func (b *budget) build(s string) (string, error) {
	if b.built += len(s); b.built > MaxBuiltBytes {
		return "", fmt.Errorf("the functions it calls built more than %d bytes: %w", MaxBuiltBytes, ErrPromptTooLarge)
	}
	return s, nil
}

// funcs are the bounded versions of the functions that build text, and the
// step counter, over b. They replace the built-ins of the same names.
func (b *budget) funcs() template.FuncMap {
	built := func(f func(...any) string) func(...any) (string, error) {
		return func(args ...any) (string, error) { return b.build(f(args...)) }
	}
	return template.FuncMap{
		loopFunc: b.loop,
		callFunc: b.call,
		"printf": func(format string, args ...any) (string, error) {
			if err := checkFormat(format); err != nil {
				return "", err
			}
			return b.build(fmt.Sprintf(format, args...))
		},
		"print":    built(fmt.Sprint),
		"println":  built(fmt.Sprintln),
		"html":     built(template.HTMLEscaper),
		"js":       built(template.JSEscaper),
		"urlquery": built(template.URLQueryEscaper),
		"json": func(v any) (string, error) {
			out, err := json.Marshal(v)
			if err != nil {
				return "", err
			}
			return b.build(string(out))
		},
	}
}

// checkFormat refuses a printf width or precision that would allocate more
// than MaxPrintfWidth, and one taken from an argument (*).
func checkFormat(format string) error {
	digit := func(i int) bool { return i < len(format) && format[i] >= '0' && format[i] <= '9' }
	at := func(i int, c byte) bool { return i < len(format) && format[i] == c }
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		for i++; i < len(format) && strings.IndexByte("+-# 0", format[i]) >= 0; i++ {
		}
		for part := range 2 { // the width, then the precision after a '.'
			if at(i, '[') { // an argument index, %[2]d
				for i < len(format) && format[i] != ']' {
					i++
				}
				i++
			}
			n := 0
			for ; digit(i); i++ {
				if n = n*10 + int(format[i]-'0'); n > MaxPrintfWidth {
					return fmt.Errorf("printf %q: a width or precision above %d: %w", format, MaxPrintfWidth, ErrPromptTooLarge)
				}
			}
			if at(i, '*') {
				return fmt.Errorf("printf %q: a width or precision from an argument (*) is not allowed in a prompt", format)
			}
			if part > 0 || !at(i, '.') {
				break
			}
			i++
		}
	}
	return nil
}

// cappedWriter is a rendered prompt that refuses to pass MaxPromptBytes:
// text/template stops at the first write error.
type cappedWriter struct{ strings.Builder }

func (w *cappedWriter) Write(p []byte) (int, error) {
	if w.Len()+len(p) > MaxPromptBytes {
		return 0, fmt.Errorf("the rendered prompt passes %d bytes: %w", MaxPromptBytes, ErrPromptTooLarge)
	}
	return w.Builder.Write(p)
}

// renderer is one goroutine's copy of a prompt template, its bounded
// functions bound to its own budget.
type renderer struct {
	tmpl *template.Template
	b    *budget
}

func compilePrompt(name, text string) (*compiledPrompt, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(TemplateFuncs).Funcs((&budget{}).funcs()).Parse(text)
	if err != nil {
		return nil, err
	}
	refs := templateRefs(t) // before instrument adds its own commands
	cp := &compiledPrompt{tmpl: t, fields: refFields(refs), refs: refs, plain: plainParts(t)}
	instrument(t)
	cp.renderers.New = func() any {
		c, err := cp.tmpl.Clone()
		if err != nil {
			panic(err) // Clone fails only on a template already executed by html/template
		}
		r := &renderer{tmpl: c, b: &budget{}}
		c.Funcs(r.b.funcs())
		return r
	}
	return cp, nil
}

// plainPart is a piece of a prompt made only of text and top-level fields
// ("Summarize: {{ .text }}"): its text, or the field it prints.
type plainPart struct {
	text, field string
}

// plainParts is t as plain parts, nil when t is anything more (a pipeline,
// a function, a nested field, a control structure, another template).
func plainParts(t *template.Template) []plainPart {
	if len(t.Templates()) != 1 || t.Tree == nil || t.Root == nil {
		return nil
	}
	var parts []plainPart
	for _, n := range t.Root.Nodes {
		switch n := n.(type) {
		case *parse.TextNode:
			parts = append(parts, plainPart{text: string(n.Text)})
		case *parse.ActionNode:
			p := n.Pipe
			if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
				return nil
			}
			f, ok := p.Cmds[0].Args[0].(*parse.FieldNode)
			if !ok || len(f.Ident) != 1 {
				return nil
			}
			parts = append(parts, plainPart{field: f.Ident[0]})
		default:
			return nil
		}
	}
	return parts
}

// execute renders cp over data within the bounds above. A plain prompt
// whose fields are all strings is put together directly (what
// text/template would write, without its reflection: it ran for every
// record); anything else runs the template.
func (cp *compiledPrompt) execute(data map[string]any) (string, error) {
	if cp.plain != nil {
		if s, ok := cp.plainString(data); ok {
			return s, nil
		}
	}
	r := cp.renderers.Get().(*renderer)
	defer cp.renderers.Put(r)
	*r.b = budget{}
	var w cappedWriter
	if err := r.tmpl.Execute(&w, data); err != nil {
		return "", err
	}
	return w.String(), nil
}

// plainString renders a plain prompt when every field it prints is a
// string within MaxPromptBytes; ok false leaves it to the template (which
// formats other values and says what is wrong).
func (cp *compiledPrompt) plainString(data map[string]any) (string, bool) {
	n := 0
	for _, p := range cp.plain {
		if p.field == "" {
			n += len(p.text)
			continue
		}
		v, ok := data[p.field].(string)
		if !ok {
			return "", false
		}
		n += len(v)
	}
	if n > MaxPromptBytes {
		return "", false
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range cp.plain {
		if p.field == "" {
			b.WriteString(p.text)
		} else {
			b.WriteString(data[p.field].(string))
		}
	}
	return b.String(), true
}

// instrument makes every {{range}} of t charge its body's cost for each
// element before it starts (_jetpool_range at the end of its pipeline), and
// every {{template}} call the called template's (_jetpool_template around
// the call's data): so nested loops and (recursive) calls count against
// MaxTemplateSteps, and the rest of a prompt runs in time linear in its
// text.
func instrument(t *template.Template) {
	var walk func(n parse.Node)
	list := func(l *parse.ListNode) {
		if l == nil {
			return
		}
		for _, n := range l.Nodes {
			walk(n)
		}
	}
	walk = func(n parse.Node) {
		switch n := n.(type) {
		case *parse.ListNode:
			list(n)
		case *parse.IfNode:
			list(n.List)
			list(n.ElseList)
		case *parse.WithNode:
			list(n.List)
			list(n.ElseList)
		case *parse.RangeNode:
			list(n.List)
			list(n.ElseList)
			n.Pipe.Cmds = append(n.Pipe.Cmds, costCmd(loopFunc, n.Pipe.Pos, 1+cost(n.List)))
		case *parse.TemplateNode:
			c := templateCost
			if callee := t.Lookup(n.Name); callee != nil && callee.Tree != nil {
				c += cost(callee.Root)
			}
			if n.Pipe == nil {
				n.Pipe = &parse.PipeNode{NodeType: parse.NodePipe, Pos: n.Pos, Line: n.Line}
			}
			n.Pipe.Cmds = append(n.Pipe.Cmds, costCmd(callFunc, n.Pos, c))
		}
	}
	for _, tt := range t.Templates() {
		if tt.Tree != nil && tt.Root != nil {
			list(tt.Root)
		}
	}
}

// Weights of cost: a function call (printf, slice, index, …) costs as much
// as several nodes, and a {{template}} call more (a new scope, its data
// evaluated), measured by BenchmarkRender.
const (
	funcCost     = 5
	templateCost = 20
)

// cost counts the nodes l runs, a function call as funcCost, not those of
// loop bodies or called templates within it (which are charged when they
// run).
func cost(l *parse.ListNode) int {
	n := 1
	pipe := func(p *parse.PipeNode) {
		if p == nil {
			return
		}
		for _, c := range p.Cmds {
			n++
			if len(c.Args) > 0 {
				if _, ok := c.Args[0].(*parse.IdentifierNode); ok {
					n += funcCost
				}
			}
		}
	}
	var walk func(parse.Node)
	walk = func(x parse.Node) {
		n++
		switch x := x.(type) {
		case *parse.ListNode:
			if x != nil {
				for _, c := range x.Nodes {
					walk(c)
				}
			}
		case *parse.ActionNode:
			pipe(x.Pipe)
		case *parse.IfNode:
			pipe(x.Pipe)
			walk(x.List)
			if x.ElseList != nil {
				walk(x.ElseList)
			}
		case *parse.WithNode:
			pipe(x.Pipe)
			walk(x.List)
			if x.ElseList != nil {
				walk(x.ElseList)
			}
		case *parse.RangeNode:
			pipe(x.Pipe)
			if x.ElseList != nil {
				walk(x.ElseList)
			}
		case *parse.TemplateNode:
			pipe(x.Pipe)
		}
	}
	if l != nil {
		for _, c := range l.Nodes {
			walk(c)
		}
	}
	return n
}

// costCmd is the pipeline command "fn n".
func costCmd(fn string, pos parse.Pos, n int) *parse.CommandNode {
	id := parse.NewIdentifier(fn).SetPos(pos)
	num := &parse.NumberNode{NodeType: parse.NodeNumber, Pos: pos, IsInt: true, Int64: int64(n), Text: strconv.Itoa(n)}
	return &parse.CommandNode{NodeType: parse.NodeCommand, Pos: pos, Args: []parse.Node{id, num}}
}

// Fields returns the top-level fields the prompt reads, sorted: the first
// identifier of every field chain evaluated against the record itself
// (.text, $.text, .meta.title → meta, index . "x" → x), not those inside
// range or with, where dot is something else. It returns nil when the prompt
// does not parse.
func (a *Action) Fields() []string {
	cp, err := a.compiled()
	if err != nil {
		return nil
	}
	if len(a.Images)+len(a.Documents) > 0 {
		return a.withPartFields(cp.fields) // multimodal.go
	}
	return slices.Clone(cp.fields)
}

// Render executes the prompt over data (the record's fields and the outputs
// of earlier actions, keyed by action name). Its errors are *retry.Error of
// class programming, so they dead-letter at once; a field the data lacks
// wraps ErrMissingField and names the field. A record the prompt cannot be
// rendered over within MaxPromptBytes, MaxBuiltBytes and MaxTemplateSteps
// gets a *retry.Error of class invalid_request wrapping ErrPromptTooLarge or
// ErrRenderTooLong (both match ErrBadInput).
func (a *Action) Render(data map[string]any) (string, error) {
	cp, err := a.compiled()
	if err != nil {
		return "", a.templateError(fmt.Sprintf("prompt does not parse: %v", err), err)
	}
	return a.execute(cp, "prompt", data)
}

// execute renders one of a's templates (what names it in errors: prompt,
// images[0], …) with Render's errors.
func (a *Action) execute(cp *compiledPrompt, what string, data map[string]any) (string, error) {
	for _, f := range cp.fields {
		if _, ok := data[f]; !ok {
			return "", a.templateError(
				fmt.Sprintf("%s reads field %q, which the record does not have (%s)", what, f, describeKeys(data)),
				fmt.Errorf("%w %q", ErrMissingField, f))
		}
	}
	out, err := cp.execute(data)
	if err != nil {
		if m := missingKeyRE.FindStringSubmatch(err.Error()); m != nil {
			return "", a.templateError(fmt.Sprintf("%s reads %s: no field %q", what, m[1], m[2]),
				fmt.Errorf("%w %q: %w", ErrMissingField, m[2], err))
		}
		if errors.Is(err, ErrBadInput) {
			return "", &retry.Error{Class: retry.ClassInvalidRequest, TypeName: badInputTypeName,
				Message: "action " + a.Name + ": " + what + ": " + boundReason(err), Err: err}
		}
		return "", a.templateError(fmt.Sprintf("%s: %v", what, err), err)
	}
	return out, nil
}

// badInputTypeName is the diagnostic type name of a record that cannot be
// rendered within the bounds.
const badInputTypeName = "BadInputError"

// boundReason is the end of a bound's error: what was passed, without
// text/template's location prefix, which names our step function.
func boundReason(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "error calling "); i >= 0 {
		if j := strings.Index(msg[i:], ": "); j >= 0 {
			return msg[i+j+2:]
		}
	}
	return msg
}

var missingKeyRE = regexp.MustCompile(`at <([^>]*)>: map has no entry for key "([^"]*)"`)

func (a *Action) compiled() (*compiledPrompt, error) {
	if a.prompt != nil {
		return a.prompt, nil
	}
	// An Action built by hand rather than by Parse or Decode: compile on each
	// call instead of caching, so concurrent Renders never race.
	return compilePrompt(a.Name, a.Prompt)
}

func (a *Action) templateError(msg string, err error) error {
	return &retry.Error{Class: retry.ClassProgramming, TypeName: templateTypeName,
		Message: "action " + a.Name + ": " + msg, Err: err}
}

func describeKeys(data map[string]any) string {
	if len(data) == 0 {
		return "it has no fields"
	}
	keys := slices.Sorted(maps.Keys(data))
	const most = 12
	if len(keys) > most {
		return fmt.Sprintf("it has %s, … (%d in all)", strings.Join(keys[:most], ", "), len(keys))
	}
	return "it has " + strings.Join(keys, ", ")
}

// templateRefs walks the parse tree of t and collects every field chain
// evaluated in the top-level data context (.meta.title → [meta title]),
// with the template line it is on, in the order they appear.
func templateRefs(t *template.Template) []Ref {
	var refs []Ref
	visited := map[string]bool{}
	add := func(tr *parse.Tree, n parse.Node, path ...string) {
		if len(path) == 0 || path[0] == "" {
			return
		}
		line := 1
		if tr != nil {
			if loc, _ := tr.ErrorContext(n); loc != "" {
				if i := strings.LastIndexByte(loc, ':'); i > 0 {
					if j := strings.LastIndexByte(loc[:i], ':'); j >= 0 {
						line, _ = strconv.Atoi(loc[j+1 : i])
					}
				}
			}
		}
		refs = append(refs, Ref{Path: slices.Clone(path), Line: line})
	}
	tree := t.Tree
	// dot: "." is the top-level data here; dollar: "$" is.
	var walk func(n parse.Node, dot, dollar bool)
	var pipe func(p *parse.PipeNode, dot, dollar bool)
	arg := func(n parse.Node, dot, dollar bool) {
		switch n := n.(type) {
		case *parse.FieldNode:
			if dot {
				add(tree, n, n.Ident...)
			}
		case *parse.VariableNode:
			if dollar && n.Ident[0] == "$" && len(n.Ident) > 1 {
				add(tree, n, n.Ident[1:]...)
			}
		case *parse.ChainNode:
			if p, ok := n.Node.(*parse.PipeNode); ok {
				pipe(p, dot, dollar)
			}
		case *parse.PipeNode:
			pipe(n, dot, dollar)
		}
	}
	isTop := func(n parse.Node, dot, dollar bool) bool {
		switch n := n.(type) {
		case *parse.DotNode:
			return dot
		case *parse.VariableNode:
			return dollar && len(n.Ident) == 1 && n.Ident[0] == "$"
		}
		return false
	}
	pipe = func(p *parse.PipeNode, dot, dollar bool) {
		if p == nil {
			return
		}
		for _, c := range p.Cmds {
			// index . "name" reads a field whose name is no identifier
			// (an action called extract-title, say).
			if len(c.Args) >= 3 {
				if id, ok := c.Args[0].(*parse.IdentifierNode); ok && id.Ident == "index" && isTop(c.Args[1], dot, dollar) {
					if s, ok := c.Args[2].(*parse.StringNode); ok {
						add(tree, s, s.Text)
					}
				}
			}
			for _, a := range c.Args {
				arg(a, dot, dollar)
			}
		}
	}
	walk = func(n parse.Node, dot, dollar bool) {
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c, dot, dollar)
			}
		case *parse.ActionNode:
			pipe(n.Pipe, dot, dollar)
		case *parse.IfNode:
			pipe(n.Pipe, dot, dollar)
			walk(n.List, dot, dollar)
			walk(n.ElseList, dot, dollar)
		case *parse.RangeNode:
			pipe(n.Pipe, dot, dollar)
			walk(n.List, false, dollar)
			walk(n.ElseList, dot, dollar)
		case *parse.WithNode:
			pipe(n.Pipe, dot, dollar)
			walk(n.List, false, dollar)
			walk(n.ElseList, dot, dollar)
		case *parse.TemplateNode:
			pipe(n.Pipe, dot, dollar)
			// {{template "x" .}} runs x over the top-level data; with other
			// data, x's dot and $ are that data.
			if n.Pipe != nil && len(n.Pipe.Cmds) == 1 && len(n.Pipe.Cmds[0].Args) == 1 &&
				isTop(n.Pipe.Cmds[0].Args[0], dot, dollar) && !visited[n.Name] {
				visited[n.Name] = true
				if sub := t.Lookup(n.Name); sub != nil && sub.Tree != nil {
					outer := tree
					tree = sub.Tree
					walk(sub.Tree.Root, true, true)
					tree = outer
				}
			}
		}
	}
	if t.Tree != nil {
		walk(t.Tree.Root, true, true)
	}
	return refs
}

// refFields is the sorted, distinct first identifiers of refs.
func refFields(refs []Ref) []string {
	seen := map[string]bool{}
	for _, r := range refs {
		seen[r.Path[0]] = true
	}
	return slices.Sorted(maps.Keys(seen))
}
