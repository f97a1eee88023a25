package export_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/export"
	"github.com/jetpool/jetpool/internal/parquettest"
	"github.com/jetpool/jetpool/internal/testenv"
)

const pipeline = `providers: {sim: {kind: sim}}
defaults: {provider: sim}
carry: [text, n]
actions:
  - {name: first, prompt: "{{ .text }}"}
  - name: last
    prompt: "{{ .first }}"
    expect:
      schema:
        type: object
        additionalProperties: false
        properties:
          title: {type: string}
          year: {type: integer}
          score: {type: number}
          ok: {type: boolean}
          tags: {type: array, items: {type: string}}
          authors:
            type: array
            items: {type: object, additionalProperties: false, properties: {name: {type: string}}}
          extra: {type: object}
`

func ptr[T any](v T) *T { return &v }

// setup stores the results of a two-action job: two records ok at the last
// action (and so at the first), one failed at the first with a partial
// answer, one failed at the last with none.
func setup(t *testing.T) (*broker.Broker, *broker.Job, export.Options) {
	t.Helper()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, pipeline)
	job := &broker.Job{ID: "px", Actions: []string{"first", "last"}}
	at := time.Date(2026, 12, 7, 10, 11, 12, 345e6, time.UTC)
	ctx := context.Background()
	for _, r := range []*broker.Result{
		{ID: "a", Line: 1, Action: "first", Status: broker.StatusOK, Output: "an answer"},
		{ID: "a", Line: 1, Action: "last", Status: broker.StatusOK, Finished: at, Provider: "sim", Model: "m",
			Output: map[string]any{"title": "Dune", "year": 1965, "score": 4.5, "ok": true, "tags": []any{"x", "y"},
				"authors": []any{map[string]any{"name": "F. H."}}, "extra": map[string]any{"k": []any{1}}},
			Usage: broker.Usage{InputTokens: 10, OutputTokens: 5}, Cost: ptr(0.25), TotalCost: ptr(0.5),
			Totals: &broker.Totals{Calls: 3}, Recovery: broker.Recovery{Attempts: 2, Deliveries: 1,
				Routes: []broker.Route{{After: 1, From: "sim/m0", To: "sim/m", On: "content_filter"}}},
			Deployment: "sim-2", Input: map[string]any{"text": "t1", "n": 1}},
		{ID: "b", Line: 2, Action: "first", Status: broker.StatusFailed, Reason: "truncated", Output: "a partial",
			Error: &broker.ResultError{Class: "truncated", Message: "failed permanently: TruncatedError"}, Finished: at},
		{ID: "c", Line: 3, Action: "first", Status: broker.StatusOK, Output: "x"},
		{ID: "c", Line: 3, Action: "last", Status: broker.StatusOK, Output: map[string]any{"title": "T", "tags": []any{}}, Finished: at,
			Recovery: broker.Recovery{Routes: []broker.Route{{From: "sim/m0", To: "sim/m", On: "outage"}, {After: 2, From: "sim/m", To: "sim/m2", On: "server"}}}},
		{ID: "d", Line: 4, Action: "last", Status: broker.StatusFailed, Reason: "exhausted", Finished: at},
	} {
		r.Job = job.ID
		require.NoError(t, b.WriteResult(ctx, r))
	}
	return b, job, export.Options{Format: export.Parquet, Workflow: wf, Carry: wf.Carry, SortChunk: 2, RowGroup: 2}
}

func exportTo(t *testing.T, b *broker.Broker, job *broker.Job, o export.Options) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "results.parquet")
	o.TmpDir = filepath.Dir(path)
	n, err := export.ToFile(path, func(w io.Writer) (export.Counts, error) {
		return export.Write(context.Background(), b, job, w, o)
	})
	require.NoError(t, err)
	require.Equal(t, export.Counts{Records: 4, OK: 2, Failed: 2}, n)
	return path
}

// A Parquet export read back by DuckDB: the output's fields as typed
// columns (a closed object a struct, arrays lists, an open object JSON),
// the metadata typed, the carried fields beside them, a partial answer
// that the typed column cannot hold in output_text; row groups of
// Options.RowGroup.
func TestParquetExportReadByDuckDB(t *testing.T) {
	t.Parallel()
	b, job, o := setup(t)
	o.Sorted = true
	path := exportTo(t, b, job, o)

	types := parquettest.DuckDB(t, "DESCRIBE SELECT * FROM '"+path+"'")
	got := map[string]string{}
	var order []string
	for _, r := range types.Rows {
		got[r["column_name"].(string)] = r["column_type"].(string)
		order = append(order, r["column_name"].(string))
	}
	require.Equal(t, []string{"id", "line", "action", "status", "reason", "output", "output_text", "finish_reason",
		"finish_reason_raw", "error_class", "error", "input_tokens", "output_tokens", "cached_input_tokens",
		"cache_write_tokens", "reasoning_tokens", "cost", "total_cost", "latency_ms", "attempts", "deliveries", "calls",
		"provider", "model", "deployment", "routes", "job", "revision", "finished_at", "input"}, order)
	require.Equal(t, `STRUCT(authors STRUCT("name" VARCHAR)[], extra JSON, ok BOOLEAN, score DOUBLE, tags VARCHAR[], title VARCHAR, "year" BIGINT)`, got["output"])
	require.Equal(t, "BIGINT", got["line"])
	require.Equal(t, "DOUBLE", got["cost"])
	require.Equal(t, "BIGINT", got["calls"])
	require.Equal(t, "TIMESTAMP WITH TIME ZONE", got["finished_at"])
	require.Equal(t, `STRUCT("text" VARCHAR, n VARCHAR)`, got["input"])
	require.Equal(t, "VARCHAR", got["deployment"])
	require.Equal(t, `STRUCT("after" BIGINT, "from" VARCHAR, "to" VARCHAR, "on" VARCHAR)[]`, got["routes"])
	routes := parquettest.DuckDB(t, "SELECT id, deployment, len(routes) AS n, routes[1].\"after\" AS after1,"+
		" routes[1].\"to\" AS to1, routes[-1].\"on\" AS on_last FROM '"+path+"' ORDER BY id").Rows
	want := []string{
		`{"id":"a","deployment":"sim-2","n":"1","after1":"1","to1":"sim/m","on_last":"content_filter"}`,
		`{"id":"b","deployment":null,"n":null,"after1":null,"to1":null,"on_last":null}`,
		`{"id":"c","deployment":null,"n":"2","after1":null,"to1":"sim/m","on_last":"server"}`,
		`{"id":"d","deployment":null,"n":null,"after1":null,"to1":null,"on_last":null}`,
	}
	for i, r := range routes {
		j, err := json.Marshal(r)
		require.NoError(t, err)
		require.JSONEq(t, want[i], string(j), "row %d", i+1)
	}

	rows := parquettest.DuckDB(t, "SELECT id, line, status, output.title AS title, output.year AS year, output.tags AS tags,"+
		" output.authors[1].name AS author, output.extra AS extra, output_text, error_class, cost, calls, input.text AS text,"+
		" epoch_ms(finished_at) AS at FROM '"+path+"'").Rows
	require.Len(t, rows, 4)
	want = []string{
		`{"id":"a","line":"1","status":"ok","title":"Dune","year":"1965","tags":["x","y"],"author":"F. H.","extra":"{\"k\":[1]}","output_text":null,"error_class":null,"cost":0.25,"calls":"3","text":"t1","at":"1796638272345"}`,
		`{"id":"b","line":"2","status":"failed","title":null,"year":null,"tags":null,"author":null,"extra":null,"output_text":"a partial","error_class":"truncated","cost":null,"calls":null,"text":null,"at":"1796638272345"}`,
		`{"id":"c","line":"3","status":"ok","title":"T","year":null,"tags":[],"author":null,"extra":null,"output_text":null,"error_class":null,"cost":null,"calls":null,"text":null,"at":"1796638272345"}`,
		`{"id":"d","line":"4","status":"failed","title":null,"year":null,"tags":null,"author":null,"extra":null,"output_text":null,"error_class":null,"cost":null,"calls":null,"text":null,"at":"1796638272345"}`,
	}
	for i, r := range rows {
		j, err := json.Marshal(r)
		require.NoError(t, err)
		require.JSONEq(t, want[i], string(j), "row %d", i+1)
	}

	groups := parquettest.DuckDB(t, "SELECT count(DISTINCT row_group_id) AS n FROM parquet_metadata('"+path+"')").Rows
	require.Equal(t, "2", groups[0]["n"], "row groups of 2 results")
}

// jetpool reads its own export back, as a record per row; an input file
// (--include-input) is carried whole in the record column, whatever its
// format; a job with no results is a valid file with the schema.
func TestParquetExportReadBack(t *testing.T) {
	t.Parallel()
	b, job, o := setup(t)
	in := testenv.WriteFile(t, "in.jsonl", `{"id":"a","n":1}`+"\n"+`{"id":"b","n":2}`+"\n"+`{"id":"c","n":3}`+"\n")
	o.Input = in
	path := exportTo(t, b, job, o)
	r, err := dispatcher.Open(path, "", "")
	require.NoError(t, err)
	defer r.Close()
	var recs []dispatcher.Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		recs = append(recs, rec)
	}
	require.Len(t, recs, 4)
	var first map[string]any
	require.NoError(t, json.Unmarshal(recs[0].Raw, &first))
	require.Equal(t, "a", recs[0].ID)
	require.Equal(t, map[string]any{"title": "Dune", "year": 1965.0, "score": 4.5, "ok": true, "tags": []any{"x", "y"},
		"authors": []any{map[string]any{"name": "F. H."}}, "extra": map[string]any{"k": []any{1.0}}}, first["output"])
	require.Equal(t, map[string]any{"id": "a", "n": 1.0}, first["record"])
	require.Equal(t, "2026-12-07T10:11:12.345Z", first["finished_at"])
	require.Contains(t, string(recs[3].Raw), `"record":null`, "line 4 is not in the input")

	empty := &broker.Job{ID: "none", Actions: []string{"first", "last"}}
	path = filepath.Join(t.TempDir(), "empty.parquet")
	f, err := os.Create(path)
	require.NoError(t, err)
	o.Input = ""
	n, err := export.Write(context.Background(), b, empty, f, o)
	require.NoError(t, err)
	require.Zero(t, n.Records)
	require.NoError(t, f.Close())
	rows := parquettest.DuckDB(t, "SELECT count(*) AS n FROM '"+path+"'").Rows
	require.Equal(t, "0", rows[0]["n"])
}
