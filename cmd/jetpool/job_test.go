package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// job purge removes a finished job's consumer after the grace (a rerun and
// a replay still work without it), deletes finished jobs past --older-than
// and asks before deleting; job delete needs --yes off a terminal.
func TestJobPurgeAndDelete(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("SIM_API_KEY", "")
	wf := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(`providers:
  sim: {kind: sim, api_key_env: SIM_API_KEY, sim: {seed: 3, valid_key: fixed, faults: {auth: 0.3}}}
defaults: {provider: sim}
actions:
  - name: a
    prompt: "{{ .text }}"
`), 0o600))
	in := filepath.Join(dir, "in.jsonl")
	var lines []byte
	for _, id := range []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9", "r10"} {
		lines = append(lines, `{"id":"`+id+`","text":"x"}`+"\n"...)
	}
	require.NoError(t, os.WriteFile(in, lines, 0o600))
	run := func() string {
		t.Helper()
		code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--job", "demo", "--no-progress")
		require.Contains(t, []int{0, exitFailedRecords}, code, stdout+stderr) // 4 while records fail
		return stdout
	}
	run()

	code, _, stderr := jetpool(t, "job", "delete", "demo")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "pass --yes to delete job demo (standard input is not a terminal)")

	// Within the grace nothing is due.
	code, stdout, stderr := jetpool(t, "job", "purge", "--dry-run")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "nothing to purge")

	t.Setenv("JETPOOL_CONSUMER_GRACE", "0s")
	code, stdout, stderr = jetpool(t, "job", "purge", "--dry-run")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job demo (completed ")
	assert.Contains(t, stdout, "its work consumer would be removed")
	code, stdout, stderr = jetpool(t, "job", "purge")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "its work consumer removed")

	// Without its consumer: a rerun resumes (nothing to do), a replay works.
	assert.Contains(t, run(), "model calls this run: 0")
	t.Setenv("SIM_API_KEY", "fixed")
	code, stdout, stderr = jetpool(t, "retry", "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	assert.Contains(t, stdout, "10 succeeded, 0 failed")

	// Deleting asks first.
	code, _, stderr = jetpool(t, "job", "purge", "--older-than", "1ns")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "pass --yes to delete them")
	code, stdout, stderr = jetpool(t, "job", "purge", "--older-than", "1ns", "--yes")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job demo deleted: 10 results, 0 dead letters")
	code, stdout, _ = jetpool(t, "status")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "no jobs")

	run()
	code, stdout, stderr = jetpool(t, "job", "delete", "demo", "--yes")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job demo deleted: 10 results")
	assert.Contains(t, stderr, "JETPOOL_DEDUPE_WINDOW")
	code, _, stderr = jetpool(t, "job", "delete", "demo", "--yes")
	assert.Equal(t, exitJobFailed, code)
	assert.Contains(t, stderr, "job not found: demo")

	code, _, _ = jetpool(t, "job")
	assert.Equal(t, exitUsage, code)
	code, _, _ = jetpool(t, "job", "frobnicate")
	assert.Equal(t, exitUsage, code)
	code, _, _ = jetpool(t, "job", "purge", "--older-than", "-1h")
	assert.Equal(t, exitUsage, code)
}
