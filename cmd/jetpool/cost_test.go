package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// pricedWorkflow: two actions on the sim at $1 an input token and $2 an
// output token ("abcd" is 2 output tokens, all max_tokens allows),
// carrying the record's text.
const pricedWorkflow = `providers:
  sim: {kind: sim, sim: {reply: "abcd"}, price: {input_per_mtok: 1000000, output_per_mtok: 2000000}}
carry: [text]
defaults: {provider: sim, params: {max_tokens: 2}}
actions:
  - {name: first, prompt: "{{ .text }}"}
  - {name: second, prompt: "{{ .first }}"}
`

// writeRecords writes n JSONL records, ids in reverse of their lines so
// that input order is not id order.
func writeRecords(t *testing.T, dir string, n int) string {
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "{\"id\":\"r%03d\",\"text\":\"record %d\",\"n\":%d}\n", n-i, i, i)
	}
	in := filepath.Join(dir, "records.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(sb.String()), 0o600))
	return in
}

// The run summary's cost is the sum of its results' (tokens × price), and
// `results` exports them sorted in input order, with their input, as JSONL
// and CSV (the sort spills chunks of 7 to temp files and merges them).
func TestCostSummaryAndExport(t *testing.T) {
	dir := setEnv(t)
	sortChunkRecords = 7
	t.Cleanup(func() { sortChunkRecords = SortChunkRecords })
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(pricedWorkflow), 0o600))
	in := writeRecords(t, dir, 30)
	out := filepath.Join(dir, "results.jsonl")
	code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress", "--job", "priced")
	require.Equal(t, 0, code, "%s%s", stdout, stderr)

	var sum float64
	for _, r := range readResults(t, out) {
		sum += r["total_cost"].(float64)
		require.Equal(t, "stop", r["finish_reason"])
	}
	// first: "record N" is 3 input tokens (the sim's 4 characters a token,
	// plus 1), "abcd" 2 output: $7; second: 2 + 2: $6; 30 records.
	require.InDelta(t, 30*13.0, sum, 1e-6)
	require.Contains(t, stdout, "cost: $390.00 (first $210.00, second $180.00)")

	code, sorted, stderr := jetpool(t, "results", "priced", "--sorted", "--include-input")
	require.Equal(t, 0, code, stderr)
	lines := strings.Split(strings.TrimSpace(sorted), "\n")
	require.Len(t, lines, 30)
	for i, l := range lines {
		var r struct {
			ID     string          `json:"id"`
			Line   int             `json:"line"`
			Input  map[string]any  `json:"input"`
			Record json.RawMessage `json:"record"`
		}
		require.NoError(t, json.Unmarshal([]byte(l), &r))
		require.Equal(t, i+1, r.Line, "input order")
		require.Equal(t, fmt.Sprintf("r%03d", 30-(i+1)), r.ID)
		require.Equal(t, fmt.Sprintf("record %d", i+1), r.Input["text"], "carry: [text]")
		require.JSONEq(t, fmt.Sprintf(`{"id":"r%03d","text":"record %d","n":%d}`, 30-(i+1), i+1, i+1), string(r.Record))
	}

	csvOut := filepath.Join(dir, "results.csv")
	code, _, stderr = jetpool(t, "results", "priced", "--format", "csv", "--sorted", "--output", csvOut)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "30 results (30 ok, 0 failed) written to "+csvOut)
	f, err := os.Open(csvOut)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 31)
	head := map[string]int{}
	for i, h := range rows[0] {
		head[h] = i
	}
	require.Contains(t, head, "input.text")
	require.Equal(t, "r029", rows[1][head["id"]])
	require.Equal(t, "abcd", rows[1][head["output"]])
	require.Equal(t, "6", rows[1][head["cost"]])
	require.Equal(t, "13", rows[1][head["total_cost"]])
	require.Equal(t, "record 1", rows[1][head["input.text"]])

	code, _, stderr = jetpool(t, "results", "priced", "--format", "xml")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `--format "xml": want jsonl, csv or parquet`)
}

// max_cost stops a run mid-way (exit 1, like a raise); status shows the
// cost; retry with a larger budget finishes the job.
func TestMaxCostThenRetry(t *testing.T) {
	dir := setEnv(t)
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(pricedWorkflow), 0o600))
	in := writeRecords(t, dir, 20)
	code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--no-progress", "--job", "budget", "--max-cost", "50", "--concurrency", "1")
	require.Equal(t, exitJobFailed, code, "%s%s", stdout, stderr)
	// A call of first sets aside $36 (32 input tokens at most, 2 output)
	// and costs $7, one of second $32 and $6: calls go while what is spent
	// and set aside is below $50, so the spend reaches it and passes it by
	// less than a call's worst case.
	m := regexp.MustCompile(`max_cost \$50\.00 reached: \$(\d+\.\d+) spent, (\d+) records stopped before a call \(dead letters, reason budget\); to run them: jetpool retry --job budget --max-cost N`).FindStringSubmatch(stdout)
	require.NotNil(t, m, stdout)
	spent, _ := strconv.ParseFloat(m[1], 64)
	require.GreaterOrEqual(t, spent, 50.0, "it stops once the spend has reached max_cost")
	require.LessOrEqual(t, spent, 50.0+36)
	require.Contains(t, stdout, "failed by reason: budget")
	require.Contains(t, stdout, fmt.Sprintf("cost: %s", dollars(spent)))

	code, stdout, stderr = jetpool(t, "status", "budget")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "budget cost so far: $")
	require.Contains(t, stdout, "of max_cost $50.00")

	code, _, stderr = jetpool(t, "retry", "--max-cost", "1000")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--max-cost sets one job's budget: name it with --job")

	out := filepath.Join(dir, "results.jsonl")
	code, stdout, stderr = jetpool(t, "retry", "--job", "budget", "--max-cost", "1000", "--output", out, "--no-progress")
	require.Equal(t, 0, code, "%s%s", stdout, stderr)
	require.Contains(t, stdout, "job budget completed: 20 records, 20 succeeded, 0 failed")
	require.Len(t, readResults(t, out), 20)
	require.Contains(t, stdout, "; max_cost $1000.00")
}
