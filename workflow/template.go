package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
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

// templateTypeName is the diagnostic type name of Render's errors.
const templateTypeName = "TemplateError"

func compilePrompt(name, text string) (*compiledPrompt, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(TemplateFuncs).Parse(text)
	if err != nil {
		return nil, err
	}
	return &compiledPrompt{tmpl: t, fields: templateFields(t)}, nil
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
	return slices.Clone(cp.fields)
}

// Render executes the prompt over data (the record's fields and the outputs
// of earlier actions, keyed by action name). Its errors are *retry.Error of
// class programming, so they dead-letter at once; a field the data lacks
// wraps ErrMissingField and names the field.
func (a *Action) Render(data map[string]any) (string, error) {
	cp, err := a.compiled()
	if err != nil {
		return "", a.templateError(fmt.Sprintf("prompt does not parse: %v", err), err)
	}
	for _, f := range cp.fields {
		if _, ok := data[f]; !ok {
			return "", a.templateError(
				fmt.Sprintf("prompt reads field %q, which the record does not have (%s)", f, describeKeys(data)),
				fmt.Errorf("%w %q", ErrMissingField, f))
		}
	}
	var b strings.Builder
	if err := cp.tmpl.Execute(&b, data); err != nil {
		if m := missingKeyRE.FindStringSubmatch(err.Error()); m != nil {
			return "", a.templateError(fmt.Sprintf("prompt reads %s: no field %q", m[1], m[2]),
				fmt.Errorf("%w %q: %w", ErrMissingField, m[2], err))
		}
		return "", a.templateError(fmt.Sprintf("prompt: %v", err), err)
	}
	return b.String(), nil
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

// templateFields walks the parse tree of t and collects the first identifier
// of every field chain evaluated in the top-level data context.
func templateFields(t *template.Template) []string {
	w := &fieldWalker{t: t, seen: map[string]bool{}, visited: map[string]bool{}}
	if t.Tree != nil {
		w.walk(t.Tree.Root, true, true)
	}
	return slices.Sorted(maps.Keys(w.seen))
}

// fieldWalker collects the fields a template reads from its top-level data.
// Its methods take dot and dollar: whether "." and "$" are that data there
// (inside range and with, "." is something else).
type fieldWalker struct {
	t       *template.Template
	seen    map[string]bool // the fields read
	visited map[string]bool // the templates walked through {{template}}
}

func (w *fieldWalker) add(s string) {
	if s != "" {
		w.seen[s] = true
	}
}

func (w *fieldWalker) walk(n parse.Node, dot, dollar bool) {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return
		}
		for _, c := range n.Nodes {
			w.walk(c, dot, dollar)
		}
	case *parse.ActionNode:
		w.pipe(n.Pipe, dot, dollar)
	case *parse.IfNode:
		w.branch(&n.BranchNode, dot, dollar, dot)
	case *parse.RangeNode:
		w.branch(&n.BranchNode, dot, dollar, false) // "." is each element
	case *parse.WithNode:
		w.branch(&n.BranchNode, dot, dollar, false) // "." is the pipeline's value
	case *parse.TemplateNode:
		w.pipe(n.Pipe, dot, dollar)
		// {{template "x" .}} runs x over the top-level data; with other
		// data, x's dot and $ are that data.
		if n.Pipe != nil && len(n.Pipe.Cmds) == 1 && len(n.Pipe.Cmds[0].Args) == 1 &&
			w.isTop(n.Pipe.Cmds[0].Args[0], dot, dollar) && !w.visited[n.Name] {
			w.visited[n.Name] = true
			if sub := w.t.Lookup(n.Name); sub != nil && sub.Tree != nil {
				w.walk(sub.Tree.Root, true, true)
			}
		}
	}
}

// branch walks an if, range or with: its pipeline, its list (where "." is
// the top-level data when listDot) and its else list.
func (w *fieldWalker) branch(n *parse.BranchNode, dot, dollar, listDot bool) {
	w.pipe(n.Pipe, dot, dollar)
	w.walk(n.List, listDot, dollar)
	w.walk(n.ElseList, dot, dollar)
}

func (w *fieldWalker) pipe(p *parse.PipeNode, dot, dollar bool) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		// index . "name" reads a field whose name is no identifier
		// (an action called extract-title, say).
		if len(c.Args) >= 3 {
			if id, ok := c.Args[0].(*parse.IdentifierNode); ok && id.Ident == "index" && w.isTop(c.Args[1], dot, dollar) {
				if s, ok := c.Args[2].(*parse.StringNode); ok {
					w.add(s.Text)
				}
			}
		}
		for _, a := range c.Args {
			w.arg(a, dot, dollar)
		}
	}
}

func (w *fieldWalker) arg(n parse.Node, dot, dollar bool) {
	switch n := n.(type) {
	case *parse.FieldNode:
		if dot {
			w.add(n.Ident[0])
		}
	case *parse.VariableNode:
		if dollar && n.Ident[0] == "$" && len(n.Ident) > 1 {
			w.add(n.Ident[1])
		}
	case *parse.ChainNode:
		if p, ok := n.Node.(*parse.PipeNode); ok {
			w.pipe(p, dot, dollar)
		}
	case *parse.PipeNode:
		w.pipe(n, dot, dollar)
	}
}

// isTop reports whether n is the top-level data: "." or "$" where they are.
func (w *fieldWalker) isTop(n parse.Node, dot, dollar bool) bool {
	switch n := n.(type) {
	case *parse.DotNode:
		return dot
	case *parse.VariableNode:
		return dollar && len(n.Ident) == 1 && n.Ident[0] == "$"
	}
	return false
}
