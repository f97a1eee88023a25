package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The command's own part of `jetpool bench` (internal/bench's tests run the
// measures): a bad flag is a usage error, before any server starts.
func TestBenchFlags(t *testing.T) {
	setEnv(t)
	code, _, stderr := jetpool(t, "bench", "--latency-concurrency", "10,x")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `jetpool bench: --latency-concurrency: "x" is not a positive number`)
	code, _, stderr = jetpool(t, "bench", "extra")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "unexpected arguments [extra]")
	code, stdout, stderr := jetpool(t, "bench", "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout+stderr, "-work-process", "the help lists the flags")
}
