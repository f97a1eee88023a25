package pricing_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider, model, want string // want: the family priced, "" for none
		in                    float64
	}{
		{"openai", "gpt-4o-mini", "gpt-4o-mini", 0.15},
		{"openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini", 0.15},
		{"openai", "gpt-4o-2024-08-06", "gpt-4o", 2.50},
		{"openai", "gpt-4ox", "", 0}, // not at a word boundary
		{"anthropic", "claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 3},
		{"anthropic", "claude-sonnet-4-20250514", "claude-sonnet-4", 3},
		{"gemini", "models/gemini-2.5-flash", "gemini-2.5-flash", 0.30},
		{"gemini", "gemini-2.5-flash-lite", "gemini-2.5-flash-lite", 0.10},
		{"groq", "llama-3.1-8b-instant", "llama-3.1-8b-instant", 0.05},
		{"openai", "text-embedding-3-small", "text-embedding-3-small", 0.02},
		{"together", "gpt-4o-mini", "", 0}, // only the presets' own endpoints
		{"sim", "sim-1", "", 0},
	} {
		p, ok := pricing.Lookup(tc.provider, tc.model)
		require.Equal(t, tc.want != "", ok, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.in, p.InputPerMTok, "%s/%s", tc.provider, tc.model)
		if ok {
			require.Equal(t, "built-in "+pricing.TableDate, p.Source)
		}
	}
}

func TestCost(t *testing.T) {
	t.Parallel()
	p := pricing.Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.30, CacheWritePerMTok: 3.75}
	u := provider.Usage{InputTokens: 1_000_000, OutputTokens: 100_000, CachedInputTokens: 400_000, CacheWriteTokens: 100_000, ReasoningTokens: 50_000}
	// 500k plain × 3 + 400k × 0.30 + 100k × 3.75 + 100k × 15, per million.
	require.InDelta(t, 1.5+0.12+0.375+1.5, p.Cost(u, false), 1e-9)
	// Batch: half of everything.
	require.InDelta(t, (1.5+0.12+0.375+1.5)/2, p.Cost(u, true), 1e-9)
	// Unset optional rates fall back to the input rate.
	flat := pricing.Price{InputPerMTok: 1, OutputPerMTok: 2}
	require.InDelta(t, 1.0+0.2, flat.Cost(u, false), 1e-9)
	require.Zero(t, pricing.Price{}.Cost(u, false))
	require.ErrorContains(t, pricing.Price{OutputPerMTok: -1}.Validate(), "output_per_mtok: -1 must not be negative")
}
