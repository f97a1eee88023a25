package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parquet-go/parquet-go"
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
