package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `jetpool bench` on a tiny job: every measure runs and lands in the table.
// Its figures are not checked here (they belong to the README's run); that
// it keeps working is. With CI set, the raw rows must come from the real
// nats CLI, which CI installs.
func TestBenchSmoke(t *testing.T) {
	dir := setEnv(t)
	code, stdout, stderr := jetpool(t, "bench", "--records", "300", "--concurrency", "16",
		"--latency-concurrency", "2", "--latency-records", "2", "--retry-records", "30", "--repeat", "2", "--dir", dir)
	require.Zero(t, code, stderr)
	for _, row := range []string{
		"| raw floor: nats.go work-queue pull + result publish + ack |",
		"| jetpool dispatch (validate pass + publish) |",
		"| jetpool work, 0 ms latency, concurrency 16 |",
		"| jetpool dispatch + work + result + ack, overlapped |",
		"| 100 ms latency, concurrency 2 (4 records), sustained |",
		"| 100 ms latency, concurrency 2 (4 records), whole run |",
		"| retry: 10% transient faults, extra calls |",
	} {
		require.Contains(t, stdout, row)
	}
	require.Contains(t, stdout, "of the raw floor")
	require.Contains(t, stdout, "limits: {adaptive: false}")
	require.Equal(t, 2, strings.Count(stderr, " round "), "two rounds of the throughput measures")
	if os.Getenv("CI") != "" {
		require.Contains(t, stdout, "| raw: nats bench js consume (explicit ack) |", "CI installs the nats CLI")
	}
}
