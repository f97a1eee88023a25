package workflow

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/provider"
)

// An action's fields beyond a text prompt: images and documents,
// tools, prompt caching, and the embed kind.

// moreSpec is what an action (or defaults:, for cache) writes of them.
type moreSpec struct {
	kind, input, toolChoice opt[string]
	inputCompiled           *compiledPrompt
	images, documents       opt[[]partSpec]
	tools                   opt[[]provider.Tool]
	cache                   opt[[]string]
	embed                   opt[EmbedConfig]
}

// partSpec is one images: or documents: entry.
type partSpec struct {
	text     string
	compiled *compiledPrompt
}

var (
	toolNameRE = lazyRegexp(`^[A-Za-z0-9_-]{1,64}$`)
	schemeRE   = lazyRegexp(`^[A-Za-z][A-Za-z0-9+.-]*://`)
	// reservedToolPrefix names tools of jetpool's own (the structured
	// output of the anthropic adapter).
	reservedToolPrefix = "jetpool_"
)

// moreField parses one of the fields above into s.
func (p *parser) moreField(s *spec, name string, v field) {
	line := v.val.Line
	m := &s.more
	switch name {
	case "kind":
		if x, ok := p.oneOf(v, KindChat, KindEmbed); ok {
			m.kind = some(x, line)
		}
	case "input":
		if x, ok := p.str(v); ok {
			if strings.TrimSpace(x) == "" {
				p.errorf(line, v.path, "empty; an embed action needs the text to embed")
				return
			}
			m.input = some(x, line)
			m.inputCompiled = p.compileTemplate(cmp.Or(s.name.v, "input"), v)
		}
	case "images", "documents":
		if x, ok := p.partList(v); ok {
			if name == "images" {
				m.images = some(x, line)
			} else {
				m.documents = some(x, line)
			}
		}
	case "tools":
		if x, ok := p.tools(v); ok {
			m.tools = some(x, line)
		}
	case "tool_choice":
		if x, ok := p.str(v); ok {
			m.toolChoice = some(x, line)
		}
	case "cache":
		if x, ok := p.cacheList(v); ok {
			m.cache = some(x, line)
		}
	case "embed":
		if x, ok := p.embedConfig(v); ok {
			m.embed = some(x, line)
		}
	}
}

// partList parses a list of templates (a single one may stand alone).
func (p *parser) partList(f field) ([]partSpec, bool) {
	items := []*yaml.Node{f.val}
	if f.val.Kind == yaml.SequenceNode {
		items = f.val.Content
	}
	var out []partSpec
	ok := true
	for i, n := range items {
		n = deref(n)
		path := fmt.Sprintf("%s[%d]", f.path, i)
		if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
			p.errorf(n.Line, path, "want a template (a URL, a data: URL or a file path), got %s", describe(n))
			ok = false
			continue
		}
		if strings.TrimSpace(n.Value) == "" {
			p.errorf(n.Line, path, "empty; want a template (a URL, a data: URL or a file path)")
			ok = false
			continue
		}
		cp := p.compileTemplate(path, field{val: n, path: path})
		if cp == nil {
			ok = false
			continue
		}
		out = append(out, partSpec{text: n.Value, compiled: cp})
	}
	if len(items) == 0 {
		p.errorf(f.val.Line, f.path, "empty; leave the field out instead")
		ok = false
	}
	return out, ok
}

// tools parses a tools: list. An entry is {name, description, parameters}
// (parameters a JSON Schema, inline or the path of a file), or OpenAI's
// {type: function, function: {…}} around the same.
func (p *parser) tools(f field) ([]provider.Tool, bool) {
	if f.val.Kind != yaml.SequenceNode || len(f.val.Content) == 0 {
		p.errorf(f.val.Line, f.path, "want a list of tools ({name, description, parameters}), got %s", describe(f.val))
		return nil, false
	}
	before := len(p.errs)
	var out []provider.Tool
	first := map[string]int{}
	for i, n := range f.val.Content {
		path := fmt.Sprintf("%s[%d]", f.path, i)
		tf, ok := p.fields(n, path, "name", "description", "parameters", "type", "function")
		if !ok {
			continue
		}
		if fn, wrapped := tf["function"]; wrapped {
			if t, ok := tf["type"]; ok {
				p.oneOf(t, "function")
			}
			if tf, ok = p.fields(fn.val, fn.path, "name", "description", "parameters", "strict"); !ok {
				continue
			}
		} else if t, ok := tf["type"]; ok {
			p.errorf(t.key.Line, t.path, "only with function: (OpenAI's form); write name, description and parameters")
		}
		var t provider.Tool
		name, hasName := tf["name"]
		if !hasName {
			p.errorf(deref(n).Line, child(path, "name"), "missing; every tool needs a name")
		} else if x, ok := p.str(name); ok {
			switch {
			case !toolNameRE().MatchString(x):
				p.errorf(name.val.Line, name.path, "bad tool name %q (want 1-64 letters, digits, _ and -)", x)
			case strings.HasPrefix(x, reservedToolPrefix):
				p.errorf(name.val.Line, name.path, "tool names starting with %s are jetpool's own", reservedToolPrefix)
			case first[x] > 0:
				p.errorf(name.val.Line, name.path, "duplicate tool %q (first at line %d)", x, first[x])
			default:
				first[x] = name.val.Line
				t.Name = x
			}
		}
		if v, ok := tf["description"]; ok {
			t.Description, _ = p.str(v)
		}
		if v, ok := tf["parameters"]; ok {
			t.Parameters = p.jsonSchema(v)
		}
		out = append(out, t)
	}
	return out, len(p.errs) == before
}

// jsonSchema reads a schema written inline or as the path of a file, and
// checks it (SchemaCheck).
func (p *parser) jsonSchema(f field) map[string]any {
	var schema map[string]any
	switch n := f.val; {
	case n.Kind == yaml.MappingNode:
		x, err := toJSON(n)
		if err != nil {
			p.nodeError(err, f)
			return nil
		}
		schema = x.(map[string]any)
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		schema = p.schemaFile(f)
	default:
		p.errorf(n.Line, f.path, "want a mapping, or the path of a JSON or YAML file, got %s", describe(n))
	}
	if schema != nil && SchemaCheck != nil {
		if err := SchemaCheck(schema); err != nil {
			p.errorf(f.val.Line, f.path, "%v", err)
			return nil
		}
	}
	return schema
}

// cacheList parses cache: one of its values, or a list of them.
func (p *parser) cacheList(f field) ([]string, bool) {
	items := []*yaml.Node{f.val}
	if f.val.Kind == yaml.SequenceNode {
		items = f.val.Content
	}
	var out []string
	ok := true
	for i, n := range items {
		path := f.path
		if f.val.Kind == yaml.SequenceNode {
			path = fmt.Sprintf("%s[%d]", f.path, i)
		}
		x, good := p.oneOf(field{val: deref(n), path: path}, CacheSystem, CacheTools, CacheImages, CacheDocuments)
		if good && !slices.Contains(out, x) {
			out = append(out, x)
		}
		ok = ok && good
	}
	return out, ok
}

// embedConfig parses an embed: block.
func (p *parser) embedConfig(f field) (EmbedConfig, bool) {
	before := len(p.errs)
	var e EmbedConfig
	ef, ok := p.fields(f.val, f.path, "batch_size", "max_wait", "format")
	if !ok {
		return e, false
	}
	if v, ok := ef["batch_size"]; ok {
		e.BatchSize, _ = p.intIn(v, 1, provider.OpenAIEmbedMaxInputs)
	}
	if v, ok := ef["max_wait"]; ok {
		if d, ok := p.duration(v); ok {
			if d > EmbedMaxWaitMax {
				p.errorf(v.val.Line, v.path, "%s is more than %s (a worker slot waits that long)", d, EmbedMaxWaitMax)
			}
			e.MaxWait = d
		}
	}
	if v, ok := ef["format"]; ok {
		e.Format, _ = p.oneOf(v, EmbedFormatFloat, EmbedFormatBase64)
	}
	return e, len(p.errs) == before
}

// notForEmbed are the fields an embed action has no use for.
var notForEmbed = []string{"prompt", "system", "json", "stream", "expect", "tools", "tool_choice", "images", "documents",
	"cache", "on_truncated", "on_filtered"}

// resolveMore sets a's fields above from s and the defaults d, and checks
// them against the action's kind and provider (cfg, when known).
func (p *parser) resolveMore(s, d *spec, a *Action, cfg provider.Config, known bool) {
	m := &s.more
	a.Kind = cmp.Or(m.kind.v, KindDefault)
	at := func(o opt[string], name string) (int, string) { return cmp.Or(o.line, s.line), child(s.path, name) }
	if a.Kind == KindEmbed {
		p.resolveEmbed(s, a, cfg, known)
		return
	}
	if m.input.set {
		p.errorf(m.input.line, child(s.path, "input"), "only for kind: embed (a chat action reads prompt:)")
	}
	if m.embed.set {
		p.errorf(m.embed.line, child(s.path, "embed"), "only for kind: embed")
	}
	for _, ps := range m.images.v {
		a.Images = append(a.Images, ps.text)
		a.parts = append(a.parts, ps.compiled)
	}
	for _, ps := range m.documents.v {
		a.Documents = append(a.Documents, ps.text)
		a.parts = append(a.parts, ps.compiled)
	}
	a.Tools = m.tools.v
	a.ToolChoice = m.toolChoice.v
	if c := m.toolChoice; c.set {
		names := make([]string, len(a.Tools))
		for i, t := range a.Tools {
			names[i] = t.Name
		}
		line, path := at(c, "tool_choice")
		switch {
		case len(a.Tools) == 0:
			p.errorf(line, path, "needs tools:")
		case c.v == provider.ToolChoiceAuto || c.v == provider.ToolChoiceNone || c.v == provider.ToolChoiceRequired:
		case !slices.Contains(names, c.v):
			p.errorf(line, path, "%q is none of auto, none, required and the tools (%s)%s", c.v, strings.Join(names, ", "), suggest(c.v, names))
		}
	}
	for _, k := range []string{"tools", "tool_choice", "functions", "function_call"} {
		if _, set := s.params.v[k]; set {
			p.errorf(lineOf(s.node, "params."+k), child(s.path, "params."+k), "write %s as the action's tools: and tool_choice: fields, whose answers keep their tool calls (output.tool_calls)", k)
		} else if _, set := d.params.v[k]; set && a.Index == 0 { // once, not for every action
			p.errorf(lineOf(d.node, "params."+k), child(d.path, "params."+k), "write %s as an action's tools: and tool_choice: fields, whose answers keep their tool calls (output.tool_calls)", k)
		}
	}
	cache := pick(m.cache, d.more.cache)
	a.Cache = cache.v
	if cache.set {
		for _, c := range a.Cache {
			missing := (c == CacheTools && len(a.Tools) == 0) || (c == CacheImages && len(a.Images) == 0) ||
				(c == CacheDocuments && len(a.Documents) == 0) || (c == CacheSystem && a.System == "")
			if missing && m.cache.set { // an inherited list may name what this action lacks
				p.errorf(cache.line, child(s.path, "cache"), "%s: this action has none to cache", c)
			}
		}
	}
}

// resolveEmbed checks an embed action: an input instead of a prompt, a
// provider with an embeddings API, none of the chat fields of its own.
func (p *parser) resolveEmbed(s *spec, a *Action, cfg provider.Config, known bool) {
	m := &s.more
	if !m.input.set && !s.written["input"] {
		p.errorf(s.line, child(s.path, "input"), "missing; an embed action needs the text to embed (a template)")
	}
	a.Prompt, a.prompt = m.input.v, m.inputCompiled
	for _, f := range notForEmbed {
		if s.written[f] && !p.encoded { // the encoded form spells out stream and json
			p.errorf(lineOf(s.node, f), child(s.path, f), "not used by an embed action (it embeds its input:)")
		}
	}
	// Inherited chat settings are unused, as batch settings are online.
	a.System, a.JSON, a.Stream, a.Expect, a.OnTruncated, a.OnFiltered = "", false, false, nil, "", ""
	limit := provider.EmbedMaxInputs(cfg.Kind)
	if known && limit == 0 {
		p.errorf(cmp.Or(m.kind.line, s.line), child(s.path, "kind"), "provider %s (kind %s) has no embeddings API: use one of kind openai (or an OpenAI-compatible endpoint), gemini or sim",
			a.Provider, cfg.Kind)
	}
	e := m.embed.v
	a.Embed = EmbedConfig{BatchSize: cmp.Or(e.BatchSize, EmbedBatchSizeDefault), MaxWait: cmp.Or(e.MaxWait, EmbedMaxWaitDefault),
		Format: cmp.Or(e.Format, EmbedFormatDefault)}
	if limit > 0 && a.Embed.BatchSize > limit {
		if e.BatchSize > 0 {
			p.errorf(m.embed.line, child(s.path, "embed.batch_size"), "%d is more than provider %s (kind %s) takes in one request (%d)",
				e.BatchSize, a.Provider, cfg.Kind, limit)
		}
		a.Embed.BatchSize = limit
	}
	if a.Mode == ModeBatch && known && cfg.Kind != provider.KindOpenAI {
		p.errorf(cmp.Or(s.mode.line, s.line), child(s.path, "mode"), "an embed action runs in batch mode only on kind openai (OpenAI Batch); provider %s is kind %s",
			a.Provider, cfg.Kind)
	}
}

// compiledParts are a's Images then Documents, compiled.
func (a *Action) compiledParts() ([]*compiledPrompt, error) {
	if a.parts != nil || len(a.Images)+len(a.Documents) == 0 {
		return a.parts, nil
	}
	// An Action built by hand (see compiled).
	var out []*compiledPrompt
	for i, t := range slices.Concat(a.Images, a.Documents) {
		cp, err := compilePrompt(partField(a, i), t)
		if err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, nil
}

// partField names the i-th of a's parts (images first): images[0], documents[1].
func partField(a *Action, i int) string {
	if i < len(a.Images) {
		return fmt.Sprintf("images[%d]", i)
	}
	return fmt.Sprintf("documents[%d]", i-len(a.Images))
}

// partRefs are the references of a's images and documents.
func (a *Action) partRefs() []Ref {
	parts, err := a.compiledParts()
	if err != nil {
		return nil
	}
	var out []Ref
	for i, cp := range parts {
		for _, r := range cp.refs {
			ref := Ref{Path: slices.Clone(r.Path), Field: partField(a, i)}
			if cp.line > 0 {
				ref.Line = cp.line + r.Line - 1
			}
			out = append(out, ref)
		}
	}
	return out
}

// withPartFields is fields with those a's images and documents read, sorted.
func (a *Action) withPartFields(fields []string) []string {
	out := slices.Clone(fields)
	parts, _ := a.compiledParts()
	for _, cp := range parts {
		out = append(out, cp.fields...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// refField is the field of a that r is in.
func (a *Action) refField(r Ref) string {
	switch {
	case r.Field != "":
		return r.Field
	case a.IsEmbed():
		return "input"
	}
	return "prompt"
}

// RenderedPart is one images: or documents: entry rendered for a record.
type RenderedPart struct {
	Type  string // provider.PartImage or provider.PartDocument
	Field string // images[0], documents[1]: for errors
	// Value is what it rendered to, trimmed: a URL, a data: URL or a
	// file path (see PartSource).
	Value string
}

// RenderParts renders a's images and documents over data (as Render does
// the prompt, with its errors); an entry that renders empty is left out.
func (a *Action) RenderParts(data map[string]any) ([]RenderedPart, error) {
	parts, err := a.compiledParts()
	if err != nil {
		return nil, a.templateError(fmt.Sprintf("images or documents do not parse: %v", err), err)
	}
	var out []RenderedPart
	for i, cp := range parts {
		field := partField(a, i)
		v, err := a.execute(cp, field, data)
		if err != nil {
			return nil, err
		}
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		typ := provider.PartImage
		if i >= len(a.Images) {
			typ = provider.PartDocument
		}
		out = append(out, RenderedPart{Type: typ, Field: field, Value: v})
	}
	return out, nil
}

// Sources of a RenderedPart's value.
const (
	SourceURL  = "url"  // an http(s) URL, sent as it is
	SourceData = "data" // a data: URL
	SourceFile = "file" // a file path, read by the dispatcher into the record
)

// PartSource says what a rendered part is: an http(s) URL, a data: URL, or
// (anything else) a file path; a URL of another scheme is an error.
func PartSource(v string) (string, error) {
	switch {
	case strings.HasPrefix(v, "data:"):
		return SourceData, nil
	case strings.HasPrefix(v, "https://"), strings.HasPrefix(v, "http://"):
		return SourceURL, nil
	case schemeRE().MatchString(v):
		scheme, _, _ := strings.Cut(v, "://")
		return "", fmt.Errorf("a %s:// URL: want an http(s) URL, a data: URL or a file path", scheme)
	}
	return SourceFile, nil
}

// RecordParts reports whether the images and documents of w's action i
// read only the record's fields (no earlier action's output), so the
// dispatcher can render them, and read the files they name.
func (w *Workflow) RecordParts(i int) bool {
	a := w.Actions[i]
	for _, r := range a.partRefs() {
		if _, j := w.Action(r.Path[0]); j >= 0 && j < i {
			return false
		}
	}
	return len(a.Images)+len(a.Documents) > 0
}

// moreOutputRef checks a reference into the output of a tools or embed
// action src (decided false: src is neither).
func moreOutputRef(src *Action, r Ref) (msg string, decided bool) {
	field := r.Path[1]
	switch {
	case src.IsEmbed():
		return fmt.Sprintf("reads %s: the output of action %s is a vector (kind embed), which has no field %q", r, src.Name, field), true
	case src.HasTools():
		if field == "text" || field == "tool_calls" {
			return "", true
		}
		return fmt.Sprintf("reads %s: the output of action %s (it has tools) is {text, tool_calls}, with no field %q%s",
			r, src.Name, field, suggest(field, []string{"text", "tool_calls"})), true
	}
	return "", false
}

// describeMore is what validate prints of a's fields above; kind is its
// provider's.
func describeMore(a *Action, kind string, row func(label, format string, args ...any)) {
	if a.IsEmbed() {
		row("embed", "input embedded, up to %d records a request (the first waits up to %s), vectors as %s",
			a.Embed.BatchSize, a.Embed.MaxWait, a.Embed.Format)
		return
	}
	if n, m := len(a.Images), len(a.Documents); n+m > 0 {
		row("parts", "%s, %s (URLs, data: URLs, or files the dispatcher reads into the record)",
			count(n, "image", "images"), count(m, "document", "documents"))
	}
	if len(a.Tools) > 0 {
		names := make([]string, len(a.Tools))
		for i, t := range a.Tools {
			names[i] = t.Name
		}
		row("tools", "%s, tool_choice %s; output {text, tool_calls}", strings.Join(names, ", "), cmp.Or(a.ToolChoice, "(provider default)"))
	}
	if how := structuredHow(a, kind); how != "" {
		row("structured", "%s", how)
	}
	if len(a.Cache) > 0 {
		note := ""
		if kind != provider.KindAnthropic && kind != provider.KindSim {
			note = fmt.Sprintf(" (no effect on kind %s, which caches long prefixes by itself)", kind)
		}
		row("cache", "%s%s", strings.Join(a.Cache, ", "), note)
	}
}

// structuredHow says how a's expect: schema reaches its provider (kind),
// "" when it has none to send.
func structuredHow(a *Action, kind string) string {
	e := a.Expect
	if e == nil || e.Schema == nil || len(a.Tools) > 0 {
		return ""
	}
	if _, set := a.Params["response_format"]; set && kind == provider.KindOpenAI {
		return "params.response_format (yours wins)"
	}
	switch kind {
	case provider.KindOpenAI:
		if provider.OpenAIStrict(e.Schema) {
			return "json_schema, strict"
		}
		return "json_schema, not strict (the schema is outside OpenAI's strict subset)"
	case provider.KindGemini:
		return "responseJsonSchema"
	case provider.KindAnthropic:
		if e.Schema["type"] == "object" {
			return "a forced tool whose input is the answer"
		}
		return "the instruction in the system prompt (the schema is not an object)"
	}
	return "" // the sim: it answers a schema by itself

}
