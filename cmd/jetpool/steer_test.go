package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/jobstatus"
)

// The steering commands end to end on the embedded server: a job
// dispatched with no worker is paused (status says so), resumed, cancelled;
// run then ends its queued records cancelled without a call and exits 5;
// retry --reason cancelled runs them.
func TestJobSteeringCommands(t *testing.T) {
	dir := setEnv(t)
	wf := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(simWorkflow), 0o600))
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte("{\"id\":\"r1\",\"text\":\"x\"}\n{\"id\":\"r2\",\"text\":\"y\"}\n{\"id\":\"r3\",\"text\":\"z\"}\n"), 0o600))
	code, _, stderr := jetpool(t, "dispatch", wf, "--input", in, "--job", "steer", "--no-preflight")
	require.Equal(t, 0, code, stderr)

	status := func() jobstatus.Job {
		t.Helper()
		code, stdout, stderr := jetpool(t, "status", "steer", "--json")
		require.Equal(t, 0, code, stderr)
		var s jobstatus.Job
		require.NoError(t, json.Unmarshal([]byte(stdout), &s), stdout)
		return s
	}
	code, stdout, stderr := jetpool(t, "job", "pause", "steer")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job steer paused until resumed: no new calls")
	assert.Contains(t, stdout, "3 records queued")
	assert.True(t, status().Paused)
	_, stdout, _ = jetpool(t, "status")
	assert.Contains(t, stdout, "running (paused)")

	code, stdout, stderr = jetpool(t, "job", "pause", "steer", "--for", "1h", "--until", "18:00")
	assert.Equal(t, exitUsage, code, stdout)
	assert.Contains(t, stderr, "want one of them")

	code, stdout, stderr = jetpool(t, "job", "resume", "steer")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job steer is running: 3 records queued")
	assert.False(t, status().Paused)

	code, stdout, stderr = jetpool(t, "job", "cancel", "steer", "--reason", "wrong prompt")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job steer cancelled: no new calls (0 workers confirmed)")
	code, stdout, _ = jetpool(t, "job", "cancel", "steer")
	require.Equal(t, 0, code)
	assert.Contains(t, stdout, "job steer was cancelled already")

	// run serves it: its records end cancelled, no call.
	code, stdout, stderr = jetpool(t, "run", wf, "--input", in, "--job", "steer", "--no-progress", "--no-preflight")
	require.Equal(t, exitCancelled, code, stdout+stderr)
	assert.Contains(t, stdout, "job steer CANCELLED: 3 records, 0 succeeded, 0 failed, 3 cancelled\n")
	assert.Contains(t, stdout, "model calls this run: 0")
	assert.Contains(t, stderr, "job steer was cancelled: wrong prompt")
	s := status()
	assert.Equal(t, "cancelled", s.Status)
	assert.EqualValues(t, 3, s.Cancelled)
	assert.Zero(t, s.Failed, "a cancelled record is not counted as failed")
	code, stdout, _ = jetpool(t, "status")
	require.Equal(t, 0, code)
	assert.Regexp(t, `SUCCEEDED\s+FAILED\s+CANCELLED\s+REC/S`, stdout)
	assert.Regexp(t, `steer\s+cancelled\s+3\s+0\s+0\s+0\s+0\s+0\s+3\s`, stdout)

	code, _, stderr = jetpool(t, "job", "pause", "steer")
	assert.Equal(t, exitJobFailed, code)
	assert.Contains(t, stderr, "job steer cancelled: job has ended")

	code, stdout, stderr = jetpool(t, "retry", "--job", "steer", "--reason", "cancelled", "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	assert.Contains(t, stdout, "3 succeeded, 0 failed")

	code, _, stderr = jetpool(t, "job", "cancel", "steer")
	assert.Equal(t, exitJobFailed, code)
	assert.Contains(t, stderr, "job steer completed: job has ended")
}

// A job's priority: from the workflow, the --priority flag, and job
// priority while it runs; status shows it; bad values are refused.
func TestJobPriority(t *testing.T) {
	dir := setEnv(t)
	wf := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wf, []byte("priority: 7\n"+simWorkflow), 0o600))
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte("{\"id\":\"r1\",\"text\":\"x\"}\n"), 0o600))
	priority := func(job string) int {
		t.Helper()
		code, stdout, stderr := jetpool(t, "status", job, "--json")
		require.Equal(t, 0, code, stderr)
		var s jobstatus.Job
		require.NoError(t, json.Unmarshal([]byte(stdout), &s), stdout)
		return s.Priority
	}
	code, _, stderr := jetpool(t, "dispatch", wf, "--input", in, "--job", "a", "--no-preflight")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 7, priority("a"), "the workflow's")
	code, _, stderr = jetpool(t, "dispatch", wf, "--input", in, "--job", "b", "--priority", "3", "--no-preflight")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, 3, priority("b"), "the flag's")
	code, stdout, stderr := jetpool(t, "job", "priority", "b", "20")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "job b: priority 20")
	assert.Equal(t, 20, priority("b"))

	code, _, stderr = jetpool(t, "job", "priority", "b", "0")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "want a whole number 1-1000")
	code, _, stderr = jetpool(t, "dispatch", wf, "--input", in, "--job", "c", "--priority", "5000", "--no-preflight")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "--priority 5000 is out of range 1-1000")
	require.NoError(t, os.WriteFile(wf, []byte("priority: 0\n"+simWorkflow), 0o600))
	code, _, stderr = jetpool(t, "validate", wf)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "priority")
}
