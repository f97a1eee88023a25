package pricing_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
)

func TestCandidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id   string
		want []string
	}{
		{"gpt-4o", []string{"gpt-4o"}},
		{"gpt-4o-2024-08-06", []string{"gpt-4o-2024-08-06", "gpt-4o"}},
		{"claude-sonnet-4-5-20250929", []string{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5"}},
		{"claude-sonnet-4-5@20250929", []string{"claude-sonnet-4-5@20250929", "claude-sonnet-4-5"}},
		{"models/gemini-2.5-flash", []string{"gemini-2.5-flash"}},
		{"models/gemini-2.5-flash-2026-01-31", []string{"gemini-2.5-flash-2026-01-31", "gemini-2.5-flash"}},
		{"o3-mini-2025-01-31", []string{"o3-mini-2025-01-31", "o3-mini"}},
		// Not dates: no snapshot.
		{"gpt-4o-2024-13-01", []string{"gpt-4o-2024-13-01"}},
		{"gpt-4o-2024-02-30", []string{"gpt-4o-2024-02-30"}},
		{"claude-opus-4-20251399", []string{"claude-opus-4-20251399"}},
		{"gpt-4o-2024-1-05", []string{"gpt-4o-2024-1-05"}},
		{"gpt-4o-24-08-06", []string{"gpt-4o-24-08-06"}},
		{"gpt-4o-2024_08_06", []string{"gpt-4o-2024_08_06"}},
		{"20250929", []string{"20250929"}},
		{"-20250929", []string{"-20250929"}},
		// Not the vendors' snapshot forms: models of their own.
		{"gpt-4-0613", []string{"gpt-4-0613"}},
		{"gemini-2.0-flash-001", []string{"gemini-2.0-flash-001"}},
		{"gemini-2.5-flash-preview-09-2025", []string{"gemini-2.5-flash-preview-09-2025"}},
		{"claude-3-7-sonnet-latest", []string{"claude-3-7-sonnet-latest"}},
		{"kimi-k2-instruct-0905", []string{"kimi-k2-instruct-0905"}},
		{"", nil},
	} {
		require.Equal(t, tc.want, pricing.Candidates(tc.id), tc.id)
	}
}

// The mispricings a prefix match made: each of these ids gets its own
// price, or none, never a neighbour's.
func TestLookupNeverANeighboursPrice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		provider, model string
		key             string // "" for unpriced
		in, out         float64
	}{
		{"anthropic", "claude-opus-4-5", "claude-opus-4-5", 5, 25},
		{"anthropic", "claude-opus-4-5-20251101", "claude-opus-4-5", 5, 25},
		{"anthropic", "claude-opus-4-20250514", "claude-opus-4", 15, 75},
		{"anthropic", "claude-opus-4-0", "claude-opus-4", 15, 75},
		{"anthropic", "claude-opus-4-1-20250805", "claude-opus-4-1", 15, 75},
		{"anthropic", "claude-opus-4-9", "", 0, 0},
		{"anthropic", "claude-opus-4-5-thinking", "", 0, 0},
		{"anthropic", "claude-sonnet-4-7", "", 0, 0},
		{"anthropic", "claude-3-5-haiku-20241022", "", 0, 0}, // dropped: retired, no longer in the source
		{"openai", "o3-mini", "o3-mini", 1.1, 4.4},
		{"openai", "o3-mini-2025-01-31", "o3-mini", 1.1, 4.4},
		{"openai", "o3-mini-high", "", 0, 0},
		{"openai", "o3-pro", "", 0, 0}, // the Responses API's only
		{"openai", "o4-mini-deep-research", "", 0, 0},
		{"openai", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13", 5, 15},
		{"openai", "gpt-4o-2024-08-06", "gpt-4o", 2.5, 10},
		{"openai", "gpt-4o-2099-01-01", "gpt-4o", 2.5, 10}, // a snapshot the table does not list: its model's
		{"openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini", 0.15, 0.6},
		{"openai", "gpt-4o-mini-tts", "", 0, 0},
		{"openai", "gpt-4ox", "", 0, 0},
		{"openai", "gpt-5.4-mini", "gpt-5.4-mini", 0.75, 4.5},
		{"openai", "gpt-5.7", "", 0, 0},
		{"openai", "gpt-5-codex", "", 0, 0},
		{"openai", "gpt-3.5-turbo-1106", "gpt-3.5-turbo-1106", 1, 2},
		{"gemini", "gemini-2.0-flash-lite", "gemini-2.0-flash-lite", 0.075, 0.3},
		{"gemini", "gemini-2.0-flash-lite-001", "gemini-2.0-flash-lite", 0.075, 0.3},
		{"gemini", "models/gemini-2.5-flash-lite", "gemini-2.5-flash-lite", 0.1, 0.4},
		{"gemini", "gemini-2.5-flash-lite-preview-09-2025", "", 0, 0},
		{"gemini", "gemini-2.5-flash-image", "", 0, 0},
		{"gemini", "gemini-flash-latest", "", 0, 0}, // a moving alias
		{"gemini-openai", "gemini-2.5-pro", "gemini-2.5-pro", 1.25, 10},
		{"groq", "openai/gpt-oss-120b", "openai/gpt-oss-120b", 0.15, 0.6},
		{"groq", "openai/gpt-oss-120b-fast", "", 0, 0},
		{"groq", "gpt-oss-120b", "", 0, 0},
		{"together", "gpt-4o-mini", "", 0, 0}, // only the presets' own endpoints
		{"sim", "sim-1", "", 0, 0},
	} {
		m, ok := pricing.Lookup(tc.provider, tc.model)
		require.Equal(t, tc.key != "", ok, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.key, m.Key, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.in, m.InputPerMTok, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.out, m.OutputPerMTok, "%s/%s", tc.provider, tc.model)
		if ok {
			require.Contains(t, m.Source, "built-in "+pricing.TableDate+": "+tc.key)
		}
	}
}

func TestLookupWindowsAndRetirement(t *testing.T) {
	t.Parallel()
	m, ok := pricing.Lookup("gemini", "gemini-2.5-pro")
	require.True(t, ok)
	require.Equal(t, 1_048_576, m.ContextWindow)
	require.Equal(t, &pricing.Tier{AboveTokens: 200_000, InputPerMTok: 2.5, OutputPerMTok: 15, CachedInputPerMTok: 0.25}, m.LongContext)
	m, _ = pricing.Lookup("anthropic", "claude-sonnet-4-20250514")
	require.Equal(t, "2026-05-14", m.Retires)
	require.True(t, m.Retired(time.Date(2026, 5, 14, 0, 0, 0, 0, time.UTC)))
	require.False(t, m.Retired(time.Date(2026, 5, 13, 23, 0, 0, 0, time.UTC)))
	m, _ = pricing.Lookup("anthropic", "claude-haiku-4-5")
	require.Empty(t, m.Retires)
	require.False(t, m.Retired(time.Now()))
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
	// Batch rates that are not half: input rates scale as the input rate
	// does (cached too), the output rate as the output rate does.
	odd := pricing.Price{InputPerMTok: 4, OutputPerMTok: 12, CachedInputPerMTok: 2, BatchInputPerMTok: 1, BatchOutputPerMTok: 6}
	u2 := provider.Usage{InputTokens: 10_000, CachedInputTokens: 4_000, OutputTokens: 1_000}
	require.InDelta(t, (6_000*1+4_000*0.5+1_000*6)/1e6, odd.Cost(u2, true), 1e-12)
}

// A call whose prompt passes the tier's threshold pays the tier's rates
// for all its tokens; one at the threshold does not. The threshold is the
// call's input tokens, cached and cache writes included.
func TestCostLongContext(t *testing.T) {
	t.Parallel()
	sonnet := pricing.Price{InputPerMTok: 3, OutputPerMTok: 15, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75,
		LongContext: &pricing.Tier{AboveTokens: 200_000, InputPerMTok: 6, OutputPerMTok: 22.5, CachedInputPerMTok: 0.6, CacheWritePerMTok: 7.5}}
	for _, tc := range []struct {
		name          string
		u             provider.Usage
		online, batch float64
	}{
		// 150k in (100k cached, 20k written): 30k × 3 + 100k × 0.3 + 20k × 3.75 + 2k × 15.
		{"below", provider.Usage{InputTokens: 150_000, CachedInputTokens: 100_000, CacheWriteTokens: 20_000, OutputTokens: 2_000}, 0.225, 0.1125},
		{"at the threshold", provider.Usage{InputTokens: 200_000, OutputTokens: 1_000}, 0.6 + 0.015, (0.6 + 0.015) / 2},
		{"one above", provider.Usage{InputTokens: 200_001, OutputTokens: 1_000}, (200_001*6 + 1_000*22.5) / 1e6, (200_001*6 + 1_000*22.5) / 2e6},
		// Cached tokens count toward the threshold: 130k × 6 + 100k × 0.6 + 20k × 7.5 + 2k × 22.5.
		{"above, mostly cached", provider.Usage{InputTokens: 250_000, CachedInputTokens: 100_000, CacheWriteTokens: 20_000, OutputTokens: 2_000}, 1.035, 0.5175},
		// Output does not count toward it.
		{"long answer", provider.Usage{InputTokens: 10_000, OutputTokens: 300_000}, 0.03 + 4.5, (0.03 + 4.5) / 2},
	} {
		require.InDelta(t, tc.online, sonnet.Cost(tc.u, false), 1e-9, tc.name)
		require.InDelta(t, tc.batch, sonnet.Cost(tc.u, true), 1e-9, tc.name)
	}

	// A tier without cached or cache-write rates scales the online ones as
	// its input rate scales the online input rate (×2 here).
	pro := pricing.Price{InputPerMTok: 1.25, OutputPerMTok: 10, CachedInputPerMTok: 0.125,
		LongContext: &pricing.Tier{AboveTokens: 200_000, InputPerMTok: 2.5, OutputPerMTok: 15}}
	u := provider.Usage{InputTokens: 300_000, CachedInputTokens: 50_000, OutputTokens: 10_000}
	require.InDelta(t, (250_000*2.5+50_000*0.25+10_000*15)/1e6, pro.Cost(u, false), 1e-12)
	require.Equal(t, 0.25, pro.Rates().LongContext.CachedInputPerMTok)
	require.Equal(t, 2.5, pro.Rates().LongContext.CacheWritePerMTok)
	require.Zero(t, pro.LongContext.CachedInputPerMTok, "Rates copies the tier")
}

func TestValidateAndString(t *testing.T) {
	t.Parallel()
	require.ErrorContains(t, pricing.Price{OutputPerMTok: -1}.Validate(), "output_per_mtok: -1 must not be negative")
	require.ErrorContains(t, pricing.Price{LongContext: &pricing.Tier{}}.Validate(), "long_context.above_tokens: 0 must be positive")
	require.ErrorContains(t, pricing.Price{LongContext: &pricing.Tier{AboveTokens: 1, CacheWritePerMTok: -2}}.Validate(),
		"long_context.cache_write_per_mtok: -2 must not be negative")
	require.NoError(t, pricing.Price{InputPerMTok: 1, LongContext: &pricing.Tier{AboveTokens: 1}}.Validate())

	m, _ := pricing.Lookup("anthropic", "claude-sonnet-4-5-20250929")
	require.Equal(t, "$3 in, $15 out per Mtok, cached $0.3, cache write $3.75; above 200,000 input tokens $6 in, $22.5 out, cached $0.6, cache write $7.5 (built-in "+
		pricing.TableDate+": claude-sonnet-4-5)", m.Price.String())
	require.Equal(t, "$4 in, $12 out per Mtok, batch $1 in, $6 out (workflow)",
		pricing.Price{InputPerMTok: 4, OutputPerMTok: 12, BatchInputPerMTok: 1, BatchOutputPerMTok: 6, Source: "workflow"}.String())
}
