package workflow

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Ref is one field chain a prompt reads from its data: .classify.sentiment
// is Path [classify sentiment]. Line is the line of the workflow file it is
// on (0 when the workflow did not come from a file).
type Ref struct {
	Path []string
	Line int
	// Field is the template it is in besides the prompt (images[0],
	// documents[1]); "" for the prompt (an embed action's input).
	Field string
}

// String renders the reference as the template wrote it: .classify.sentiment.
func (r Ref) String() string { return "." + strings.Join(r.Path, ".") }

// Refs returns the field chains the prompt reads from the top-level data
// (see Fields), in the order they appear; nil when the prompt does not parse.
func (a *Action) Refs() []Ref {
	cp, err := a.compiled()
	if err != nil {
		return nil
	}
	out := make([]Ref, len(cp.refs))
	for i, r := range cp.refs {
		out[i] = Ref{Path: slices.Clone(r.Path)}
		if cp.line > 0 {
			out[i].Line = cp.line + r.Line - 1
		}
	}
	return append(out, a.partRefs()...) // multimodal.go
}

// RecordFields returns the fields the prompt of w's action i reads from the
// record itself, sorted: its Fields less the names of the actions before it,
// whose outputs the prompt sees under their names.
func (w *Workflow) RecordFields(i int) []string {
	var out []string
	for _, f := range w.Actions[i].Fields() {
		if _, j := w.Action(f); j < 0 || j >= i {
			out = append(out, f)
		}
	}
	return out
}

// CheckRefs checks every prompt's references against the pipeline, before
// anything runs: each must name a field of the records (fields: every
// top-level field seen in the input) or an action before it, and a field
// of an earlier action's output must be one that output can have (a
// property of its expect: schema; none at all for a text output). It
// returns an *Error for each reference that does not, at its line, with the
// closest name; nil when all hold. With fields nil (the records are not
// known) only the references into earlier outputs are checked.
func (w *Workflow) CheckRefs(fields map[string]bool) error {
	return joinErrors(w.eachRef(func(i int, r Ref) string { return w.checkRef(i, r, fields) }))
}

// Suspects returns the references that name no earlier action but one
// close to it (.clasify for classify): typos, unless every record has a
// field of that name. For a check without the records (jetpool validate).
func (w *Workflow) Suspects() []*Error {
	return w.eachRef(func(i int, r Ref) string {
		name := r.Path[0]
		if _, j := w.Action(name); j >= 0 && j < i {
			return ""
		}
		var earlier []string
		for _, e := range w.Actions[:i] {
			earlier = append(earlier, e.Name)
		}
		s := suggest(name, earlier)
		if len(earlier) == 0 || !strings.HasPrefix(s, " (did you mean") {
			return ""
		}
		return fmt.Sprintf("reads %s: no earlier action is called %q%s; a typo unless every record has a field %q", r, name, s, name)
	})
}

// eachRef calls check with every reference of every prompt and returns an
// *Error at its line for each message it returns (once per prompt).
func (w *Workflow) eachRef(check func(i int, r Ref) string) []*Error {
	var errs []*Error
	for i, a := range w.Actions {
		seen := map[string]bool{}
		for _, r := range a.Refs() {
			msg := check(i, r)
			if msg == "" || seen[msg] {
				continue
			}
			seen[msg] = true
			errs = append(errs, &Error{File: w.File, Line: cmp.Or(r.Line, a.Line),
				Field: fmt.Sprintf("actions[%d].%s", i, a.refField(r)), Msg: msg})
		}
	}
	slices.SortStableFunc(errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	return errs
}

// checkRef explains what is wrong with r in the prompt of action i, or
// returns "".
func (w *Workflow) checkRef(i int, r Ref, fields map[string]bool) string {
	name := r.Path[0]
	src, j := w.Action(name)
	switch {
	case j >= 0 && j < i:
		return outputRef(src, r)
	case fields == nil || fields[name]:
		return ""
	case j == i:
		return fmt.Sprintf("reads %s: that is this action's own name, and no record has a field %q (an action sees the outputs of the actions before it)", r, name)
	case j > i:
		return fmt.Sprintf("reads %s: action %s runs after this one, and no record has a field %q", r, name, name)
	}
	known := slices.Sorted(maps.Keys(fields))
	var earlier []string
	for _, e := range w.Actions[:i] {
		earlier = append(earlier, e.Name)
	}
	return fmt.Sprintf("reads %s: no record field and no earlier action is called %q%s", r, name,
		closest(name, earlier, known))
}

// outputRef checks a reference into the output of an earlier action src.
func outputRef(src *Action, r Ref) string {
	if len(r.Path) < 2 {
		return ""
	}
	field := r.Path[1]
	if msg, decided := moreOutputRef(src, r); decided { // multimodal.go: tools' and embed actions' outputs
		return msg
	}
	e := src.Expect
	if e == nil || e.Format == FormatText {
		return fmt.Sprintf("reads %s: the output of action %s is text (it has no expect: block asking for JSON), so it has no field %q", r, src.Name, field)
	}
	props, ok := e.Schema["properties"].(map[string]any)
	if !ok {
		return "" // JSON of any shape
	}
	if extra, set := e.Schema["additionalProperties"]; set && extra != false {
		return "" // the schema says which fields it names, and allows others
	}
	if _, ok := props[field]; ok {
		return ""
	}
	names := slices.Sorted(maps.Keys(props))
	return fmt.Sprintf("reads %s: the expect: schema of action %s has no property %q%s", r, src.Name, field, closest(field, nil, names))
}

// closest names the nearest of the earlier actions and fields to name, or
// lists them (a few).
func closest(name string, actions, fields []string) string {
	all := append(slices.Clone(actions), fields...)
	if s := suggest(name, all); strings.HasPrefix(s, " (did you mean") {
		return s
	}
	var parts []string
	if len(fields) > 0 {
		parts = append(parts, "fields: "+listSome(fields))
	}
	if len(actions) > 0 {
		parts = append(parts, "earlier actions: "+listSome(actions))
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

func listSome(s []string) string {
	const most = 12
	if len(s) > most {
		return fmt.Sprintf("%s, … (%d in all)", strings.Join(s[:most], ", "), len(s))
	}
	return strings.Join(s, ", ")
}

// Definition is the workflow as Encode renders it, less where it was
// written (the file and its line numbers): two workflows with equal
// definitions run the same way. A job's revisions are compared by it.
func (w *Workflow) Definition() ([]byte, error) {
	c := *w
	c.File = ""
	c.Actions = make([]*Action, len(w.Actions))
	for i, a := range w.Actions {
		ac := *a
		ac.Line = 0
		if a.Expect != nil {
			e := *a.Expect
			e.SchemaLine, e.SchemaFile = 0, ""
			ac.Expect = &e
		}
		c.Actions[i] = &ac
	}
	return c.Encode()
}
