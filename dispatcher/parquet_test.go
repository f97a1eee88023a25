package dispatcher_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/deprecated"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/parquettest"
	"github.com/jetpool/jetpool/internal/testenv"
)

// readAll reads every record of path, and the errors of its bad rows.
func readAll(t *testing.T, path, idField string) ([]dispatcher.Record, []error) {
	t.Helper()
	r, err := dispatcher.Open(path, "", idField)
	require.NoError(t, err)
	defer r.Close()
	var recs []dispatcher.Record
	var bad []error
	for {
		rec, err := r.Next()
		var le *dispatcher.LineError
		switch {
		case errors.Is(err, io.EOF):
			return recs, bad
		case errors.As(err, &le):
			bad = append(bad, err)
		case err != nil:
			require.NoError(t, err)
		default:
			recs = append(recs, rec)
		}
	}
}

// A file DuckDB wrote (every type it writes, nested ones and nulls, three
// row groups) reads as testdata/parquet/types.jsonl says, which was checked
// by hand against DuckDB's own reading of it: structs as objects, lists as
// arrays (null and empty kept apart), maps as objects, decimals as their
// exact digits, dates and times as ISO 8601 text, binary as base64, JSON as
// itself.
func TestParquetReadsAFileDuckDBWrote(t *testing.T) {
	t.Parallel()
	recs, bad := readAll(t, "testdata/parquet/types.parquet", "")
	require.Empty(t, bad)
	want, err := os.ReadFile("testdata/parquet/types.jsonl")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(want)), "\n")
	require.Len(t, recs, len(lines))
	for i, rec := range recs {
		require.Equal(t, i+1, rec.Line, "a record's line is its row")
		require.JSONEq(t, lines[i], string(rec.Raw))
		require.Equal(t, lines[i], string(rec.Raw), "the same bytes, so the same hash ids")
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(rec.Raw, &fields))
		require.Len(t, rec.Fields, len(fields))
		for k, v := range fields {
			require.Equal(t, string(v), string(rec.Fields[k]), "field %s", k)
		}
	}
	require.Equal(t, "0", recs[0].ID, "the id column, a number, as its text")
}

// DuckDB's own reading of the fixture agrees with jetpool's, value for
// value, for the types both write alike in JSON.
func TestParquetReadAgreesWithDuckDB(t *testing.T) {
	t.Parallel()
	path, err := filepath.Abs("testdata/parquet/types.parquet")
	require.NoError(t, err)
	cols := "id, text, maybe, s, ns, l, m, flag, f, ll, lst, empty, tiny, us, d"
	got := parquettest.DuckDB(t, "SELECT to_json(t)::VARCHAR AS j FROM (SELECT "+cols+" FROM '"+path+"') t")
	recs, _ := readAll(t, path, "")
	require.Len(t, got.Rows, len(recs))
	for i, row := range got.Rows {
		var ours bytes.Buffer
		ours.WriteByte('{')
		for j, c := range strings.Split(cols, ", ") {
			if j > 0 {
				ours.WriteByte(',')
			}
			ours.WriteString(`"` + c + `":` + string(recs[i].Fields[c]))
		}
		ours.WriteByte('}')
		require.JSONEq(t, row["j"].(string), ours.String(), "row %d", i+1)
	}
}

// A file of several row groups is read through, in order.
func TestParquetRowGroups(t *testing.T) {
	t.Parallel()
	recs, bad := readAll(t, "testdata/parquet/groups.parquet", "")
	require.Empty(t, bad)
	require.Len(t, recs, 5000)
	for i, r := range recs {
		require.Equal(t, fmt.Sprintf("g%d", i+1), r.ID)
		require.Equal(t, i+1, r.Line)
	}
}

// The dispatcher's own passes read a Parquet row in place (views of the
// reader's buffer) as they read a JSONL line: the check finds the same
// records and fields.
func TestParquetCheckInput(t *testing.T) {
	t.Parallel()
	wf := testenv.Workflow(t, simWorkflow)
	c, err := dispatcher.CheckInput(wf, dispatcher.Options{Input: "testdata/parquet/records.parquet"})
	require.NoError(t, err)
	require.Empty(t, c.Bad)
	require.EqualValues(t, 20, c.Records)
	require.NotEmpty(t, c.ContentHash)

	// The same rows as JSONL are another file, but the same records.
	recs, _ := readAll(t, "testdata/parquet/records.parquet", "")
	var jsonl bytes.Buffer
	for _, r := range recs {
		jsonl.Write(r.Raw)
		jsonl.WriteByte('\n')
	}
	require.Equal(t, "r1", recs[0].ID)
	require.JSONEq(t, `{"id":"r1","text":"record number 1","meta":{"lang":"en","tags":["a","b"]}}`, string(recs[0].Raw))
	in := testenv.WriteFile(t, "in.jsonl", jsonl.String())
	cj, err := dispatcher.CheckInput(wf, dispatcher.Options{Input: in})
	require.NoError(t, err)
	require.Equal(t, c.Records, cj.Records)
}

// writeParquet writes rows of T with parquet-go, for files DuckDB cannot
// make (invalid UTF-8, INT96).
func writeParquet[T any](t *testing.T, name string, rows []T, opts ...parquet.WriterOption) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	f, err := os.Create(path)
	require.NoError(t, err)
	w := parquet.NewGenericWriter[T](f, opts...)
	_, err = w.Write(rows)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	return path
}

// A bad row is a bad line: its row and field named, the rows after it
// read; ids follow the JSONL rules (--id-field, "id", a hash), and an id
// used twice names both rows.
func TestParquetBadRowsAndIDs(t *testing.T) {
	t.Parallel()
	type row struct {
		ID   string `parquet:"id,optional"`
		Text string `parquet:"text"`
		Key  int64  `parquet:"key"`
	}
	path := writeParquet(t, "in.parquet", []row{{"a", "ok", 1}, {"b", "bad \xff utf-8", 2}, {"", "no id", 3}, {"a", "again", 4}})
	recs, bad := readAll(t, path, "")
	require.Len(t, recs, 3)
	require.Len(t, bad, 1)
	require.EqualError(t, bad[0], path+`: row 2: field "text": a string that is not valid UTF-8`)
	require.Equal(t, "a", recs[0].ID)
	require.Equal(t, dispatcher.HashID(recs[1].Raw), recs[1].ID, "an empty id is hashed as JSONL's is")

	recs, _ = readAll(t, path, "key")
	require.Equal(t, "4", recs[2].ID)

	_, err := dispatcher.Open(path, "", "nope")
	require.EqualError(t, err, path+`: --id-field "nope" is not a column (columns: id, text, key)`)

	wf := testenv.Workflow(t, simWorkflow)
	c, err := dispatcher.CheckInput(wf, dispatcher.Options{Input: path})
	require.NoError(t, err)
	require.Len(t, c.Bad, 1)
	require.Len(t, c.DupErrs, 1)
	require.EqualError(t, c.DupErrs[0], path+`: row 4: id "a" already used at row 1`)
}

// A legacy INT96 timestamp (Impala, older Spark) is an instant, in UTC.
func TestParquetInt96(t *testing.T) {
	t.Parallel()
	type row struct {
		ID int64            `parquet:"id"`
		At deprecated.Int96 `parquet:"at"`
	}
	at := time.Date(2024, 3, 4, 5, 6, 7, 891, time.UTC)
	day := at.Unix()/86400 + 2440588
	nanos := at.Sub(time.Unix(at.Unix()/86400*86400, 0))
	v := deprecated.Int96{uint32(nanos), uint32(nanos >> 32), uint32(day)}
	recs, bad := readAll(t, writeParquet(t, "in.parquet", []row{{1, v}}), "")
	require.Empty(t, bad)
	require.JSONEq(t, `{"id":1,"at":"2024-03-04T05:06:07.000000891Z"}`, string(recs[0].Raw))
}

// Files that cannot be read are refused with the file named, and where
// it stopped: not Parquet, cut short, a corrupt page, a type it does not
// read.
func TestParquetBadFiles(t *testing.T) {
	t.Parallel()
	good, err := os.ReadFile("testdata/parquet/records.parquet")
	require.NoError(t, err)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}

	p := write("jsonl.parquet", []byte(`{"id":"a"}`+"\n"))
	_, err = dispatcher.Open(p, "", "")
	var fe *dispatcher.FileError
	require.ErrorAs(t, err, &fe)
	require.ErrorContains(t, err, p+": not a Parquet file (it does not start with PAR1)")

	p = write("cut.parquet", good[:len(good)/2])
	_, err = dispatcher.Open(p, "", "")
	require.ErrorContains(t, err, p+": not a whole Parquet file (truncated?")

	p = write("empty.parquet", nil)
	_, err = dispatcher.Open(p, "", "")
	require.ErrorContains(t, err, p+": not a Parquet file")

	// A page's bytes overwritten: the row group's rows before it are
	// read, then the error names the row it stopped at and the column.
	corrupt := bytes.Clone(good)
	i := bytes.Index(corrupt, []byte("record number 1"))
	require.Positive(t, i, "the first page of text is stored plain")
	copy(corrupt[i-40:], bytes.Repeat([]byte{0xff}, 60))
	p = write("corrupt.parquet", corrupt)
	r, err := dispatcher.Open(p, "", "")
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Next()
	require.ErrorAs(t, err, &fe)
	require.Regexp(t, `^`+p+`: row 1: row group 0: decoding page 0 of column "(id|text)": `, err.Error())
	_, err2 := r.Next()
	require.Equal(t, err, err2, "the file ends there")

	p = filepath.Join(dir, "variant.parquet")
	f, err := os.Create(p)
	require.NoError(t, err)
	w := parquet.NewWriter(f, parquet.NewSchema("x", parquet.Group{"v": parquet.Optional(parquet.Variant())}))
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
	_, err = dispatcher.Open(p, "", "")
	require.EqualError(t, err, p+`: column "v": VARIANT columns are not supported (cast it to JSON text before exporting)`)
}

// A page corrupt in the second row group, found once the first group's
// records are published: the dispatch is refused (a *RefusedError, exit 2
// in the CLI) naming the file, the row and the column, and nothing of the
// job is left.
func TestParquetCorruptPageRefusesTheDispatch(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	good, err := os.ReadFile("testdata/parquet/groups.parquet")
	require.NoError(t, err)
	pf, err := parquet.OpenFile(bytes.NewReader(good), int64(len(good)))
	require.NoError(t, err)
	md := pf.Metadata().RowGroups[1].Columns[1].MetaData // the second group's text
	bad := bytes.Clone(good)
	copy(bad[md.DataPageOffset:], bytes.Repeat([]byte{0xfe}, int(md.TotalCompressedSize)))
	in := testenv.WriteFile(t, "in.parquet", string(bad))
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	_, err = d.Dispatch(context.Background(), testenv.Workflow(t, simWorkflow), dispatcher.Options{Input: in, JobID: "corrupt"})
	var re *dispatcher.RefusedError
	require.ErrorAs(t, err, &re)
	require.Regexp(t, `^`+in+`: row 2049: row group 1: .*column "text"`, err.Error())
	n, err := b.Count(context.Background(), broker.StreamWork, "jetpool.work.>")
	require.NoError(t, err)
	require.Zero(t, n, "nothing left published")
	_, _, err = b.GetJob(context.Background(), "corrupt")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
}

// A MAP whose keys are not strings has them as their JSON text; NaN, which
// JSON cannot hold, is null; unsigned and small integers are numbers.
func TestParquetMapKeysAndSpecialNumbers(t *testing.T) {
	t.Parallel()
	type row struct {
		M map[int32]string `parquet:"m"`
		F float64          `parquet:"f"`
		U uint64           `parquet:"u"`
		S int8             `parquet:"s"`
	}
	recs, bad := readAll(t, writeParquet(t, "in.parquet", []row{{M: map[int32]string{7: "seven"}, F: math.NaN(), U: math.MaxUint64, S: -3}}), "")
	require.Empty(t, bad)
	require.JSONEq(t, `{"m":{"7":"seven"},"f":null,"u":18446744073709551615,"s":-3}`, string(recs[0].Raw))
}
