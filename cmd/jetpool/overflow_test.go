package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider/providertest"
)

// overflowYAML is one action on a local endpoint with a 1,000-token window,
// with the given overflow: line (none when empty).
func overflowYAML(url, overflow string) string {
	return fmt.Sprintf(`providers:
  local: {kind: openai, base_url: %s/v1}
actions:
  - name: summarize
    provider: local
    model: small
    prompt: "Summarize: {{ .text }}"
%s`, url, overflow)
}

// Records dead-lettered for a context overflow: a retry under the same
// workflow warns (in --dry-run too) that it will fail the same way, and
// does; validate explains the fixed workflow's overflow: block, and a retry
// under it ends every record ok, without a warning.
func TestRetryContextOverflow(t *testing.T) {
	dir := setEnv(t)
	cw := &providertest.ContextWindow{Dialect: providertest.DialectOpenAI, Window: 1000}
	srv := providertest.NewServer(t, cw)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	var sb strings.Builder
	for i, n := range []int{1000, 6000, 9000} {
		text, _ := json.Marshal(strings.Repeat("word ", n/5))
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":%s}\n", i, text)
	}
	in := write("in.jsonl", sb.String())
	plain := write("plain.yaml", overflowYAML(srv.URL, ""))
	code, stdout, stderr := jetpool(t, "run", plain, "--input", in, "--job", "long", "--no-preflight", "--no-progress")
	require.Equal(t, exitFailedRecords, code, stdout+stderr)
	require.Contains(t, stdout, "3 records, 1 succeeded, 2 failed")

	warning := "warning: 2 dead letters of job long, action summarize, failed with context_overflow: the prompt is longer than model small's context window. " +
		"Replayed under the job's workflow as it is, they will fail the same way, each a call paid again. " +
		"Give the action an overflow: block (truncate: FIELD to shorten, or fallback_model: a larger model; docs/workflow.md) " +
		"and replay them under it: jetpool retry --job long --reason context_overflow --workflow FIXED.yaml\n"
	code, stdout, stderr = jetpool(t, "retry", "--reason", "context_overflow", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, warning, stderr)
	require.Contains(t, stdout, "dry run: 2 dead letters would be replayed; nothing changed")
	code, _, stderr = jetpool(t, "retry", "--reason", "permanent", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "warning", "no overflow among them")

	_, before := cw.Calls()
	code, stdout, stderr = jetpool(t, "retry", "--reason", "context_overflow", "--no-progress")
	require.Equal(t, exitFailedRecords, code, stdout+stderr)
	require.True(t, strings.HasPrefix(stderr, warning), stderr)
	_, after := cw.Calls()
	require.Equal(t, before+2, after, "replayed as it was: refused again")

	fixed := write("fixed.yaml", overflowYAML(srv.URL, "    overflow: {truncate: text, keep: tail}\n"))
	code, stdout, stderr = jetpool(t, "validate", fixed)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "  overflow:   on a context overflow: shorten .text (keep its tail) by what the provider says is over, plus a margin; up to 2 rounds a delivery, each a call\n"+
		"              worst case with its rounds: 3 calls: 1 attempt × 3 rounds (the first, 2 overflow rounds) × 1 delivery\n")

	out := filepath.Join(dir, "results.jsonl")
	code, stdout, stderr = jetpool(t, "retry", "--workflow", fixed, "--no-preflight", "--output", out, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.NotContains(t, stderr, "warning")
	require.Contains(t, stdout, "3 records, 3 succeeded, 0 failed")
	for _, r := range readTyped(t, out) {
		require.Equal(t, "ok", string(r.Status), r.ID)
		if r.ID != "r0" {
			require.NotEmpty(t, r.Recovery.Compacted, r.ID)
			require.Equal(t, "text", r.Recovery.Compacted[0].Field)
		}
	}
	code, _, stderr = jetpool(t, "retry", "--dry-run")
	require.Equal(t, 0, code)
	require.NotContains(t, stderr, "warning", "nothing left to warn of")
}
