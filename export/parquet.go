package export

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress"
	"github.com/parquet-go/parquet-go/encoding"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// A Parquet export has the columns of a CSV export, typed, with the shape
// of a JSONL result where it nests: the output as the workflow's last
// action makes it (an expect: schema's types, docs/results.md), the
// carried fields as the group input, the record (--include-input) as a
// JSON column. Rows are buffered a row group at a time (RowGroupDefault)
// and flushed as the group fills, so memory is bounded by a row group's
// results, not the job's.

// RowGroupDefault is how many results a Parquet row group holds.
const RowGroupDefault = 10000

// parquetBatch is how many rows are handed to the writer at once.
const parquetBatch = 256

// schemaDepthMax bounds how deep an expect: schema is followed into
// typed columns; deeper parts are JSON text.
const schemaDepthMax = 16

// colKind is a column's type.
type colKind int

const (
	kString colKind = iota
	kJSON
	kInt
	kDouble
	kFloat
	kBool
	kTime
	kGroup
	kList
)

// col is a column, or a group of them, of a Parquet export. Every column
// is optional: a failed record has no output, a result no cost.
type col struct {
	name   string
	kind   colKind
	fields []*col // kGroup
	elem   *col   // kList

	// Levels, and the leaf columns under it.
	maxDef, maxRep int
	repDef, repRep int // kList: of its repeated level
	leaf           int
	first, end     int
}

// node is the parquet-go schema node of c.
func (c *col) node() parquet.Node {
	var n parquet.Node
	switch c.kind {
	case kString:
		n = parquet.String()
	case kJSON:
		n = parquet.JSON()
	case kInt:
		n = parquet.Int(64)
	case kDouble:
		n = parquet.Leaf(parquet.DoubleType)
	case kFloat:
		n = parquet.Leaf(parquet.FloatType)
	case kBool:
		n = parquet.Leaf(parquet.BooleanType)
	case kTime:
		n = parquet.Timestamp(parquet.Millisecond)
	case kGroup:
		g := make(group, len(c.fields))
		for i, f := range c.fields {
			g[i] = field{Node: f.node(), name: f.name}
		}
		n = g
	case kList:
		n = parquet.List(c.elem.node())
	}
	return parquet.Optional(n)
}

// levels sets the levels and leaf columns of c and the columns under it,
// the first leaf being column leaf; it returns the next leaf.
func (c *col) levels(def, rep, leaf int) int {
	c.maxDef, c.maxRep, c.first = def+1, rep, leaf
	switch c.kind {
	case kGroup:
		for _, f := range c.fields {
			leaf = f.levels(c.maxDef, rep, leaf)
		}
	case kList:
		c.repDef, c.repRep = c.maxDef+1, rep+1
		leaf = c.elem.levels(c.repDef, c.repRep, leaf)
	default:
		c.leaf = leaf
		leaf++
	}
	c.end = leaf
	return leaf
}

// errNoFit: a value is not of its column's type.
var errNoFit = errors.New("not of the column's type")

// stripe appends v's values, with their levels, to the columns of c in
// cols (one slice per leaf column): rep is the repetition level of the
// first, def the definition level that says "c is null".
func (c *col) stripe(cols [][]parquet.Value, v any, rep, def int) error {
	if v == nil {
		for i := c.first; i < c.end; i++ {
			cols[i] = append(cols[i], parquet.NullValue().Level(rep, def, i))
		}
		return nil
	}
	switch c.kind {
	case kGroup:
		m, ok := v.(map[string]any)
		if !ok {
			return errNoFit
		}
		for _, f := range c.fields {
			if err := f.stripe(cols, m[f.name], rep, c.maxDef); err != nil {
				return err
			}
		}
		return nil
	case kList:
		a, ok := v.([]any)
		if !ok {
			return errNoFit
		}
		if len(a) == 0 {
			for i := c.first; i < c.end; i++ {
				cols[i] = append(cols[i], parquet.NullValue().Level(rep, c.maxDef, i))
			}
			return nil
		}
		for i, e := range a {
			r := rep
			if i > 0 {
				r = c.repRep
			}
			if err := c.elem.stripe(cols, e, r, c.repDef); err != nil {
				return err
			}
		}
		return nil
	}
	pv, err := c.value(v)
	if err != nil {
		return err
	}
	cols[c.leaf] = append(cols[c.leaf], pv.Level(rep, c.maxDef, c.leaf))
	return nil
}

// value is v as a value of the leaf c.
func (c *col) value(v any) (parquet.Value, error) {
	switch c.kind {
	case kString:
		if s, ok := v.(string); ok {
			return parquet.ByteArrayValue([]byte(s)), nil
		}
	case kJSON:
		if raw, ok := v.(json.RawMessage); ok {
			return parquet.ByteArrayValue(raw), nil
		}
		b, err := json.Marshal(v)
		if err != nil {
			return parquet.Value{}, err
		}
		return parquet.ByteArrayValue(b), nil
	case kInt:
		switch x := v.(type) {
		case int:
			return parquet.Int64Value(int64(x)), nil
		case int64:
			return parquet.Int64Value(x), nil
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
				return parquet.Int64Value(int64(x)), nil
			}
		case json.Number:
			if i, err := x.Int64(); err == nil {
				return parquet.Int64Value(i), nil
			}
		}
	case kDouble, kFloat:
		var f float64
		switch x := v.(type) {
		case float64:
			f = x
		case int:
			f = float64(x)
		case json.Number:
			var err error
			if f, err = x.Float64(); err != nil {
				return parquet.Value{}, errNoFit
			}
		default:
			return parquet.Value{}, errNoFit
		}
		if c.kind == kFloat {
			return parquet.FloatValue(float32(f)), nil
		}
		return parquet.DoubleValue(f), nil
	case kBool:
		if b, ok := v.(bool); ok {
			return parquet.BooleanValue(b), nil
		}
	case kTime:
		if t, ok := v.(time.Time); ok {
			return parquet.Int64Value(t.UnixMilli()), nil
		}
	}
	return parquet.Value{}, errNoFit
}

// outputCol is the output column of a job's results: typed by what its
// last action makes.
func outputCol(wf *workflow.Workflow) *col {
	c := &col{name: "output", kind: kJSON}
	if wf == nil || len(wf.Actions) == 0 {
		return c
	}
	a := wf.Actions[len(wf.Actions)-1]
	switch {
	case a.IsEmbed() && a.Embed.Format == workflow.EmbedFormatBase64:
		c.kind = kString
	case a.IsEmbed():
		c.kind, c.elem = kList, &col{name: "element", kind: kFloat}
	case a.HasTools():
		// {text, tool_calls}: JSON, as the tools' arguments are.
	case a.Expect == nil || a.Expect.Format == workflow.FormatText:
		c.kind = kString
	case a.Expect.Schema != nil:
		typed := schemaCol(a.Expect.Schema, 0)
		typed.name = c.name
		return typed
	}
	return c
}

// schemaCol maps a JSON Schema to a column: string, integer (INT64),
// number (DOUBLE), boolean; an object that lists its properties and allows
// no others to a group of them; an array with an items schema to a LIST;
// anything else (an open object, a union of types, $ref) to JSON text.
func schemaCol(s map[string]any, depth int) *col {
	c := &col{kind: kJSON}
	if depth > schemaDepthMax {
		return c
	}
	typ := ""
	switch t := s["type"].(type) {
	case string:
		typ = t
	case []any:
		var types []string
		for _, x := range t {
			if x, ok := x.(string); ok && x != "null" {
				types = append(types, x)
			}
		}
		if len(types) == 1 {
			typ = types[0]
		}
	case nil:
		if _, ok := s["properties"]; ok {
			typ = "object"
		} else if enum, ok := s["enum"].([]any); ok && len(enum) > 0 && !slices.ContainsFunc(enum, func(v any) bool {
			_, str := v.(string)
			return !str
		}) {
			typ = "string"
		}
	}
	switch typ {
	case "string":
		c.kind = kString
	case "integer":
		c.kind = kInt
	case "number":
		c.kind = kDouble
	case "boolean":
		c.kind = kBool
	case "object":
		props, _ := s["properties"].(map[string]any)
		if more, ok := s["additionalProperties"].(bool); !ok || more || len(props) == 0 {
			return c // open: properties it does not list would be lost
		}
		names := make([]string, 0, len(props))
		for k := range props {
			names = append(names, k)
		}
		slices.Sort(names) // a schema's properties come as a map
		c.kind = kGroup
		for _, k := range names {
			ps, _ := props[k].(map[string]any)
			f := schemaCol(ps, depth+1)
			f.name = k
			c.fields = append(c.fields, f)
		}
	case "array":
		if items, ok := s["items"].(map[string]any); ok {
			c.kind, c.elem = kList, schemaCol(items, depth+1)
			c.elem.name = "element"
		}
	}
	return c
}

// parquetWriter writes results as Parquet rows.
type parquetWriter struct {
	w      *parquet.GenericWriter[any]
	cols   []*col // top-level, in order
	get    []func(r *broker.Result, record json.RawMessage) any
	output *col
	text   *col // output_text: an output that does not fit output (nil: it is text)
	values [][]parquet.Value
	batch  []parquet.Row
}

func newParquetWriter(w io.Writer, o Options) *parquetWriter {
	p := &parquetWriter{output: outputCol(o.Workflow)}
	p.str("id", func(r *broker.Result) string { return r.ID })
	p.add(&col{name: "line", kind: kInt}, func(r *broker.Result, _ json.RawMessage) any {
		if r.Line == 0 {
			return nil
		}
		return r.Line
	})
	p.str("action", func(r *broker.Result) string { return r.Action })
	p.str("status", func(r *broker.Result) string { return r.Status })
	p.str("reason", func(r *broker.Result) string { return r.Reason })
	p.add(p.output, nil) // written by write
	if p.output.kind != kString {
		p.text = &col{name: "output_text", kind: kString}
		p.add(p.text, nil)
	}
	p.str("finish_reason", func(r *broker.Result) string { return r.FinishReason })
	p.str("finish_reason_raw", func(r *broker.Result) string { return r.FinishReasonRaw })
	p.str("error_class", func(r *broker.Result) string { return errText(r, true) })
	p.str("error", func(r *broker.Result) string { return errText(r, false) })
	p.num("input_tokens", func(r *broker.Result) int { return r.Usage.InputTokens })
	p.num("output_tokens", func(r *broker.Result) int { return r.Usage.OutputTokens })
	p.num("cached_input_tokens", func(r *broker.Result) int { return r.Usage.CachedInputTokens })
	p.num("cache_write_tokens", func(r *broker.Result) int { return r.Usage.CacheWriteTokens })
	p.num("reasoning_tokens", func(r *broker.Result) int { return r.Usage.ReasoningTokens })
	p.money("cost", func(r *broker.Result) *float64 { return r.Cost })
	p.money("total_cost", func(r *broker.Result) *float64 { return r.TotalCost })
	p.add(&col{name: "latency_ms", kind: kDouble}, func(r *broker.Result, _ json.RawMessage) any { return r.LatencyMS })
	p.num("attempts", func(r *broker.Result) int { return r.Recovery.Attempts })
	p.num("deliveries", func(r *broker.Result) int { return r.Recovery.Deliveries })
	p.add(&col{name: "calls", kind: kInt}, func(r *broker.Result, _ json.RawMessage) any {
		if r.Totals == nil {
			return nil // a result from before totals
		}
		return r.Totals.Calls
	})
	p.str("provider", func(r *broker.Result) string { return r.Provider })
	p.str("model", func(r *broker.Result) string { return r.Model })
	p.str("deployment", func(r *broker.Result) string { return r.Deployment })
	p.add(routesCol(), func(r *broker.Result, _ json.RawMessage) any { return routesValue(r.Recovery.Routes) })
	p.str("job", func(r *broker.Result) string { return r.Job })
	p.num("revision", func(r *broker.Result) int { return cmp.Or(r.Revision, 1) })
	p.add(&col{name: "finished_at", kind: kTime}, func(r *broker.Result, _ json.RawMessage) any {
		if r.Finished.IsZero() {
			return nil
		}
		return r.Finished
	})
	p.addInput(o)
	leaf := 0
	root := make(group, len(p.cols))
	for i, c := range p.cols {
		leaf = c.levels(0, 0, leaf)
		root[i] = field{Node: c.node(), name: c.name}
	}
	p.values = make([][]parquet.Value, leaf)
	p.w = parquet.NewGenericWriter[any](w, parquet.NewSchema("results", root),
		parquet.Compression(&parquet.Snappy),
		parquet.MaxRowsPerRowGroup(int64(cmp.Or(o.RowGroup, RowGroupDefault))),
		parquet.CreatedBy("jetpool", "", ""))
	return p
}

// add appends a top-level column and how a result's value of it is got
// (nil: write fills it).
func (p *parquetWriter) add(c *col, get func(r *broker.Result, record json.RawMessage) any) {
	p.cols = append(p.cols, c)
	p.get = append(p.get, get)
}

// str adds a text column, null when empty.
func (p *parquetWriter) str(name string, get func(r *broker.Result) string) {
	p.add(&col{name: name, kind: kString}, func(r *broker.Result, _ json.RawMessage) any {
		if s := get(r); s != "" {
			return s
		}
		return nil
	})
}

func (p *parquetWriter) num(name string, get func(r *broker.Result) int) {
	p.add(&col{name: name, kind: kInt}, func(r *broker.Result, _ json.RawMessage) any { return get(r) })
}

// money adds a price column, null when unpriced.
func (p *parquetWriter) money(name string, get func(r *broker.Result) *float64) {
	p.add(&col{name: name, kind: kDouble}, func(r *broker.Result, _ json.RawMessage) any {
		if v := get(r); v != nil {
			return *v
		}
		return nil // unpriced
	})
}

// routesCol is the column of a result's fallback moves (recovery.routes):
// a list of {after, from, to, on}, typed as the JSONL result's fields are.
func routesCol() *col {
	el := &col{name: "element", kind: kGroup, fields: []*col{
		{name: "after", kind: kInt}, {name: "from", kind: kString}, {name: "to", kind: kString}, {name: "on", kind: kString}}}
	return &col{name: "routes", kind: kList, elem: el}
}

// routesValue is routes as routesCol's value: null when there were none.
func routesValue(routes []broker.Route) any {
	if len(routes) == 0 {
		return nil
	}
	out := make([]any, len(routes))
	for i, rt := range routes {
		m := map[string]any{"from": rt.From, "to": rt.To, "on": rt.On}
		if rt.After > 0 {
			m["after"] = rt.After // absent in JSONL: no call led to the move
		}
		out[i] = m
	}
	return out
}

// addInput adds the columns of the input records, when asked for: the
// carried fields (input) and the whole record (record).
func (p *parquetWriter) addInput(o Options) {
	if len(o.Carry) > 0 {
		in := &col{name: "input", kind: kGroup}
		for _, f := range o.Carry {
			// Text, as in CSV: a record field has no type to keep.
			in.fields = append(in.fields, &col{name: f, kind: kString})
		}
		p.add(in, func(r *broker.Result, _ json.RawMessage) any {
			m := make(map[string]any, len(o.Carry))
			for _, f := range o.Carry {
				if v, ok := r.Input[f]; ok && v != nil {
					m[f] = cellText(v)
				}
			}
			return m
		})
	}
	if o.Input != "" {
		p.add(&col{name: "record", kind: kJSON}, func(_ *broker.Result, record json.RawMessage) any {
			if record == nil {
				return nil
			}
			return record
		})
	}
}

func errText(r *broker.Result, class bool) string {
	if r.Error == nil {
		return ""
	}
	if class {
		return r.Error.Class
	}
	return r.Error.Message
}

func (p *parquetWriter) write(r *broker.Result, record json.RawMessage) error {
	for i := range p.values {
		p.values[i] = p.values[i][:0]
	}
	unfit := false
	for i, c := range p.cols {
		var v any
		switch c {
		case p.output:
			v = r.Output
			if p.output.kind == kString {
				if v != nil {
					v = cellText(v) // as CSV writes it
				}
			} else if err := c.stripe(p.values, v, 0, 0); err != nil {
				// An output the column cannot hold (a failed record's
				// partial answer, from whichever action failed it): null
				// here, its text in output_text.
				for j := c.first; j < c.end; j++ {
					p.values[j] = p.values[j][:0]
				}
				v, unfit = nil, true
			} else {
				continue
			}
		case p.text:
			if unfit {
				v = cellText(r.Output)
			}
		default:
			v = p.get[i](r, record)
		}
		if err := c.stripe(p.values, v, 0, 0); err != nil {
			return fmt.Errorf("result %s: %s: %w", r.ID, c.name, err)
		}
	}
	var row parquet.Row
	for _, vs := range p.values {
		row = append(row, vs...)
	}
	p.batch = append(p.batch, row)
	if len(p.batch) >= parquetBatch {
		return p.writeBatch()
	}
	return nil
}

func (p *parquetWriter) writeBatch() error {
	if len(p.batch) == 0 {
		return nil
	}
	_, err := p.w.WriteRows(p.batch)
	p.batch = p.batch[:0]
	return err
}

func (p *parquetWriter) flush() error {
	if err := p.writeBatch(); err != nil {
		return err
	}
	return p.w.Close()
}

// group is a parquet-go group node whose fields keep their order
// (parquet.Group sorts them by name): the columns of an export in the
// order of a CSV export's.
type group []parquet.Field

func (g group) ID() int                     { return 0 }
func (g group) String() string              { return fmt.Sprintf("group(%d fields)", len(g)) }
func (g group) Type() parquet.Type          { return parquet.Group{}.Type() }
func (g group) Optional() bool              { return false }
func (g group) Repeated() bool              { return false }
func (g group) Required() bool              { return true }
func (g group) Leaf() bool                  { return false }
func (g group) Fields() []parquet.Field     { return g }
func (g group) Encoding() encoding.Encoding { return nil }
func (g group) Compression() compress.Codec { return nil }
func (g group) GoType() reflect.Type        { return reflect.TypeFor[map[string]any]() }

// field is a named node of a group.
type field struct {
	parquet.Node
	name string
}

func (f field) Name() string { return f.name }

// Value is the field of a map-shaped row (rows are written as
// parquet.Row, not Go values, so it is not used by the writes here).
func (f field) Value(base reflect.Value) reflect.Value {
	if base.Kind() == reflect.Map {
		return base.MapIndex(reflect.ValueOf(f.name))
	}
	return reflect.Value{}
}
