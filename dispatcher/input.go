// Package dispatcher reads input files as a stream, derives stable record
// ids, and publishes a job's records to JetStream idempotently.
package dispatcher

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/rawjson"
)

// Formats of input files (and FormatParquet, parquet.go).
const (
	FormatJSONL = "jsonl"
	FormatCSV   = "csv"
)

// Record is one input record.
type Record struct {
	Line int    // 1-based line of the file where the record starts (Parquet: its row)
	ID   string // from the id field, or a stable hash of the record
	// Fields are the record's top-level fields, undecoded: the dispatcher
	// never needs more, and passes the record's JSON through as it is.
	Fields map[string]json.RawMessage
	Raw    []byte // the record's JSON (JSONL: the line as read; CSV: the row as an object)
	// Files are the files its images and documents name, read for the
	// publishing pass (files.go); FilesSize is what they add to its work
	// message, counted in both passes.
	Files     map[string]broker.File
	FilesSize int64

	// members are the top-level fields of a JSONL record read by the
	// dispatcher's own passes (Reader.views), in place of Fields: views of
	// the reader's buffer, as Raw is then, valid until the next record.
	members []member
	// rows: Line is a row number (a Parquet file's), and errors say so.
	rows bool
}

// where is "line N", or "row N" for a Parquet row.
func (r *Record) where() string {
	if r.rows {
		return fmt.Sprintf("row %d", r.Line)
	}
	return fmt.Sprintf("line %d", r.Line)
}

// member is one top-level field of a record, undecoded.
type member struct {
	key   string
	value json.RawMessage
}

// field is the record's top-level field name.
func (r *Record) field(name string) (json.RawMessage, bool) {
	if r.Fields != nil {
		v, ok := r.Fields[name]
		return v, ok
	}
	for _, m := range r.members {
		if m.key == name {
			return m.value, true
		}
	}
	return nil, false
}

// eachKey calls fn with each of the record's top-level field names (views
// of the reader's buffer for a record read by views: copy one to keep it).
func (r *Record) eachKey(fn func(string)) {
	if r.Fields != nil {
		for k := range r.Fields {
			fn(k)
		}
		return
	}
	for _, m := range r.members {
		fn(m.key)
	}
}

// LineError is a refused input line: "file:line: reason".
type LineError struct {
	File   string
	Line   int
	Reason string
	field  string // the field the record lacks, when that is the reason

	tooLarge bool // the record does not fit in a message (checkSize)
	rows     bool // Line is a Parquet file's row: "file: row N: reason"
}

func (e *LineError) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Reason)
	case e.rows:
		return fmt.Sprintf("%s: row %d: %s", e.File, e.Line, e.Reason)
	}
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// Reader reads records one at a time; the file is never held in memory.
type Reader struct {
	path    string
	format  string
	idField string
	f       *os.File
	hash    io.Writer // sees every byte read, for the job's content hash
	sum     hashSum

	br   *bufio.Reader
	line int

	// views: the dispatcher's own passes read each JSONL line in place
	// (Raw and the members are views of the buffer, valid until the next
	// record) instead of as a copy with a map of its fields.
	views   bool
	long    []byte   // a line longer than the buffer, gathered
	members []member // reused for each record's members
	// idOnly (with views): a line already validated is read only as far as
	// its id field (the publish pass after the validation pass).
	idOnly bool

	cr     *csv.Reader
	header []string

	pq *parquetReader
}

type hashSum interface {
	io.Writer
	Sum([]byte) []byte
}

// FormatOf picks the format from the file extension.
func FormatOf(path string) (string, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".jsonl", ".ndjson", ".json":
		return FormatJSONL, nil
	case ".csv":
		return FormatCSV, nil
	case ".parquet":
		return FormatParquet, nil
	}
	return "", fmt.Errorf("%s: unknown input format (use .jsonl, .ndjson, .csv or .parquet, or --format)", path)
}

// Open opens path. format "" picks it from the extension. idField "" hashes
// each record for its id.
func Open(path, format, idField string) (*Reader, error) {
	if format == "" {
		var err error
		if format, err = FormatOf(path); err != nil {
			return nil, err
		}
	}
	if format != FormatJSONL && format != FormatCSV && format != FormatParquet {
		return nil, fmt.Errorf("--format %q: use jsonl, csv or parquet", format)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	h := xxhash.New()
	r := &Reader{path: path, format: format, idField: idField, f: f, hash: h, sum: h}
	if format == FormatParquet {
		// Read at offsets, not as a stream: the content hash is taken
		// of the whole file at the end (ContentHash).
		if r.pq, err = openParquet(f, path, idField); err != nil {
			f.Close()
			return nil, err
		}
		return r, nil
	}
	r.br = bufio.NewReaderSize(io.TeeReader(f, h), 256<<10)
	if format == FormatCSV {
		r.cr = csv.NewReader(r.br)
		r.cr.ReuseRecord = true
		header, err := r.cr.Read()
		if errors.Is(err, io.EOF) {
			f.Close()
			return nil, &LineError{File: path, Reason: "empty file: no header row and no records"}
		}
		if err != nil {
			f.Close()
			return nil, csvErr(path, err)
		}
		r.header = append([]string(nil), header...)
		seen := map[string]bool{}
		for i, h := range r.header {
			h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
			if h == "" {
				f.Close()
				return nil, &LineError{File: path, Line: 1, Reason: fmt.Sprintf("header column %d is empty", i+1)}
			}
			if seen[h] {
				f.Close()
				return nil, &LineError{File: path, Line: 1, Reason: fmt.Sprintf("header column %q appears twice", h)}
			}
			seen[h] = true
			r.header[i] = h
		}
		if idField != "" && !seen[idField] {
			f.Close()
			return nil, &LineError{File: path, Line: 1, Reason: fmt.Sprintf("--id-field %q is not a column (columns: %s)", idField, strings.Join(r.header, ", "))}
		}
	}
	return r, nil
}

// Close closes the file.
func (r *Reader) Close() error {
	if r.pq != nil {
		r.pq.close()
	}
	return r.f.Close()
}

// ContentHash is the hash of every byte read so far (the whole file after
// io.EOF): 64 bits of xxHash, in hex. It names a job (its derived id) and
// tells a changed input from the same one; it need not resist an attacker,
// and at a few GB/s it costs the validation pass next to nothing (SHA-256
// was a tenth of a dispatch's CPU).
func (r *Reader) ContentHash() string {
	if r.pq != nil && r.pq.hash == "" {
		h, err := hashFile(r.path)
		if err != nil {
			h = "unreadable: " + err.Error() // matches no hash: "changed"
		}
		r.pq.hash = h
	}
	if r.pq != nil {
		return r.pq.hash
	}
	return hex.EncodeToString(r.sum.Sum(nil))
}

// readLine is the next line, newline included: a copy, or with views a
// view of the buffer.
func (r *Reader) readLine() ([]byte, error) {
	if !r.views {
		return r.br.ReadBytes('\n')
	}
	line, err := r.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	r.long = append(r.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = r.br.ReadSlice('\n')
		r.long = append(r.long, line...)
	}
	return r.long, err
}

// Next returns the next record, io.EOF at the end, or a *LineError for a
// bad line (reading can go on after it).
func (r *Reader) Next() (Record, error) {
	switch r.format {
	case FormatCSV:
		return r.nextCSV()
	case FormatParquet:
		return r.nextParquet()
	}
	return r.nextJSONL()
}

func (r *Reader) nextJSONL() (Record, error) {
	for {
		raw, err := r.readLine()
		if len(raw) == 0 && errors.Is(err, io.EOF) {
			return Record{}, io.EOF
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return Record{}, err
		}
		r.line++
		line := bytes.TrimSpace(raw)
		if r.line == 1 {
			// A UTF-8 byte order mark, as Windows editors write (CSV
			// headers get the same treatment).
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
		}
		if len(line) == 0 {
			continue
		}
		rec := Record{Line: r.line, Raw: line}
		if line[0] != '{' {
			var v any
			if err := json.Unmarshal(line, &v); err != nil {
				return rec, &LineError{File: r.path, Line: r.line, Reason: "malformed JSON: " + jsonReason(err)}
			}
			return rec, &LineError{File: r.path, Line: r.line, Reason: fmt.Sprintf("a record must be a JSON object, got %s", jsonKind(v))}
		}
		if r.views {
			r.members, err = members(line, r.members[:0], r.idOnly, r.idField)
			rec.members = r.members
		} else {
			rec.Fields, err = shallowObject(line)
		}
		if err != nil {
			return rec, &LineError{File: r.path, Line: r.line, Reason: "malformed JSON: " + jsonReason(err)}
		}
		if err := r.setID(&rec); err != nil {
			return rec, err
		}
		return rec, nil
	}
}

// shallowObject splits a JSON object into its top-level fields, undecoded,
// in one validating pass (rawjson.Members) that neither decodes the line
// nor copies it (a line read afresh is never written to); an invalid line
// gets encoding/json's error, which names what is wrong.
func shallowObject(line []byte) (map[string]json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	err := rawjson.Members(line, func(k string, v []byte) bool {
		obj[k] = v
		return true
	})
	return obj, err
}

// members is shallowObject for the dispatcher's own passes: the fields
// appended to buf, as views of line, and no map. idOnly: up to the id field
// (idField, or AutoIDField) only.
func members(line []byte, buf []member, idOnly bool, idField string) ([]member, error) {
	if idField == "" {
		idField = AutoIDField
	}
	err := rawjson.Members(line, func(k string, v []byte) bool {
		buf = append(buf, member{k, v})
		return !idOnly || k != idField
	})
	return buf, err
}

func (r *Reader) nextCSV() (Record, error) {
	fields, err := r.cr.Read()
	line, _ := r.cr.FieldPos(0)
	if errors.Is(err, io.EOF) {
		return Record{}, io.EOF
	}
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount) {
			return Record{Line: pe.StartLine, Raw: []byte(strings.Join(fields, ","))}, &LineError{File: r.path, Line: pe.StartLine,
				Reason: fmt.Sprintf("ragged row: %d fields, the header has %d", len(fields), len(r.header))}
		}
		return Record{Line: line}, csvErr(r.path, err)
	}
	rec := Record{Line: line, Fields: make(map[string]json.RawMessage, len(fields))}
	obj := make(map[string]string, len(fields))
	for i, v := range fields {
		obj[r.header[i]] = v
		rec.Fields[r.header[i]], _ = json.Marshal(v)
	}
	rec.Raw, _ = json.Marshal(obj)
	if err := r.setID(&rec); err != nil {
		return rec, err
	}
	return rec, nil
}

// AutoIDField is used as the record id when --id-field is not given and a
// record has it; records without it get a hash of their content.
const AutoIDField = "id"

func (r *Reader) setID(rec *Record) error {
	field := r.idField
	if field == "" {
		if v, ok := rec.field(AutoIDField); ok && string(v) != "null" {
			field = AutoIDField
		} else {
			rec.ID = HashID(rec.Raw)
			return nil
		}
	}
	raw, ok := rec.field(field)
	if !ok || string(raw) == "null" {
		return &LineError{File: r.path, Line: rec.Line, Reason: fmt.Sprintf("id field %q is missing", field)}
	}
	var v any
	switch raw[0] {
	case '"':
		s, ok := rawjson.String(raw) // validated when the line was read
		if !ok {
			return &LineError{File: r.path, Line: rec.Line, Reason: fmt.Sprintf("id field %q: not a JSON string", field)}
		}
		v = strings.Clone(s) // a view of the buffer, with views
	case '{', '[', 't', 'f':
		if err := json.Unmarshal(raw, &v); err != nil {
			return &LineError{File: r.path, Line: rec.Line, Reason: fmt.Sprintf("id field %q: %v", field, err)}
		}
	default:
		v = json.Number(string(raw)) // validated when the line was read
	}
	var id string
	switch t := v.(type) {
	case string:
		id = t // as written: " e " and "e" are two ids
	case json.Number:
		id = t.String()
	case bool:
		id = strconv.FormatBool(t)
	default:
		return &LineError{File: r.path, Line: rec.Line, Reason: fmt.Sprintf("id field %q must be a string or number, got %s", field, jsonKind(v))}
	}
	if strings.TrimSpace(id) == "" {
		return &LineError{File: r.path, Line: rec.Line, Reason: fmt.Sprintf("id field %q is empty", field)}
	}
	if len(id) > 256 {
		return &LineError{File: r.path, Line: rec.Line, Reason: fmt.Sprintf("id field %q is longer than 256 bytes", field)}
	}
	rec.ID = id
	return nil
}

// HashID is the stable id of a record without an id field: a hash of its
// JSON text with insignificant white space removed, so the same record in
// the same file always gets the same id.
func HashID(raw []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) == nil {
		raw = buf.Bytes()
	}
	sum := sha256.Sum256(raw)
	return "r" + hex.EncodeToString(sum[:10])
}

func csvErr(path string, err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &LineError{File: path, Line: pe.Line, Reason: "malformed CSV: " + pe.Err.Error()}
	}
	return fmt.Errorf("%s: %w", path, err)
}

func jsonReason(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s (at byte %d)", se.Error(), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of line (unterminated object or string)"
	}
	return err.Error()
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
