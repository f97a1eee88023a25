// Package export writes a job's final results, one per record, as JSONL,
// CSV or Parquet, in the order they are stored or (Options.Sorted) in input
// order, with bounded memory whatever the size of the job.
package export

import (
	"bufio"
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/workflow"
)

// Formats of an export.
const (
	JSONL   = "jsonl"
	CSV     = "csv"
	Parquet = "parquet"
)

// FormatOf is the format a results file's name asks for: Parquet for
// .parquet, CSV for .csv, JSONL otherwise.
func FormatOf(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".parquet":
		return Parquet
	case ".csv":
		return CSV
	}
	return JSONL
}

// ErrFormat is returned when Options.Format is none of the formats.
var ErrFormat = errors.New("unknown export format")

// SortChunkDefault is how many results a sorted export sorts in memory at
// once: each chunk is sorted and spilled to a temp file, and the chunks
// are merged, so memory stays flat however large the job (a 1M-record job
// is 50 chunks, merged by a heap of 50 heads).
const SortChunkDefault = 20000

// Options steer Write.
type Options struct {
	Format string // JSONL (default), CSV or Parquet
	Sorted bool   // in input order (by the record's input line)
	// Input, when set, is the job's input file: each line gets its record,
	// as "record" (JSONL, Parquet) or an input column (CSV). Implies
	// Sorted. InputFormat is its format ("": from its extension).
	Input, InputFormat string
	// Carry is the workflow's carry: fields (CSV columns input.<field>,
	// Parquet fields of the input group).
	Carry []string
	// Workflow is the job's workflow (its current revision): a Parquet
	// export types the output column by its last action's. nil: the
	// output is a JSON column.
	Workflow *workflow.Workflow
	TmpDir   string // chunks of a sort ("": the system's)
	// SortChunk is how many results are sorted in memory at once
	// (SortChunkDefault).
	SortChunk int
	// RowGroup is how many results a Parquet row group holds
	// (RowGroupDefault).
	RowGroup int
}

// Counts is what an export wrote.
type Counts struct{ Records, OK, Failed int64 }

// rowWriter writes one result in a format.
type rowWriter interface {
	write(r *broker.Result, record json.RawMessage) error
	flush() error
}

// Write writes the job's final results (one per record: ok at the last
// action, or failed at any) to w. An unknown o.Format is ErrFormat.
func Write(ctx context.Context, b *broker.Broker, job *broker.Job, w io.Writer, o Options) (Counts, error) {
	var n Counts
	bw := bufio.NewWriterSize(w, 1<<20)
	var out rowWriter
	switch cmp.Or(o.Format, JSONL) {
	case JSONL, CSV:
		out = newLineWriter(bw, o)
	case Parquet:
		out = newParquetWriter(bw, o)
	default:
		return n, fmt.Errorf("%w %q: want jsonl, csv or parquet", ErrFormat, o.Format)
	}
	emit := func(r *broker.Result, record json.RawMessage) error {
		n.Records++
		if r.Status == broker.StatusOK {
			n.OK++
		} else {
			n.Failed++
		}
		return out.write(r, record)
	}
	if err := Each(ctx, b, job, o, emit); err != nil {
		return n, err
	}
	if err := out.flush(); err != nil {
		return n, err
	}
	return n, bw.Flush()
}

// Each calls emit for each of the job's final results (one per record):
// as stored, or in input order when o.Sorted or o.Input is set (an
// external sort over temp files: memory stays flat), each then with its
// input record when o.Input is set. An error of emit stops it.
func Each(ctx context.Context, b *broker.Broker, job *broker.Job, o Options, emit func(r *broker.Result, record json.RawMessage) error) error {
	if o.Sorted || o.Input != "" {
		return sortedResults(ctx, b, job, o, emit)
	}
	return b.EachFinal(ctx, job, func(r *broker.Result, final bool) error {
		if final {
			return emit(r, nil)
		}
		return nil
	})
}

// lineWriter writes one result as JSONL or CSV.
type lineWriter struct {
	o     Options
	enc   *json.Encoder
	csv   *csv.Writer
	row   []string
	wrote bool
}

// csvColumns are the fixed columns of a CSV export, then input.<field> for
// each carried field, then input (the whole record) with --include-input.
var csvColumns = []string{"id", "line", "action", "status", "reason", "output", "finish_reason", "finish_reason_raw",
	"error_class", "error", "input_tokens", "output_tokens", "cached_input_tokens", "reasoning_tokens",
	"cost", "total_cost", "latency_ms", "attempts", "deliveries", "provider", "model", "deployment", "routes", "job", "finished_at"}

func newLineWriter(w io.Writer, o Options) *lineWriter {
	lw := &lineWriter{o: o}
	if o.Format == CSV {
		lw.csv = csv.NewWriter(w)
	} else {
		lw.enc = json.NewEncoder(w)
		lw.enc.SetEscapeHTML(false)
	}
	return lw
}

func (lw *lineWriter) write(r *broker.Result, record json.RawMessage) error {
	if lw.enc != nil {
		if record == nil {
			return lw.enc.Encode(r)
		}
		return lw.enc.Encode(struct {
			*broker.Result
			Record json.RawMessage `json:"record"`
		}{r, record})
	}
	if !lw.wrote {
		lw.wrote = true
		head := slices.Clone(csvColumns)
		for _, f := range lw.o.Carry {
			head = append(head, "input."+f)
		}
		if lw.o.Input != "" {
			head = append(head, "input")
		}
		if err := lw.csv.Write(head); err != nil {
			return err
		}
	}
	var class, msg string
	if r.Error != nil {
		class, msg = r.Error.Class, r.Error.Message
	}
	money := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'f', -1, 64)
	}
	lw.row = append(lw.row[:0], r.ID, strconv.Itoa(r.Line), r.Action, r.Status, r.Reason, cellText(r.Output),
		r.FinishReason, r.FinishReasonRaw, class, msg,
		strconv.Itoa(r.Usage.InputTokens), strconv.Itoa(r.Usage.OutputTokens),
		strconv.Itoa(r.Usage.CachedInputTokens), strconv.Itoa(r.Usage.ReasoningTokens),
		money(r.Cost), money(r.TotalCost), strconv.FormatFloat(r.LatencyMS, 'f', -1, 64),
		strconv.Itoa(r.Recovery.Attempts), strconv.Itoa(r.Recovery.Deliveries), r.Provider, r.Model, r.Deployment, routesText(r.Recovery.Routes), r.Job,
		r.Finished.Format("2006-01-02T15:04:05.000Z07:00"))
	for _, f := range lw.o.Carry {
		lw.row = append(lw.row, cellText(r.Input[f]))
	}
	if lw.o.Input != "" {
		lw.row = append(lw.row, string(record))
	}
	return lw.csv.Write(lw.row)
}

func (lw *lineWriter) flush() error {
	if lw.csv != nil {
		lw.csv.Flush()
		return lw.csv.Error()
	}
	return nil
}

// routesText is a result's fallback moves as one CSV cell: their JSON,
// as the JSONL result writes them, "" when there were none.
func routesText(routes []broker.Route) string {
	if len(routes) == 0 {
		return ""
	}
	return cellText(routes)
}

// cellText is a value as one CSV cell: a string as itself, anything else
// as JSON, nothing as "".
func cellText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case json.Number:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// sortedResults calls emit for the job's final results in input order,
// each with its input record when o.Input is set: an external merge sort
// over temp files of o.SortChunk results, then a merge join with the
// input file read from the start (both in line order).
func sortedResults(ctx context.Context, b *broker.Broker, job *broker.Job, o Options,
	emit func(*broker.Result, json.RawMessage) error) error {
	var chunks []*os.File
	defer func() {
		for _, f := range chunks {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	var buf []sortItem
	spill := func() error {
		if len(buf) == 0 {
			return nil
		}
		slices.SortFunc(buf, compareItems)
		f, err := os.CreateTemp(o.TmpDir, "jetpool-sort-*")
		if err != nil {
			return err
		}
		chunks = append(chunks, f)
		w := bufio.NewWriter(f)
		for _, it := range buf {
			if err := writeItem(w, it); err != nil {
				return err
			}
		}
		buf = buf[:0]
		if err := w.Flush(); err != nil {
			return err
		}
		_, err = f.Seek(0, io.SeekStart)
		return err
	}
	err := b.EachFinal(ctx, job, func(r *broker.Result, final bool) error {
		if !final {
			return nil
		}
		data, err := json.Marshal(r)
		if err != nil {
			return err
		}
		buf = append(buf, sortItem{line: r.Line, id: r.ID, data: data})
		if len(buf) >= cmp.Or(o.SortChunk, SortChunkDefault) {
			return spill()
		}
		return nil
	})
	if err == nil {
		err = spill()
	}
	if err != nil {
		return err
	}
	var in *inputCursor
	if o.Input != "" {
		if in, err = openInput(o.Input, o.InputFormat); err != nil {
			return err
		}
		defer in.close()
	}
	return mergeChunks(chunks, func(it sortItem) error {
		var r broker.Result
		if err := json.Unmarshal(it.data, &r); err != nil {
			return err
		}
		var record json.RawMessage
		if in != nil {
			if record, err = in.at(r.Line); err != nil {
				return err
			}
		}
		return emit(&r, record)
	})
}

// sortItem is one result of a sort: its input line (0, from a job older
// than lines in results, sorts last, by id) and its JSON.
type sortItem struct {
	line int
	id   string
	data []byte
}

func compareItems(a, b sortItem) int {
	la, lb := a.line, b.line
	if la == 0 {
		la = int(^uint(0) >> 1)
	}
	if lb == 0 {
		lb = int(^uint(0) >> 1)
	}
	return cmp.Or(cmp.Compare(la, lb), strings.Compare(a.id, b.id))
}

// writeItem frames an item: line, id length, id, data length, data.
func writeItem(w *bufio.Writer, it sortItem) error {
	var hdr [binary.MaxVarintLen64 * 3]byte
	n := binary.PutUvarint(hdr[:], uint64(it.line))
	n += binary.PutUvarint(hdr[n:], uint64(len(it.id)))
	if _, err := w.Write(hdr[:n]); err != nil {
		return err
	}
	w.WriteString(it.id)
	n = binary.PutUvarint(hdr[:], uint64(len(it.data)))
	w.Write(hdr[:n])
	_, err := w.Write(it.data)
	return err
}

func readItem(r *bufio.Reader) (sortItem, error) {
	line, err := binary.ReadUvarint(r)
	if err != nil {
		return sortItem{}, err // io.EOF at the end of a chunk
	}
	field := func() ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, io.ErrUnexpectedEOF
		}
		b := make([]byte, n)
		_, err = io.ReadFull(r, b)
		return b, err
	}
	id, err := field()
	if err != nil {
		return sortItem{}, err
	}
	data, err := field()
	return sortItem{line: int(line), id: string(id), data: data}, err
}

// mergeChunks calls fn with every item of the sorted chunks, in order.
func mergeChunks(chunks []*os.File, fn func(sortItem) error) error {
	h := &itemHeap{}
	for _, f := range chunks {
		r := bufio.NewReaderSize(f, 64<<10)
		it, err := readItem(r)
		if errors.Is(err, io.EOF) {
			continue
		}
		if err != nil {
			return err
		}
		heap.Push(h, head{it, r})
	}
	for h.Len() > 0 {
		top := (*h)[0]
		if err := fn(top.item); err != nil {
			return err
		}
		next, err := readItem(top.r)
		switch {
		case errors.Is(err, io.EOF):
			heap.Pop(h)
		case err != nil:
			return err
		default:
			(*h)[0].item = next
			heap.Fix(h, 0)
		}
	}
	return nil
}

type head struct {
	item sortItem
	r    *bufio.Reader
}

type itemHeap []head

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return compareItems(h[i].item, h[j].item) < 0 }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(head)) }
func (h *itemHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// inputCursor reads the input file forward, for a merge join by line.
type inputCursor struct {
	rd   *dispatcher.Reader
	cur  dispatcher.Record
	done bool
}

func openInput(path, format string) (*inputCursor, error) {
	rd, err := dispatcher.Open(path, format, "")
	if err != nil {
		return nil, fmt.Errorf("--include-input: %w", err)
	}
	return &inputCursor{rd: rd}, nil
}

func (c *inputCursor) close() { c.rd.Close() }

// at returns the record that starts at line (nil when the file has none
// there: a line skipped as bad input, or a file changed since dispatch).
// Lines must be asked for in increasing order.
func (c *inputCursor) at(line int) (json.RawMessage, error) {
	for !c.done && c.cur.Line < line {
		rec, err := c.rd.Next()
		var le *dispatcher.LineError
		switch {
		case errors.Is(err, io.EOF):
			c.done = true
		case errors.As(err, &le):
			continue // a bad line has no result either
		case err != nil:
			return nil, fmt.Errorf("--include-input: %w", err)
		default:
			c.cur = rec
		}
	}
	if c.cur.Line != line || line == 0 {
		return nil, nil
	}
	return json.RawMessage(bytes.TrimSpace(c.cur.Raw)), nil
}

// ToFile writes path through a temp file beside it, renamed into place
// once complete: a reader never sees half an export. The file is created
// as os.Create creates one (mode 0666 less the umask).
func ToFile[T any](path string, write func(io.Writer) (T, error)) (T, error) {
	var zero T
	tmp, err := createBeside(path)
	if err != nil {
		return zero, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	v, err := write(tmp)
	if err != nil {
		return zero, err
	}
	if err := tmp.Sync(); err != nil {
		return zero, err
	}
	if err := tmp.Close(); err != nil {
		return zero, err
	}
	return v, os.Rename(tmp.Name(), path)
}

// createBeside creates a new file of a free name in path's directory
// (os.CreateTemp would make it 0600).
func createBeside(path string) (*os.File, error) {
	dir := filepath.Dir(path)
	for range 100 {
		name := filepath.Join(dir, fmt.Sprintf(".jetpool-results-%016x", rand.Uint64()))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("%s: no free temporary name for the results", dir)
}
