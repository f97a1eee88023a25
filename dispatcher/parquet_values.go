package dispatcher

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"

	"github.com/jetpool/jetpool/internal/rawjson"
)

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
