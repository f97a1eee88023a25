package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
)

// `jetpool limits` lists each provider's shared state on a real server, and
// `jetpool limits reset PROVIDER` clears its cooldown and circuit for every
// key, leaving other providers alone.
func TestLimitsCommand(t *testing.T) {
	setEnv(t)
	b := testenv.Broker(t)
	t.Setenv("JETPOOL_NATS_URL", b.Server().ClientURL())
	ctx := context.Background()
	store, err := ratelimit.NewKVStore(ctx, b)
	require.NoError(t, err)
	now := time.Now()
	put := func(key string, s ratelimit.State) {
		_, err := store.Update(ctx, key, func(st *ratelimit.State) bool { *st = s; return true })
		require.NoError(t, err)
	}
	stuck := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC) // a hostile Retry-After from an older version
	put(ratelimit.Key("openai", "sk-a"), ratelimit.State{Provider: "openai", CooldownUntil: stuck,
		CooldownCause: "RateLimitError: slow down", Changed: now.Add(-time.Minute), Reason: "cooldown 3s: 2 of openai's last 2 answers said it is full",
		Windows: map[string]ratelimit.Window{"host-1-ab": {N: 8, Expires: now.Add(time.Minute),
			Change: ratelimit.Change{From: 32, To: 8, Reason: "429s from openai", At: now.Add(-time.Minute)}}}})
	put(ratelimit.Key("openai", "sk-b"), ratelimit.State{Provider: "openai",
		Breaker: ratelimit.Breaker{State: ratelimit.CircuitOpen, Until: now.Add(time.Hour), Trips: 3, LastError: "ServerError: 500 boom"}})
	put(ratelimit.Key("groq", ""), ratelimit.State{Provider: "groq", Limits: provider.Limits{RPM: 600},
		CooldownUntil: now.Add(time.Hour), CooldownCause: "RateLimitError: groq"})
	// A deployment of openai: its own entry, reset with its provider.
	put(ratelimit.Key("oa-eu", "sk-c"), ratelimit.State{Provider: "oa-eu", Of: "openai",
		CooldownUntil: now.Add(time.Hour), CooldownCause: "RateLimitError: eu"})

	code, stdout, stderr := jetpool(t, "limits")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "openai (key "+ratelimit.Key("openai", "sk-a")+")")
	require.Contains(t, stdout, "oa-eu (key "+ratelimit.Key("oa-eu", "sk-c")+", deployment of openai)")
	require.Contains(t, stdout, "  window:    8 (last change 32 → 8 at ")
	require.Contains(t, stdout, ": 429s from openai) [host-1-ab]")
	require.Contains(t, stdout, "left: RateLimitError: slow down")
	require.Contains(t, stdout, "  circuit:   open, probe in 1h0m0s (trip 3): ServerError: 500 boom")
	require.Contains(t, stdout, "  limits:    rpm 600, tpm 0, concurrency 0")
	require.Contains(t, stdout, "cooldown 3s: 2 of openai's last 2 answers said it is full")
	require.NotContains(t, stdout, "sk-a", "the key itself never shows")

	code, stdout, _ = jetpool(t, "limits", "--json")
	require.Equal(t, 0, code)
	var states map[string]ratelimit.State
	require.NoError(t, json.Unmarshal([]byte(stdout), &states))
	require.Len(t, states, 4)

	code, stdout, stderr = jetpool(t, "limits", "reset", "openai")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, ratelimit.Key("openai", "sk-a")+": cooldown cleared (")
	require.Contains(t, stdout, ratelimit.Key("openai", "sk-b")+": circuit closed (was open)")
	after, err := store.List(ctx)
	require.NoError(t, err)
	require.Contains(t, stdout, ratelimit.Key("oa-eu", "sk-c")+": cooldown cleared (", "its deployment too")
	for _, k := range []string{ratelimit.Key("openai", "sk-a"), ratelimit.Key("openai", "sk-b"), ratelimit.Key("oa-eu", "sk-c")} {
		s := after[k]
		require.False(t, s.Cooling(time.Now()), k)
		require.True(t, s.Breaker.Closed(), k)
		require.Equal(t, "reset by jetpool limits reset", s.Reason)
	}
	groq := after[ratelimit.Key("groq", "")]
	require.True(t, groq.Cooling(time.Now()), "another provider is left alone")

	code, _, stderr = jetpool(t, "limits", "reset", "nosuch")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, `no shared state of provider "nosuch"`)
	code, _, _ = jetpool(t, "limits", "reset")
	require.Equal(t, exitUsage, code)
}

// The run summary has a line per provider: its window and why it last
// changed, its circuit.
func TestRunSummaryShowsProviders(t *testing.T) {
	setEnv(t)
	wf := testenv.WriteFile(t, "wf.yaml", simWorkflow)
	in := testenv.Records(t, 20)
	code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--no-progress", "--concurrency", "8")
	require.Equal(t, 0, code, stdout+stderr)
	require.Regexp(t, `\n  provider sim: window \d+; circuit closed\n`, stdout)
}
