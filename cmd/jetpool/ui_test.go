package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The dashboard refuses an address off loopback without a token before it
// starts anything: `jetpool ui`, and `server` / `worker` with --ui.
func TestUIRefusesOffLoopbackWithoutToken(t *testing.T) {
	setEnv(t)
	t.Setenv("JETPOOL_UI_TOKEN", "")
	for _, args := range [][]string{
		{"ui", "--addr", ":8080"},
		{"ui", "--addr", "0.0.0.0:8080"},
		{"worker", "--ui", "0.0.0.0:8080"},
		{"server", "--port", "-1", "--http-port", "0", "--ui", ":8080"},
	} {
		code, _, stderr := jetpool(t, args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "is not loopback: set JETPOOL_UI_TOKEN", args)
	}
	code, _, stderr := jetpool(t, "ui", "extra")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "unexpected arguments")
}
