package workflow

import (
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"text/template/parse"
)

// templateRefs walks the parse tree of t and collects every field chain
// evaluated in the top-level data context (.meta.title → [meta title]),
// with the template line it is on, in the order they appear.
func templateRefs(t *template.Template) []Ref {
	w := &refWalker{t: t, tree: t.Tree, visited: map[string]bool{}}
	if t.Tree != nil {
		w.walk(t.Tree.Root, true, true)
	}
	return w.refs
}

// refWalker is templateRefs' state: tree is the tree being walked (a
// {{template}} call switches to the called template's tree, for lines).
// In its methods, dot says "." is the top-level data; dollar says "$" is.
type refWalker struct {
	t       *template.Template
	tree    *parse.Tree
	visited map[string]bool
	refs    []Ref
}

func (w *refWalker) add(n parse.Node, path ...string) {
	if len(path) == 0 || path[0] == "" {
		return
	}
	w.refs = append(w.refs, Ref{Path: slices.Clone(path), Line: treeLine(w.tree, n)})
}

// treeLine is n's line in tr, 1 when it cannot be told.
func treeLine(tr *parse.Tree, n parse.Node) int {
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
	return line
}

func (w *refWalker) arg(n parse.Node, dot, dollar bool) {
	switch n := n.(type) {
	case *parse.FieldNode:
		if dot {
			w.add(n, n.Ident...)
		}
	case *parse.VariableNode:
		if dollar && n.Ident[0] == "$" && len(n.Ident) > 1 {
			w.add(n, n.Ident[1:]...)
		}
	case *parse.ChainNode:
		if p, ok := n.Node.(*parse.PipeNode); ok {
			w.pipe(p, dot, dollar)
		}
	case *parse.PipeNode:
		w.pipe(n, dot, dollar)
	}
}

func isTop(n parse.Node, dot, dollar bool) bool {
	switch n := n.(type) {
	case *parse.DotNode:
		return dot
	case *parse.VariableNode:
		return dollar && len(n.Ident) == 1 && n.Ident[0] == "$"
	}
	return false
}

func (w *refWalker) pipe(p *parse.PipeNode, dot, dollar bool) {
	if p == nil {
		return
	}
	for _, c := range p.Cmds {
		// index . "name" reads a field whose name is no identifier
		// (an action called extract-title, say).
		if len(c.Args) >= 3 {
			if id, ok := c.Args[0].(*parse.IdentifierNode); ok && id.Ident == "index" && isTop(c.Args[1], dot, dollar) {
				if s, ok := c.Args[2].(*parse.StringNode); ok {
					w.add(s, s.Text)
				}
			}
		}
		for _, a := range c.Args {
			w.arg(a, dot, dollar)
		}
	}
}

func (w *refWalker) walk(n parse.Node, dot, dollar bool) {
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
		w.pipe(n.Pipe, dot, dollar)
		w.walk(n.List, dot, dollar)
		w.walk(n.ElseList, dot, dollar)
	case *parse.RangeNode:
		w.pipe(n.Pipe, dot, dollar)
		w.walk(n.List, false, dollar)
		w.walk(n.ElseList, dot, dollar)
	case *parse.WithNode:
		w.pipe(n.Pipe, dot, dollar)
		w.walk(n.List, false, dollar)
		w.walk(n.ElseList, dot, dollar)
	case *parse.TemplateNode:
		w.pipe(n.Pipe, dot, dollar)
		w.template(n, dot, dollar)
	}
}

// template follows {{template "x" .}}, which runs x over the top-level
// data; with other data, x's dot and $ are that data.
func (w *refWalker) template(n *parse.TemplateNode, dot, dollar bool) {
	if n.Pipe != nil && len(n.Pipe.Cmds) == 1 && len(n.Pipe.Cmds[0].Args) == 1 &&
		isTop(n.Pipe.Cmds[0].Args[0], dot, dollar) && !w.visited[n.Name] {
		w.visited[n.Name] = true
		if sub := w.t.Lookup(n.Name); sub != nil && sub.Tree != nil {
			outer := w.tree
			w.tree = sub.Tree
			w.walk(sub.Tree.Root, true, true)
			w.tree = outer
		}
	}
}

// refFields is the sorted, distinct first identifiers of refs.
func refFields(refs []Ref) []string {
	seen := map[string]bool{}
	for _, r := range refs {
		seen[r.Path[0]] = true
	}
	return slices.Sorted(maps.Keys(seen))
}
