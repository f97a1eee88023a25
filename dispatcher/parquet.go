package dispatcher

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"

	"github.com/jetpool/jetpool/internal/rawjson"
)

// A Parquet file's rows are records: each row is written as a JSON object
// of its top-level columns, in the file's column order, and from there on
// it is a record like any JSONL line (ids, checks, templates, the work
// message). Its "line" is its row number, from 1.
//
// The file is read a row group at a time, and within a row group a page
// per column at a time (parquet-go's row reader): memory is bounded by
// the pages of one row group's columns, never the file.
//
// How each Parquet type is written in JSON (docs/workflow.md, "Parquet
// input"): nested groups as objects, LIST as arrays, MAP as objects (keys
// as text), null as null; integers, floats and decimals as numbers (a
// decimal's exact digits), DATE, TIME and TIMESTAMP as ISO 8601 text (with
// Z when the timestamp is adjusted to UTC, as INT96 timestamps are), UUID
// in its canonical form, JSON as the value itself, strings as strings, and
// binary without a string annotation as base64.

// FormatParquet is the format of Parquet input files.
const FormatParquet = "parquet"

// parquetBatchRows is how many rows are read from a row group at a time.
const parquetBatchRows = 128

// parquetReader reads the rows of a Parquet file as JSON records.
type parquetReader struct {
	path      string
	file      *parquet.File
	root      *pqNode
	leaves    int
	leafPaths []string // each leaf column's path, for errors

	group   int          // the next row group
	rows    parquet.Rows // the current row group's, nil between groups
	batch   []parquet.Row
	n, next int   // rows in batch, the next one
	row     int64 // rows read so far
	cols    [][]parquet.Value
	out     []byte
	failed  error // a read error: the file ends there
	members []member
	hash    string // ContentHash, once the file is read
}

// FileError is an input file that cannot be read on from some point: not
// a Parquet file, truncated, a corrupt page. Unlike a *LineError, no record
// after it can be read, so it refuses the whole input.
type FileError struct {
	File string
	Row  int64 // the row it stopped at (0: before any)
	Err  error
}

func (e *FileError) Error() string {
	if e.Row == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s: row %d: %v", e.File, e.Row, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

func openParquet(f *os.File, path, idField string) (*parquetReader, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	pf, err := parquet.OpenFile(f, st.Size(), parquet.SkipPageIndex(true), parquet.SkipBloomFilters(true))
	if err != nil {
		return nil, &FileError{File: path, Err: parquetOpenErr(err)}
	}
	root, leaves, err := parquetSchema(pf.Metadata().Schema)
	if err != nil {
		return nil, &FileError{File: path, Err: err}
	}
	paths := make([]string, leaves)
	root.eachLeaf(func(n *pqNode) { paths[n.leaf] = n.path })
	seen := map[string]bool{}
	var names []string
	for _, c := range root.children {
		if seen[c.name] {
			return nil, &FileError{File: path, Err: fmt.Errorf("column %q appears twice", c.name)}
		}
		seen[c.name] = true
		names = append(names, c.name)
	}
	if idField != "" && !seen[idField] {
		return nil, &LineError{File: path, Reason: fmt.Sprintf("--id-field %q is not a column (columns: %s)", idField, strings.Join(names, ", "))}
	}
	return &parquetReader{path: path, file: pf, root: root, leaves: leaves, leafPaths: paths,
		batch: make([]parquet.Row, parquetBatchRows), cols: make([][]parquet.Value, leaves)}, nil
}

// parquetOpenErr says what parquet-go's error on opening a file means.
func parquetOpenErr(err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "magic header"):
		return fmt.Errorf("not a Parquet file (it does not start with PAR1): %w", err)
	case strings.Contains(msg, "magic footer"), strings.Contains(msg, "footer"):
		return fmt.Errorf("not a whole Parquet file (truncated? its footer is missing or damaged): %w", err)
	}
	return fmt.Errorf("not a readable Parquet file: %w", err)
}

// nextRow reads the next row into p.cols (each leaf column's values for
// the row): io.EOF at the end, a *FileError when the file cannot be read.
func (p *parquetReader) nextRow() error {
	if p.failed != nil {
		return p.failed
	}
	for p.next >= p.n {
		if p.rows == nil {
			groups := p.file.RowGroups()
			if p.group >= len(groups) {
				return io.EOF
			}
			p.rows = groups[p.group].Rows()
			p.group++
		}
		n, err := p.rows.ReadRows(p.batch)
		p.n, p.next = n, 0
		if n == 0 && err == nil {
			err = io.EOF // a group that stops giving rows ends, not loops
		}
		if errors.Is(err, io.EOF) {
			p.rows.Close()
			p.rows = nil
		} else if err != nil {
			p.rows.Close()
			p.rows = nil
			p.failed = &FileError{File: p.path, Row: p.row + int64(n) + 1, Err: p.columnErr(p.group-1, err)}
			if n == 0 {
				return p.failed
			}
		}
	}
	clear(p.cols)
	row := p.batch[p.next]
	p.next++
	p.row++
	bad := false
	row.Range(func(col int, values []parquet.Value) bool {
		if col >= len(p.cols) || len(values) == 0 {
			bad = true
			return false
		}
		p.cols[col] = values
		return true
	})
	for _, c := range p.cols {
		bad = bad || len(c) == 0
	}
	if bad {
		p.failed = &FileError{File: p.path, Row: p.row, Err: errors.New("a row whose columns do not match the file's schema (corrupt file?)")}
		return p.failed
	}
	return nil
}

// close releases the current row group's readers.
func (p *parquetReader) close() {
	if p.rows != nil {
		p.rows.Close()
		p.rows = nil
	}
}

// columnErr says which column of row group g the read error err is in,
// when err does not: each column's pages are read until one fails (only
// on this path, after the error).
func (p *parquetReader) columnErr(g int, err error) error {
	if !strings.Contains(err.Error(), "column \"") {
		for i, cc := range p.file.RowGroups()[g].ColumnChunks() {
			if perr := readPages(cc.Pages()); perr != nil {
				return fmt.Errorf("row group %d: column %q: %w", g, p.leafPaths[i], err)
			}
		}
	}
	return fmt.Errorf("row group %d: %w", g, err)
}

func readPages(pages parquet.Pages) error {
	defer pages.Close()
	for {
		if _, err := pages.ReadPage(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// next returns the next row as a record: its JSON in p.out (reused, or a
// fresh copy unless views) and its top-level members.
func (r *Reader) nextParquet() (Record, error) {
	p := r.pq
	if err := p.nextRow(); err != nil {
		return Record{}, err
	}
	rec := Record{Line: int(p.row), rows: true}
	out, members, err := p.root.writeRecord(p.out[:0], p.cols, p.members[:0])
	p.out, p.members = out, members
	if err != nil {
		return rec, &LineError{File: r.path, Line: rec.Line, rows: true, Reason: err.Error()}
	}
	if r.views {
		rec.Raw, rec.members = out, members
	} else {
		rec.Raw = append([]byte(nil), out...)
		rec.Fields = make(map[string]json.RawMessage, len(members))
		for _, m := range memberViews(rec.Raw, members) {
			rec.Fields[m.key] = m.value
		}
	}
	if err := r.setID(&rec); err != nil {
		return rec, err
	}
	return rec, nil
}

// pqNode is a node of a Parquet schema, with what it takes to write its
// values in JSON.
type pqNode struct {
	name       string
	path       string // dotted, for errors
	rep        format.FieldRepetitionType
	children   []*pqNode
	leaf       int // leaf column index (a leaf)
	first, end int // its leaf columns
	maxDef     int // definition level of a present value of it
	maxRep     int // repetition level of it

	kind pqKind
	// list: repeated is the repeated node, item the element (repeated
	// itself, or its only child); map: repeated is key_value.
	repeated, item *pqNode
	scratch        [][]parquet.Value // list elements' columns (one list at a time)

	// leaves
	phys    format.Type
	scale   int32
	unit    time.Duration // TIMESTAMP / TIME unit
	utc     bool
	typeLen int32
}

type pqKind int

const (
	pqGroup pqKind = iota
	pqList
	pqMap
	pqBool
	pqInt     // signed, INT32 or INT64
	pqUint    // unsigned, INT32 or INT64
	pqFloat   // FLOAT or DOUBLE
	pqDecimal // any physical type
	pqDate
	pqTime
	pqTimestamp
	pqInt96 // a legacy INT96 timestamp
	pqString
	pqJSON
	pqBinary // base64
	pqUUID
	pqFloat16
	pqInterval
)

// parquetSchema builds the node tree of a file's schema (its elements in
// depth-first order): the root group, and the number of leaf columns.
func parquetSchema(elems []format.SchemaElement) (*pqNode, int, error) {
	if len(elems) == 0 {
		return nil, 0, errors.New("the file has no schema")
	}
	leaves := 0
	i := 0
	var build func(parent *pqNode) (*pqNode, error)
	build = func(parent *pqNode) (*pqNode, error) {
		if i >= len(elems) {
			return nil, errors.New("its schema is cut short (corrupt footer?)")
		}
		e := &elems[i]
		i++
		n := &pqNode{name: e.Name, rep: e.RepetitionType.V, first: leaves}
		if parent != nil {
			n.maxDef, n.maxRep = parent.maxDef, parent.maxRep
			if parent.path != "" {
				n.path = parent.path + "." + e.Name
			} else {
				n.path = e.Name
			}
			switch n.rep {
			case format.Optional:
				n.maxDef++
			case format.Repeated:
				n.maxDef++
				n.maxRep++
			}
		}
		if k, _ := e.NumChildren.Get(); k > 0 || !e.Type.Valid {
			for range k {
				c, err := build(n)
				if err != nil {
					return nil, err
				}
				n.children = append(n.children, c)
			}
			n.end = leaves
			if len(n.children) == 0 {
				return nil, fmt.Errorf("column %q: a group with no columns", n.path)
			}
			return n, n.group(e)
		}
		n.leaf = leaves
		leaves++
		n.end = leaves
		return n, n.scalar(e)
	}
	root, err := build(nil)
	if err != nil {
		return nil, 0, err
	}
	return root, leaves, nil
}

func (n *pqNode) eachLeaf(fn func(*pqNode)) {
	if n.children == nil {
		fn(n)
	}
	for _, c := range n.children {
		c.eachLeaf(fn)
	}
}

func isList(e *format.SchemaElement) bool {
	_, lt := e.LogicalType.Value.(*format.ListType)
	ct, ok := e.ConvertedType.Get()
	return lt || ok && ct == deprecated.List
}

func isMap(e *format.SchemaElement) bool {
	_, lt := e.LogicalType.Value.(*format.MapType)
	ct, ok := e.ConvertedType.Get()
	return lt || ok && (ct == deprecated.Map || ct == deprecated.MapKeyValue)
}

// group sets the kind of a group: a LIST, a MAP or a struct, by the rules
// of the format's LogicalTypes.md, backward-compatibility rules included
// (the two-level lists older writers made).
func (n *pqNode) group(e *format.SchemaElement) error {
	if _, ok := e.LogicalType.Value.(*format.VariantType); ok {
		return fmt.Errorf("column %q: VARIANT columns are not supported (cast it to JSON text before exporting)", n.path)
	}
	switch {
	case isList(e) && len(n.children) == 1 && n.children[0].rep == format.Repeated:
		r := n.children[0]
		n.kind, n.repeated, n.item = pqList, r, r
		if len(r.children) == 1 && r.name != "array" && r.name != n.name+"_tuple" {
			n.item = r.children[0]
		}
	case isMap(e) && len(n.children) == 1 && n.children[0].rep == format.Repeated && len(n.children[0].children) == 2:
		r := n.children[0]
		if r.children[0].children != nil {
			return fmt.Errorf("column %q: a MAP whose keys are not of a plain type is not supported", n.path)
		}
		n.kind, n.repeated = pqMap, r
	default:
		n.kind = pqGroup
	}
	return nil
}

// scalar sets how a leaf's values are written.
func (n *pqNode) scalar(e *format.SchemaElement) error {
	n.phys = e.Type.V
	n.typeLen = e.TypeLength.V
	ct, hasCT := e.ConvertedType.Get()
	unsupported := func(what string) error {
		return fmt.Errorf("column %q: %s is not supported", n.path, what)
	}
	switch lt := e.LogicalType.Value.(type) {
	case *format.StringType, *format.EnumType:
		n.kind = pqString
	case *format.JsonType:
		n.kind = pqJSON
	case *format.BsonType:
		n.kind = pqBinary
	case *format.UUIDType:
		n.kind = pqUUID
	case *format.Float16Type:
		n.kind = pqFloat16
	case *format.DateType:
		n.kind = pqDate
	case *format.DecimalType:
		n.kind, n.scale = pqDecimal, lt.Scale
	case *format.IntType:
		n.kind = pqInt
		if !lt.IsSigned {
			n.kind = pqUint
		}
	case *format.TimestampType:
		n.kind, n.utc, n.unit = pqTimestamp, lt.IsAdjustedToUTC, timeUnit(&lt.Unit)
	case *format.TimeType:
		n.kind, n.utc, n.unit = pqTime, lt.IsAdjustedToUTC, timeUnit(&lt.Unit)
	case *format.VariantType:
		return unsupported("VARIANT")
	case nil, *format.NullType:
		switch {
		case !hasCT:
		case ct == deprecated.UTF8 || ct == deprecated.Enum:
			n.kind = pqString
		case ct == deprecated.Json:
			n.kind = pqJSON
		case ct == deprecated.Decimal:
			n.kind, n.scale = pqDecimal, e.Scale.V
		case ct == deprecated.Date:
			n.kind = pqDate
		case ct == deprecated.TimeMillis, ct == deprecated.TimeMicros:
			n.kind, n.utc, n.unit = pqTime, true, time.Millisecond
			if ct == deprecated.TimeMicros {
				n.unit = time.Microsecond
			}
		case ct == deprecated.TimestampMillis, ct == deprecated.TimestampMicros:
			n.kind, n.utc, n.unit = pqTimestamp, true, time.Millisecond
			if ct == deprecated.TimestampMicros {
				n.unit = time.Microsecond
			}
		case ct >= deprecated.Uint8 && ct <= deprecated.Uint64:
			n.kind = pqUint
		case ct >= deprecated.Int8 && ct <= deprecated.Int64:
			n.kind = pqInt
		case ct == deprecated.Interval:
			n.kind = pqInterval
		}
	}
	if n.kind != pqGroup {
		return n.checkPhysical(unsupported)
	}
	switch n.phys {
	case format.Boolean:
		n.kind = pqBool
	case format.Int32, format.Int64:
		n.kind = pqInt
	case format.Int96:
		n.kind = pqInt96
	case format.Float, format.Double:
		n.kind = pqFloat
	case format.ByteArray, format.FixedLenByteArray:
		n.kind = pqBinary // geometry and geography (WKB) too
	default:
		return unsupported(fmt.Sprintf("physical type %v", n.phys))
	}
	return nil
}

// checkPhysical refuses a logical type on a physical type it cannot have.
func (n *pqNode) checkPhysical(unsupported func(string) error) error {
	ok := true
	switch n.kind {
	case pqString, pqJSON:
		ok = n.phys == format.ByteArray
	case pqUUID:
		ok = n.phys == format.FixedLenByteArray && n.typeLen == 16
	case pqFloat16:
		ok = n.phys == format.FixedLenByteArray && n.typeLen == 2
	case pqInterval:
		ok = n.phys == format.FixedLenByteArray && n.typeLen == 12
	case pqDate:
		ok = n.phys == format.Int32
	case pqInt, pqUint:
		ok = n.phys == format.Int32 || n.phys == format.Int64
	case pqTime:
		ok = n.phys == format.Int32 || n.phys == format.Int64
	case pqTimestamp:
		ok = n.phys == format.Int64
	case pqDecimal:
		ok = n.phys != format.Boolean && n.phys != format.Float && n.phys != format.Double && n.phys != format.Int96
	}
	if !ok {
		return unsupported(fmt.Sprintf("a %v column with that annotation", n.phys))
	}
	return nil
}

func timeUnit(u *format.TimeUnit) time.Duration {
	switch u.Value.(type) {
	case *format.MilliSeconds:
		return time.Millisecond
	case *format.NanoSeconds:
		return time.Nanosecond
	}
	return time.Microsecond
}

// writeRecord appends the row in cols as a JSON object to b, and each
// top-level member (views of b) to members.
func (n *pqNode) writeRecord(b []byte, cols [][]parquet.Value, members []member) ([]byte, []member, error) {
	b = append(b, '{')
	for i, c := range n.children {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, c.name)
		b = append(b, ':')
		start := len(b)
		var err error
		if b, err = c.writeField(b, cols); err != nil {
			return b, members, fmt.Errorf("field %q: %w", c.name, err)
		}
		members = append(members, member{key: c.name, value: b[start:len(b):len(b)]})
	}
	b = append(b, '}')
	return b, memberViews(b, members), nil
}

// memberViews points the values of members, the top-level members of the
// object b in order, at b's bytes (a buffer that grew, or a copy).
func memberViews(b []byte, members []member) []member {
	off := 1 // {
	for i := range members {
		off += quotedLen(members[i].key) + 1 // "key":
		l := len(members[i].value)
		members[i].value = b[off : off+l : off+l]
		off += l + 1 // the value and , or }
	}
	return members
}

// quotedLen is the length of appendString(nil, s).
func quotedLen(s string) int {
	n := 2 + len(s)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"', c == '\\', c == '\n', c == '\r', c == '\t':
			n++
		case c < 0x20:
			n += 5
		}
	}
	return n
}

// writeField appends n's value as a field of its parent: null, an array
// (a repeated field), or its value.
func (n *pqNode) writeField(b []byte, cols [][]parquet.Value) ([]byte, error) {
	switch n.rep {
	case format.Repeated:
		return n.writeRepeated(b, cols, n, func(b []byte, cols [][]parquet.Value) ([]byte, error) {
			return n.writeValue(b, cols)
		})
	case format.Optional:
		if cols[n.first][0].DefinitionLevel() < n.maxDef {
			return append(b, "null"...), nil
		}
	}
	return n.writeValue(b, cols)
}

// writeValue appends n's value, present and not null.
func (n *pqNode) writeValue(b []byte, cols [][]parquet.Value) ([]byte, error) {
	var err error
	switch n.kind {
	case pqGroup:
		b = append(b, '{')
		for i, c := range n.children {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, c.name)
			b = append(b, ':')
			if b, err = c.writeField(b, cols); err != nil {
				return b, fmt.Errorf("%s: %w", c.name, err)
			}
		}
		return append(b, '}'), nil
	case pqList:
		item := n.item
		return n.writeRepeated(b, cols, n.repeated, func(b []byte, cols [][]parquet.Value) ([]byte, error) {
			if item == n.repeated {
				return item.writeValue(b, cols)
			}
			return item.writeField(b, cols)
		})
	case pqMap:
		kv := n.repeated
		key, val := kv.children[0], kv.children[1]
		b = append(b, '{')
		first := true
		var kb []byte
		b, err = n.eachElement(b, cols, kv, func(b []byte, cols [][]parquet.Value) ([]byte, error) {
			if !first {
				b = append(b, ',')
			}
			first = false
			// A key is text: a string as itself, another value as its JSON.
			if kb, err = key.writeField(kb[:0], cols); err != nil {
				return b, fmt.Errorf("key: %w", err)
			}
			if len(kb) > 0 && kb[0] == '"' {
				b = append(b, kb...)
			} else {
				b = appendString(b, string(kb))
			}
			b = append(b, ':')
			return val.writeField(b, cols)
		})
		if err != nil {
			return b, err
		}
		return append(b, '}'), nil
	}
	return n.writeScalar(b, cols[n.leaf][0])
}

// writeRepeated appends the elements of the repeated node r, each written
// by elem, as a JSON array.
func (n *pqNode) writeRepeated(b []byte, cols [][]parquet.Value, r *pqNode,
	elem func([]byte, [][]parquet.Value) ([]byte, error)) ([]byte, error) {
	b = append(b, '[')
	first := true
	b, err := n.eachElement(b, cols, r, func(b []byte, cols [][]parquet.Value) ([]byte, error) {
		if !first {
			b = append(b, ',')
		}
		first = false
		return elem(b, cols)
	})
	if err != nil {
		return b, err
	}
	return append(b, ']'), nil
}

// eachElement calls fn with the columns of each element of the repeated
// node r in cols: a value of a column whose repetition level is r's
// starts a new element.
func (n *pqNode) eachElement(b []byte, cols [][]parquet.Value, r *pqNode,
	fn func([]byte, [][]parquet.Value) ([]byte, error)) ([]byte, error) {
	if cols[r.first][0].DefinitionLevel() < r.maxDef {
		return b, nil // empty
	}
	if r.scratch == nil {
		r.scratch = make([][]parquet.Value, len(cols))
	}
	sc := r.scratch
	var pos [8]int
	at := pos[:0]
	for c := r.first; c < r.end; c++ {
		at = append(at, 0)
	}
	for {
		done := 0
		for c := r.first; c < r.end; c++ {
			vs := cols[c]
			i := at[c-r.first]
			if i >= len(vs) {
				done++
				continue
			}
			j := i + 1
			for j < len(vs) && vs[j].RepetitionLevel() > r.maxRep {
				j++
			}
			sc[c] = vs[i:j]
			at[c-r.first] = j
		}
		if done == r.end-r.first {
			return b, nil
		}
		if done > 0 {
			return b, errors.New("its columns hold different numbers of elements (corrupt file?)")
		}
		var err error
		if b, err = fn(b, sc); err != nil {
			return b, err
		}
	}
}

// writeScalar appends the JSON of a leaf's value.
func (n *pqNode) writeScalar(b []byte, v parquet.Value) ([]byte, error) {
	switch n.kind {
	case pqBool:
		return strconv.AppendBool(b, v.Boolean()), nil
	case pqInt:
		return strconv.AppendInt(b, n.int64(v), 10), nil
	case pqUint:
		if n.phys == format.Int32 {
			return strconv.AppendUint(b, uint64(uint32(v.Int32())), 10), nil
		}
		return strconv.AppendUint(b, uint64(v.Int64()), 10), nil
	case pqFloat:
		if n.phys == format.Float {
			return appendFloat(b, float64(v.Float()), 32), nil
		}
		return appendFloat(b, v.Double(), 64), nil
	case pqFloat16:
		return appendFloat(b, float16(v.ByteArray()), 32), nil
	case pqDecimal:
		return appendDecimal(b, n.unscaled(v), int(n.scale)), nil
	case pqDate:
		t := time.Unix(int64(v.Int32())*86400, 0).UTC()
		return appendQuoted(b, t.AppendFormat(nil, time.DateOnly)), nil
	case pqTime:
		d := time.Duration(n.int64(v)) * n.unit
		t := time.Unix(0, 0).UTC().Add(d)
		out := t.AppendFormat(nil, "15:04:05.999999999")
		if n.utc {
			out = append(out, 'Z')
		}
		return appendQuoted(b, out), nil
	case pqTimestamp:
		x := v.Int64()
		var t time.Time
		switch n.unit {
		case time.Millisecond:
			t = time.UnixMilli(x)
		case time.Microsecond:
			t = time.UnixMicro(x)
		default:
			t = time.Unix(0, x)
		}
		return appendTime(b, t, n.utc), nil
	case pqInt96:
		i := v.Int96()
		nanos := int64(uint64(i[1])<<32 | uint64(i[0]))
		const julianUnixEpoch = 2440588
		t := time.Unix((int64(i[2])-julianUnixEpoch)*86400, nanos)
		return appendTime(b, t, true), nil
	case pqString:
		s := v.ByteArray()
		if !utf8.Valid(s) {
			return b, errors.New("a string that is not valid UTF-8")
		}
		return appendString(b, string(s)), nil
	case pqJSON:
		s := v.ByteArray()
		if !rawjson.Valid(s) {
			return b, errors.New("a JSON column whose value is not valid JSON")
		}
		return append(b, s...), nil
	case pqUUID:
		u := v.ByteArray()
		var s [36]byte
		hex.Encode(s[0:8], u[0:4])
		s[8] = '-'
		hex.Encode(s[9:13], u[4:6])
		s[13] = '-'
		hex.Encode(s[14:18], u[6:8])
		s[18] = '-'
		hex.Encode(s[19:23], u[8:10])
		s[23] = '-'
		hex.Encode(s[24:], u[10:])
		return appendQuoted(b, s[:]), nil
	case pqInterval:
		u := v.ByteArray()
		b = append(b, `{"months":`...)
		b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(u[0:])), 10)
		b = append(b, `,"days":`...)
		b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(u[4:])), 10)
		b = append(b, `,"milliseconds":`...)
		b = strconv.AppendUint(b, uint64(binary.LittleEndian.Uint32(u[8:])), 10)
		return append(b, '}'), nil
	}
	// pqBinary
	raw := v.ByteArray()
	b = append(b, '"')
	b = base64.StdEncoding.AppendEncode(b, raw)
	return append(b, '"'), nil
}

func (n *pqNode) int64(v parquet.Value) int64 {
	if n.phys == format.Int32 {
		return int64(v.Int32())
	}
	return v.Int64()
}

// unscaled is a decimal's unscaled value: an INT32, INT64 or big-endian
// two's complement bytes.
func (n *pqNode) unscaled(v parquet.Value) *big.Int {
	switch n.phys {
	case format.Int32, format.Int64:
		return big.NewInt(n.int64(v))
	}
	raw := v.ByteArray()
	x := new(big.Int).SetBytes(raw)
	if len(raw) > 0 && raw[0]&0x80 != 0 {
		x.Sub(x, new(big.Int).Lsh(big.NewInt(1), uint(len(raw))*8))
	}
	return x
}

// appendDecimal appends x·10^-scale with exactly scale decimals, as a JSON
// number.
func appendDecimal(b []byte, x *big.Int, scale int) []byte {
	digits := x.Text(10)
	neg := strings.HasPrefix(digits, "-")
	digits = strings.TrimPrefix(digits, "-")
	if neg {
		b = append(b, '-')
	}
	if scale <= 0 {
		b = append(b, digits...)
		for range -scale {
			if digits != "0" {
				b = append(b, '0')
			}
		}
		return b
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	i := len(digits) - scale
	b = append(b, digits[:i]...)
	b = append(b, '.')
	return append(b, digits[i:]...)
}

// appendFloat appends f as encoding/json writes a number, or null for NaN
// and the infinities, which JSON cannot say.
func appendFloat(b []byte, f float64, bits int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	abs := math.Abs(f)
	fmtc := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		fmtc = 'e'
	}
	return strconv.AppendFloat(b, f, fmtc, -1, bits)
}

func float16(raw []byte) float64 {
	h := binary.LittleEndian.Uint16(raw)
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	exp := int(h>>10) & 0x1f
	frac := float64(h & 0x3ff)
	switch exp {
	case 0:
		return sign * math.Ldexp(frac, -24)
	case 0x1f:
		if frac != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1+frac/1024, exp-15)
}

// appendTime appends t in RFC 3339 with as many fractional digits as it
// needs: with Z for an instant (adjusted to UTC), without a zone for a
// local date and time.
func appendTime(b []byte, t time.Time, utc bool) []byte {
	out := t.UTC().AppendFormat(nil, "2006-01-02T15:04:05.999999999")
	if utc {
		out = append(out, 'Z')
	}
	return appendQuoted(b, out)
}

// appendQuoted appends s, which needs no escaping, as a JSON string.
func appendQuoted(b, s []byte) []byte {
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendString appends s as a JSON string (valid UTF-8).
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
