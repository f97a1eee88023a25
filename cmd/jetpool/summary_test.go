package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
)

// A results file gets the mode os.Create would give it: 0666 less the umask.
// (Not parallel: it sets the process's umask.)
func TestResultsFileFollowsUmask(t *testing.T) {
	dir := setEnv(t)
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(simWorkflow), 0o600))
	out := filepath.Join(dir, "results.jsonl")
	code, _, stderr := jetpool(t, "run", wf, "--input", testenv.Records(t, 3), "--output", out, "--no-progress")
	require.Equal(t, 0, code, stderr)
	st, err := os.Stat(out)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	leftovers, err := filepath.Glob(filepath.Join(dir, ".jetpool-results-*"))
	require.NoError(t, err)
	require.Empty(t, leftovers)
}
