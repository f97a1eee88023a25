// Package parquettest runs DuckDB, an implementation of Parquet other than
// jetpool's, for tests: to write files jetpool must read, and to read back
// the files jetpool writes. DuckDB is the npm package @duckdb/node-api in
// duckdb/ (its own prebuilt library, no compiler), run with node;
// .ci/run installs it (npm ci --prefix internal/parquettest/duckdb). A test
// that needs it fails without it when CI=true, and skips otherwise.
package parquettest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Column is a column of a query's result: its name and DuckDB's type.
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Result is a query's result: its columns, and each row as DuckDB writes it
// in JSON (64-bit integers and decimals as strings, timestamps as text).
type Result struct {
	Columns []Column         `json:"columns"`
	Rows    []map[string]any `json:"rows"`
}

// Types maps each column to its DuckDB type.
func (r Result) Types() map[string]string {
	m := make(map[string]string, len(r.Columns))
	for _, c := range r.Columns {
		m[c.Name] = c.Type
	}
	return m
}

// dir is the folder of the DuckDB package.
func dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "duckdb")
}

// Need skips the test (fails it when CI=true) unless node and the DuckDB
// package are installed.
func Need(t testing.TB) {
	t.Helper()
	_, err := exec.LookPath("node")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir(), "node_modules", "@duckdb", "node-api"))
	}
	if err == nil {
		return
	}
	msg := "DuckDB for node is not installed (npm ci --prefix internal/parquettest/duckdb): " + err.Error()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// DuckDB runs the statements in an in-memory DuckDB and returns the last
// one's result.
func DuckDB(t testing.TB, stmts ...string) Result {
	t.Helper()
	Need(t)
	cmd := exec.Command("node", append([]string{filepath.Join(dir(), "query.mjs")}, stmts...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("duckdb: %v: %s", err, stderr.String())
	}
	var r Result
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("duckdb: %v: %s", err, out)
	}
	return r
}
