package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
		if m := missingKeyRE().FindStringSubmatch(err.Error()); m != nil {
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

var missingKeyRE = lazyRegexp(`at <([^>]*)>: map has no entry for key "([^"]*)"`)

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
