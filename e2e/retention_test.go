package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// The commands of docs/operations.md "Retention", on `jetpool server`:
// purge's dry run and purge, job delete without a terminal and with --yes.
func TestRetention(t *testing.T) {
	t.Parallel()
	_, url := jetpoolServer(t)
	env := map[string]string{"JETPOOL_NATS_URL": url}
	wf := filepath.Join(t.TempDir(), "workflow.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(simYAML(time.Millisecond, "")), 0o600))
	in := testenv.Records(t, 10)
	for _, job := range []string{"demo", "kept"} {
		r := jetpool(t, env, "run", wf, "--input", in, "--job", job, "--no-progress", "--no-preflight")
		require.Zero(t, r.code, r.stderr)
	}

	r := jetpool(t, env, "job", "purge", "--dry-run")
	require.Zero(t, r.code, r.stderr)
	assert.Contains(t, r.stdout, "nothing to purge", "both finished within JETPOOL_CONSUMER_GRACE")

	now := map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_CONSUMER_GRACE": "0s"}
	r = jetpool(t, now, "job", "purge", "--dry-run")
	require.Zero(t, r.code, r.stderr)
	assert.Contains(t, r.stdout, "job demo (completed ")
	assert.Contains(t, r.stdout, "its work consumer would be removed")
	ci := natsCLI(t, url, "consumer", "info", "JETPOOL_WORK", "jetpool-demo")
	require.Zero(t, ci.code, "a dry run removes nothing: %s", ci.stderr)

	r = jetpool(t, now, "job", "purge", "--older-than", "168h", "--yes")
	require.Zero(t, r.code, r.stderr)
	assert.Contains(t, r.stdout, "job kept (completed ")
	ci = natsCLI(t, url, "consumer", "info", "JETPOOL_WORK", "jetpool-demo")
	assert.NotZero(t, ci.code, "the consumer is gone:\n%s", ci.stdout)

	r = jetpool(t, env, "job", "delete", "demo")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "pass --yes to delete job demo")

	r = jetpool(t, env, "job", "delete", "demo", "--yes", "--json")
	require.Zero(t, r.code, r.stderr)
	var rep struct {
		Job     string `json:"job"`
		Results int    `json:"results"`
		Entry   bool   `json:"entry"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
	assert.Equal(t, "demo", rep.Job)
	assert.Equal(t, 10, rep.Results)
	assert.True(t, rep.Entry)

	r = jetpool(t, env, "status")
	require.Zero(t, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "demo")
	assert.Contains(t, r.stdout, "kept")
}
