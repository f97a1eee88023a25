package dispatcher

import (
	"errors"
	"fmt"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/parquet-go/parquet-go/format"
)

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
