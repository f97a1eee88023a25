package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/internal/testenv"
)

// `jetpool tenant budget` shows, sets and removes the tenant's budget;
// a bad amount is refused before anything is written.
func TestTenantBudgetCommand(t *testing.T) {
	setEnv(t)
	b := testenv.Broker(t)
	t.Setenv("JETPOOL_NATS_URL", b.Server().ClientURL())

	code, stdout, stderr := jetpool(t, "tenant", "budget")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "no tenant budget")

	code, stdout, stderr = jetpool(t, "tenant", "budget", "12.50")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "tenant budget $12.50 (set ")
	require.Contains(t, stdout, "$0.0000 spent")
	tb, err := b.TenantBudget(context.Background())
	require.NoError(t, err)
	require.Equal(t, 12.5, tb.MaxCost)

	code, stdout, _ = jetpool(t, "tenant", "budget", "--json")
	require.Equal(t, 0, code)
	var got jp.TenantBudget
	require.NoError(t, json.Unmarshal([]byte(stdout), &got))
	require.Equal(t, 12.5, got.MaxCost)

	for _, bad := range []string{"0", "ten", "NaN", "1e13"} {
		code, _, stderr = jetpool(t, "tenant", "budget", bad)
		require.Equal(t, exitUsage, code, bad)
		require.Contains(t, stderr, "want a positive amount of dollars", bad)
	}
	code, _, stderr = jetpool(t, "tenant", "limits")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "want: tenant budget")

	code, stdout, stderr = jetpool(t, "tenant", "budget", "none")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "no tenant budget")
	tb, err = b.TenantBudget(context.Background())
	require.NoError(t, err)
	require.Zero(t, tb.MaxCost)
}

// `jetpool status` shows the tenant's budget when one is set.
func TestStatusShowsTenantBudget(t *testing.T) {
	setEnv(t)
	b := testenv.Broker(t)
	t.Setenv("JETPOOL_NATS_URL", b.Server().ClientURL())
	code, stdout, stderr := jetpool(t, "status")
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stdout, "tenant budget")
	require.NoError(t, b.SetTenantBudget(context.Background(), 7))
	code, stdout, stderr = jetpool(t, "status")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "tenant budget $7.00 (set ")
}
