package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/dispatcher"
)

const structuredWorkflow = `providers: {sim: {kind: sim}}
carry: [text]
actions:
  - name: extract
    provider: sim
    prompt: "Extract from {{ .text }} ({{ .meta.lang }})"
    expect:
      schema:
        type: object
        additionalProperties: false
        required: [title, year]
        properties:
          title: {type: string}
          year: {type: integer}
`

// readParquet reads a Parquet file with jetpool's own reader, a record a
// row.
func readParquet(t *testing.T, path string) []map[string]any {
	t.Helper()
	r, err := dispatcher.Open(path, "", "")
	require.NoError(t, err)
	defer r.Close()
	var out []map[string]any
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(rec.Raw, &m))
		out = append(out, m)
	}
}

// A run from a Parquet input (nested columns read as objects, a prompt
// reading one) to a Parquet output named by its extension; validate reads
// the same file; results exports by the output's extension; a file that is
// not whole is refused with exit 2, naming it.
func TestParquetInputAndOutput(t *testing.T) {
	dir := setEnv(t)
	src, err := os.ReadFile("../../dispatcher/testdata/parquet/records.parquet")
	require.NoError(t, err)
	in := filepath.Join(dir, "records.parquet")
	require.NoError(t, os.WriteFile(in, src, 0o600))
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(structuredWorkflow), 0o600))

	code, stdout, stderr := jetpool(t, "validate", wf, "--input", in)
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	require.Contains(t, stderr, in+": 20 records, every field the prompts read is there")

	out := filepath.Join(dir, "results.parquet")
	code, stdout, stderr = jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress", "--job", "pq")
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	rows := readParquet(t, out)
	require.Len(t, rows, 20)
	seen := map[string]bool{}
	for _, r := range rows {
		id := r["id"].(string)
		seen[id] = true
		require.Equal(t, "r"+jsonNumber(r["line"]), id, "a record's line is its row")
		o := r["output"].(map[string]any)
		require.Contains(t, o["title"], "Extract from record number", "the prompt read the row")
		require.IsType(t, 0.0, o["year"], "an integer column")
		require.Equal(t, map[string]any{"text": "record number " + strings.TrimPrefix(id, "r")}, r["input"], "carry: [text]")
	}
	require.Len(t, seen, 20)
	st, err := os.Stat(out)
	require.NoError(t, err)
	require.NotEqual(t, os.FileMode(0o600), st.Mode().Perm()&0o644, "created as os.Create creates files")

	csvOut := filepath.Join(dir, "results.csv")
	code, _, stderr = jetpool(t, "results", "pq", "--output", csvOut, "--sorted")
	require.Equal(t, 0, code, stderr)
	f, err := os.Open(csvOut)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, recs, 21, "CSV, by the extension: a header and 20 rows")
	require.Equal(t, "r1", recs[1][0])

	var stdoutPQ bytes.Buffer
	code = realMain([]string{"results", "pq", "--format", "parquet", "--sorted"}, &stdoutPQ, io.Discard)
	require.Equal(t, 0, code)
	require.True(t, bytes.HasPrefix(stdoutPQ.Bytes(), []byte("PAR1")), "Parquet on standard output")

	cut := filepath.Join(dir, "cut.parquet")
	require.NoError(t, os.WriteFile(cut, src[:len(src)-20], 0o600))
	code, stdout, stderr = jetpool(t, "run", wf, "--input", cut, "--no-progress", "--job", "cut")
	require.Equal(t, 2, code, "%s%s", stdout, stderr)
	require.Contains(t, stderr, cut+": not a whole Parquet file (truncated?")
}

func jsonNumber(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
