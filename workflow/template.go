package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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

// templateTypeName is the diagnostic type name of Render's errors.
const templateTypeName = "TemplateError"

func compilePrompt(name, text string) (*compiledPrompt, error) {
	t, err := template.New(name).Option("missingkey=error").Funcs(TemplateFuncs).Parse(text)
	if err != nil {
		return nil, err
	}
	refs := templateRefs(t)
	return &compiledPrompt{tmpl: t, fields: refFields(refs), refs: refs}, nil
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
