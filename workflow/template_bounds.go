package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
)

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
