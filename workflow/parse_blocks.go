package workflow

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/retry"
)

// The blocks an action carries: retry:, expect: (with repair: and a schema
// file) and batch:.

func (p *parser) retry(f field) (retry.Policy, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		on, _ := p.boolean(f)
		if !on {
			return retry.Policy{}, true
		}
		return retry.Policy{Enabled: true}.WithDefaults(), true
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, f.path, "want a mapping, or false to turn retry off, got %s", describe(n))
		return retry.Policy{}, false
	}
	before := len(p.errs)
	rf, _ := p.fields(n, f.path, "enabled", "max_attempts", "backoff", "max_backoff", "budget", "on_exhausted", "redeliver", "max_wait")
	pol := retry.Policy{Enabled: true}
	if v, ok := rf["enabled"]; ok {
		pol.Enabled, _ = p.boolean(v)
	}
	if v, ok := rf["max_attempts"]; ok {
		pol.MaxAttempts, _ = p.intIn(v, retry.MaxAttemptsMin, retry.MaxAttemptsMax)
	}
	if v, ok := rf["backoff"]; ok {
		pol.Backoff, _ = p.duration(v)
	}
	if v, ok := rf["max_backoff"]; ok {
		pol.MaxBackoff, _ = p.duration(v)
	}
	if v, ok := rf["budget"]; ok {
		pol.Budget, _ = p.duration(v)
	}
	if v, ok := rf["on_exhausted"]; ok {
		pol.OnExhausted, _ = p.onExhausted(v)
	}
	if v, ok := rf["max_wait"]; ok {
		pol.MaxWait, _ = p.duration(v)
	}
	if v, ok := rf["redeliver"]; ok {
		if df, ok := p.fields(v.val, v.path, "max_deliveries", "backoff"); ok {
			if x, ok := df["max_deliveries"]; ok {
				pol.MaxDeliveries, _ = p.intIn(x, 1, retry.MaxDeliveriesMax)
			}
			if x, ok := df["backoff"]; ok {
				pol.RedeliverBackoff, _ = p.duration(x)
			}
		}
	}
	if len(p.errs) > before {
		return retry.Policy{}, false
	}
	// The policy's own rules, across fields (max_backoff below backoff, …).
	if err := pol.Validate(); err != nil {
		fes := fieldErrors(err)
		for _, fe := range fes {
			p.errorf(lineOf(n, fe.Field), child(f.path, fe.Field), "%s", fe.Msg)
		}
		if len(fes) == 0 {
			p.errorf(n.Line, f.path, "%v", err)
		}
		return retry.Policy{}, false
	}
	if !pol.Enabled {
		// Off: one call, one delivery. An explicit raise is kept, so
		// `{enabled: false, on_exhausted: raise}` fails the job at once.
		// max_wait bounds waiting, which is not retrying: it stays too.
		off := retry.Policy{MaxWait: pol.MaxWait}
		if pol.OnExhausted == retry.Raise {
			off.OnExhausted = retry.Raise
		}
		return off, true
	}
	return pol.WithDefaults(), true
}

// fieldErrors unpacks the *retry.FieldError values in err.
func fieldErrors(err error) []*retry.FieldError {
	var out []*retry.FieldError
	var fe *retry.FieldError
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			out = append(out, fieldErrors(e)...)
		}
	} else if errors.As(err, &fe) {
		out = append(out, fe)
	}
	return out
}

// lineOf returns the line of the value at a dotted path under mapping n,
// or n's line when there is none.
func lineOf(n *yaml.Node, dotted string) int {
	cur := n
	for name := range strings.SplitSeq(dotted, ".") {
		next := (*yaml.Node)(nil)
		if cur.Kind == yaml.MappingNode {
			for _, kv := range pairs(cur) {
				if kv[0].Value == name {
					next = deref(kv[1])
				}
			}
		}
		if next == nil {
			return cur.Line
		}
		cur = next
	}
	return cur.Line
}

func (p *parser) onExhausted(f field) (retry.OnExhausted, bool) {
	s, ok := p.oneOf(f, string(retry.ReturnLast), string(retry.Raise))
	return retry.OnExhausted(s), ok
}

func (p *parser) expect(f field) (*Expect, bool) {
	known := []string{"format", "schema", "repair"}
	if p.encoded {
		known = append(known, "schema_file", "schema_line")
	}
	before := len(p.errs)
	ef, ok := p.fields(f.val, f.path, known...)
	if !ok {
		return nil, false
	}
	e := &Expect{RepairOnExhausted: retry.OnExhaustedDefault}
	format, hasFormat := ef["format"]
	if hasFormat {
		e.Format, _ = p.oneOf(format, FormatJSON, FormatText)
	}
	schema, hasSchema := ef["schema"]
	if hasSchema {
		e.SchemaLine = schema.val.Line
		switch n := schema.val; {
		case n.Kind == yaml.MappingNode:
			if x, err := toJSON(n); err != nil {
				p.nodeError(err, schema)
			} else {
				e.Schema = x.(map[string]any)
			}
		case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
			e.SchemaFile = n.Value
			e.Schema = p.schemaFile(schema)
		default:
			p.errorf(n.Line, schema.path, "want a mapping, or the path of a JSON or YAML file, got %s", describe(n))
		}
	}
	if v, ok := ef["schema_file"]; ok {
		e.SchemaFile, _ = p.str(v)
	}
	if v, ok := ef["schema_line"]; ok {
		e.SchemaLine, _ = p.intIn(v, 0, math.MaxInt)
	}
	switch {
	case hasSchema && e.Format == FormatText:
		p.errorf(format.val.Line, format.path, "text cannot have a schema (a schema implies json)")
	case hasSchema:
		e.Format = FormatJSON
	case !hasFormat:
		p.errorf(f.val.Line, f.path, "set format or schema")
	}
	if v, ok := ef["repair"]; ok {
		p.repair(v, e)
	}
	if len(p.errs) > before {
		return nil, false
	}
	if e.Schema != nil && SchemaCheck != nil {
		if err := SchemaCheck(e.Schema); err != nil {
			p.errorf(e.SchemaLine, child(f.path, "schema"), "%v", err)
			return nil, false
		}
	}
	return e, true
}

func (p *parser) repair(f field, e *Expect) {
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!bool" {
		if on, _ := p.boolean(f); on {
			e.RepairAttempts = RepairAttemptsDefault
		}
		return
	}
	rf, ok := p.fields(f.val, f.path, "max_attempts", "on_exhausted")
	if !ok {
		return
	}
	e.RepairAttempts = RepairAttemptsDefault
	if v, ok := rf["max_attempts"]; ok {
		e.RepairAttempts, _ = p.intIn(v, RepairAttemptsMin, RepairAttemptsMax)
	}
	if v, ok := rf["on_exhausted"]; ok {
		e.RepairOnExhausted, _ = p.onExhausted(v)
	}
}

// schemaFile reads a schema written as a path, relative to the workflow file.
func (p *parser) schemaFile(f field) map[string]any {
	name := strings.TrimSpace(f.val.Value)
	if name == "" {
		p.errorf(f.val.Line, f.path, "empty; want a mapping or the path of a JSON or YAML file")
		return nil
	}
	full := name
	if !filepath.IsAbs(name) {
		full = filepath.Join(p.dir, name)
	}
	data, err := os.ReadFile(full)
	if err != nil {
		p.errorf(f.val.Line, f.path, "cannot read schema file: %v", err)
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		p.errorf(f.val.Line, f.path, "schema file %s: %s", full, strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	if len(doc.Content) == 0 {
		p.errorf(f.val.Line, f.path, "schema file %s is empty", full)
		return nil
	}
	if err := checkExpansion(&doc); err != nil {
		p.errorf(f.val.Line, f.path, "schema file %s: %v", full, err)
		return nil
	}
	x, err := toJSON(doc.Content[0])
	if err != nil {
		p.errorf(f.val.Line, f.path, "schema file %s: %v", full, err)
		return nil
	}
	m, ok := x.(map[string]any)
	if !ok {
		p.errorf(f.val.Line, f.path, "schema file %s holds %s, not a mapping", full, describe(deref(doc.Content[0])))
		return nil
	}
	return m
}

func (p *parser) batch(f field) (BatchConfig, bool) {
	before := len(p.errs)
	var b BatchConfig
	bf, ok := p.fields(f.val, f.path, "max_records", "max_wait", "poll")
	if !ok {
		return b, false
	}
	if v, ok := bf["max_records"]; ok {
		b.MaxRecords, _ = p.intIn(v, BatchMaxRecordsMin, BatchMaxRecordsMax)
	}
	if v, ok := bf["max_wait"]; ok {
		b.MaxWait, _ = p.duration(v)
	}
	if v, ok := bf["poll"]; ok {
		b.Poll, _ = p.duration(v)
	}
	return b, len(p.errs) == before
}
