package pricing_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
)

const fixture = "testdata/litellm_prices.json"

// A price file in LiteLLM's format: each model found by the exact/snapshot
// rule under the provider's prefix or bare, and its calls cost what the
// vendor's rules make of its rates, figured here by hand.
func TestFileRoundTrip(t *testing.T) {
	t.Parallel()
	f, err := pricing.LoadFile(fixture)
	require.NoError(t, err)
	require.Equal(t, 15, f.Len(), "sample_spec and last_updated are not models")
	require.Equal(t, fixture+" (15 models, LiteLLM format)", f.String())

	type call struct {
		u             provider.Usage
		online, batch float64
	}
	for _, tc := range []struct {
		provider, model, key string
		window               int
		retires              string
		calls                []call
	}{
		{provider: "anthropic", model: "claude-sonnet-4-5-20250929", key: "claude-sonnet-4-5", window: 1_000_000, retires: "2027-09-29", calls: []call{
			// 30k plain × 3 + 100k cached × 0.3 + 20k written × 3.75 + 2k out × 15.
			{provider.Usage{InputTokens: 150_000, CachedInputTokens: 100_000, CacheWriteTokens: 20_000, OutputTokens: 2_000}, 0.225, 0.1125},
			// Above 200k: 130k × 6 + 100k × 0.6 + 20k × 7.5 + 2k × 22.5.
			{provider.Usage{InputTokens: 250_000, CachedInputTokens: 100_000, CacheWriteTokens: 20_000, OutputTokens: 2_000}, 1.035, 0.5175},
			{provider.Usage{InputTokens: 200_000}, 0.6, 0.3},
		}},
		{provider: "anthropic", model: "claude-opus-4-5", key: "claude-opus-4-5", window: 200_000, calls: []call{
			// 1k plain × 5 + 8k cached × 0.5 + 1k written × 6.25 + 500 out × 25.
			{provider.Usage{InputTokens: 10_000, CachedInputTokens: 8_000, CacheWriteTokens: 1_000, OutputTokens: 500}, 0.02775, 0.013875},
		}},
		{provider: "gemini", model: "models/gemini-2.5-pro", key: "gemini/gemini-2.5-pro", window: 1_048_576, calls: []call{
			// 250k × 2.5 + 50k cached × 0.25 + 10k × 15: the tier, its cached rate the file's.
			{provider.Usage{InputTokens: 300_000, CachedInputTokens: 50_000, OutputTokens: 10_000}, 0.7875, 0.39375},
			{provider.Usage{InputTokens: 100_000, CachedInputTokens: 50_000, OutputTokens: 10_000}, 0.0625 + 0.00625 + 0.1, (0.0625 + 0.00625 + 0.1) / 2},
		}},
		{provider: "gemini-openai", model: "gemini-2.5-flash", key: "gemini/gemini-2.5-flash", window: 1_048_576, calls: []call{
			{provider.Usage{InputTokens: 1_000_000, CachedInputTokens: 500_000, OutputTokens: 100_000}, 0.15 + 0.015 + 0.25, (0.15 + 0.015 + 0.25) / 2},
		}},
		{provider: "openai", model: "gpt-4o-2024-05-13", key: "gpt-4o-2024-05-13", window: 128_000, calls: []call{
			{provider.Usage{InputTokens: 10_000, CachedInputTokens: 5_000, OutputTokens: 1_000}, 0.05 + 0.015, 0.0325},
		}},
		{provider: "openai", model: "gpt-4o-2024-11-20", key: "gpt-4o", window: 128_000, calls: []call{
			{provider.Usage{InputTokens: 10_000, CachedInputTokens: 5_000, OutputTokens: 1_000}, 0.0125 + 0.00625 + 0.01, (0.0125 + 0.00625 + 0.01) / 2},
		}},
		{provider: "openai", model: "gpt-5.4", key: "gpt-5.4", window: 1_050_000, calls: []call{
			{provider.Usage{InputTokens: 272_000, OutputTokens: 1_000}, 0.68 + 0.015, (0.68 + 0.015) / 2},
			{provider.Usage{InputTokens: 272_001, CachedInputTokens: 200_000, OutputTokens: 1_000}, (72_001*5 + 200_000*0.5 + 1_000*22.5) / 1e6, (72_001*5 + 200_000*0.5 + 1_000*22.5) / 2e6},
		}},
		// Batch rates that are not half are the file's.
		{provider: "openai", model: "acme-large", key: "acme-large", window: 64_000, calls: []call{
			{provider.Usage{InputTokens: 10_000, OutputTokens: 1_000}, 0.052, 0.013},
		}},
		{provider: "openai", model: "text-embedding-3-small", key: "text-embedding-3-small", window: 8_191, calls: []call{
			{provider.Usage{InputTokens: 1_000_000}, 0.02, 0.01},
		}},
		{provider: "groq", model: "llama-3.3-70b-versatile", key: "groq/llama-3.3-70b-versatile", window: 128_000, calls: []call{
			{provider.Usage{InputTokens: 1_000_000, OutputTokens: 1_000_000}, 0.59 + 0.79, (0.59 + 0.79) / 2},
		}},
		// A provider entry named after a LiteLLM provider finds its keys.
		{provider: "openrouter", model: "openai/gpt-4o", key: "openrouter/openai/gpt-4o", window: 128_000, calls: []call{
			{provider.Usage{InputTokens: 1_000_000, OutputTokens: 100_000}, 2.6 + 1.05, (2.6 + 1.05) / 2},
		}},
		{provider: "vertex_ai", model: "claude-sonnet-4-5@20250929", key: "vertex_ai/claude-sonnet-4-5@20250929", window: 200_000, calls: []call{
			{provider.Usage{InputTokens: 1_000_000}, 3.3, 1.65},
		}},
	} {
		m, ok, err := f.Lookup(tc.provider, tc.model)
		require.NoError(t, err)
		require.True(t, ok, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.key, m.Key, "%s/%s", tc.provider, tc.model)
		require.Equal(t, "price file litellm_prices.json: "+tc.key, m.Source)
		require.Equal(t, tc.window, m.ContextWindow, "%s/%s", tc.provider, tc.model)
		require.Equal(t, tc.retires, m.Retires, "%s/%s", tc.provider, tc.model)
		require.NoError(t, m.Validate())
		for i, c := range tc.calls {
			require.InDelta(t, c.online, m.Cost(c.u, false), 1e-12, "%s/%s call %d online", tc.provider, tc.model, i)
			require.InDelta(t, c.batch, m.Cost(c.u, true), 1e-12, "%s/%s call %d batch", tc.provider, tc.model, i)
		}
	}
	require.Equal(t, 3.0, must(f.Lookup("anthropic", "claude-sonnet-4-5")).InputPerMTok, "3e-06 × 1e6 is 3, not 2.9999999999999996")

	// Unpriced: not in the file, a near miss, another provider's bare
	// entry (Vertex AI's gemini-2.5-pro is not the Gemini API's), a model
	// not billed by tokens, and every model of a provider the file does
	// not name.
	for _, tc := range [][2]string{{"anthropic", "claude-opus-4-8"}, {"anthropic", "claude-sonnet-4-5-thinking"},
		{"openai", "gpt-4o-mini"}, {"openai", "gpt-4o-2024-13-20"}, {"gemini", "gemini-2.5-pro-preview"},
		{"gemini", "gemini-2.0-flash-lite"}, {"openai", "dall-e-3"}, {"openai", "gpt-image-1"},
		{"openai", "claude-sonnet-4-5"}, {"groq", "gpt-4o"}, {"together", "gpt-4o"}} {
		m, ok, err := f.Lookup(tc[0], tc[1])
		require.NoError(t, err, "%v", tc)
		require.False(t, ok, "%v priced as %s", tc, m.Key)
	}
	m, ok, err := f.Lookup("vertex_ai-language-models", "gemini-2.5-pro")
	require.NoError(t, err)
	require.True(t, ok, "a bare entry serves its own provider")
	require.Equal(t, 9.0, m.InputPerMTok)
}

func must(m pricing.Model, ok bool, err error) pricing.Model {
	if err != nil || !ok {
		panic("no such model")
	}
	return m
}

// A bad file, or a bad entry, is an error naming the file, the line, the
// entry and the field.
func TestFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, model, want string
	}{
		{"NotJSON", "{\n  \"gpt-4o\": {\"input_cost_per_token\": 1e-06,}\n}", "", "price file prices.json:2: not JSON: invalid character '}'"},
		{"Truncated", "{\n  \"gpt-4o\": {", "", "price file prices.json:2: not JSON: unexpected end of JSON input"},
		{"NotAnObject", "[1, 2]", "", "price file prices.json: want a JSON object of models"},
		{"TrailingText", "{}\n{}", "", "price file prices.json:2: not JSON: invalid character '{' after top-level value"},
		{"Duplicate", "{\n\"gpt-4o\": {},\n\"gpt-4o\": {}\n}", "", `price file prices.json:3: entry "gpt-4o" is there twice (first at line 2)`},
		{"RateNotANumber", "{\n\n\"gpt-4o\": {\"input_cost_per_token\": \"cheap\", \"output_cost_per_token\": 1e-05}\n}", "gpt-4o",
			`price file prices.json:3: entry "gpt-4o": input_cost_per_token: want a number, got "cheap"`},
		{"Negative", "{\"gpt-4o\": {\"input_cost_per_token\": 1e-06, \"output_cost_per_token\": -1e-05}}", "gpt-4o",
			`price file prices.json:1: entry "gpt-4o": output_cost_per_token: -1e-05 must not be negative`},
		{"NoOutput", "{\"gpt-4o\": {\"input_cost_per_token\": 1e-06, \"mode\": \"chat\"}}", "gpt-4o",
			`entry "gpt-4o": output_cost_per_token: missing`},
		{"BadTierRate", "{\"gpt-4o\": {\"input_cost_per_token\": 1e-06, \"output_cost_per_token\": 1e-06, \"input_cost_per_token_above_200k_tokens\": null, \"output_cost_per_token_above_200k_tokens\": true}}", "gpt-4o",
			`entry "gpt-4o": output_cost_per_token_above_200k_tokens: want a number, got true`},
		{"BadWindow", "{\"gpt-4o\": {\"input_cost_per_token\": 1e-06, \"output_cost_per_token\": 1e-06, \"max_input_tokens\": 1000.5}}", "gpt-4o",
			`entry "gpt-4o": max_input_tokens: want a whole number of tokens, got 1000.5`},
		{"BadDate", "{\"gpt-4o\": {\"input_cost_per_token\": 1e-06, \"output_cost_per_token\": 1e-06, \"deprecation_date\": \"soon\"}}", "gpt-4o",
			`entry "gpt-4o": deprecation_date: want a date such as 2026-05-14, got "soon"`},
		{"BadProvider", "{\"gpt-4o\": {\"input_cost_per_token\": 1e-06, \"output_cost_per_token\": 1e-06, \"litellm_provider\": 7}}", "gpt-4o",
			`entry "gpt-4o": litellm_provider: want a string, got 7`},
		{"EntryNotAnObjectIsSkipped", "{\"gpt-4o\": [1], \"last_updated\": \"2026-07-24\"}", "gpt-4o", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := pricing.ParseFile("prices.json", []byte(tc.src))
			if tc.model == "" {
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.want)
				return
			}
			require.NoError(t, err)
			_, ok, err := f.Lookup("openai", tc.model)
			if tc.want == "" {
				require.NoError(t, err)
				require.False(t, ok)
				return
			}
			require.Error(t, err)
			require.False(t, ok)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// Two thresholds in one entry: jetpool bills one tier, and says so.
	f, err := pricing.ParseFile("prices.json", []byte(`{"m": {"input_cost_per_token": 1e-06, "output_cost_per_token": 1e-06, "input_cost_per_token_above_128k_tokens": 2e-06, "output_cost_per_token_above_200k_tokens": 2e-06}}`))
	require.NoError(t, err)
	_, _, err = f.Lookup("openai", "m")
	require.ErrorContains(t, err, "a second long-context threshold")
}

func TestLoadFileBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := pricing.LoadFile(filepath.Join(dir, "missing.json"))
	require.ErrorContains(t, err, "price file: open "+filepath.Join(dir, "missing.json"))

	big := filepath.Join(dir, "big.json")
	fh, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, fh.Truncate(pricing.MaxFileBytes+1)) // sparse: no disk written
	require.NoError(t, fh.Close())
	_, err = pricing.LoadFile(big)
	require.ErrorContains(t, err, "price file "+big+": larger than 32 MiB")

	ok := filepath.Join(dir, "ok.json")
	require.NoError(t, os.WriteFile(ok, []byte(`{"gpt-4o": {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06}}`+strings.Repeat(" ", 100)), 0o600))
	f, err := pricing.LoadFile(ok)
	require.NoError(t, err)
	m, priced, err := f.Lookup("openai", "gpt-4o-2024-08-06")
	require.NoError(t, err)
	require.True(t, priced, "an entry without litellm_provider serves any provider")
	require.Equal(t, 1.0, m.InputPerMTok)
}

// ParseFile's own walk of the object agrees with encoding/json on every
// valid object: the same entries, each with its value.
func FuzzParseFile(f *testing.F) {
	for _, seed := range []string{`{}`, ` { "a" : {"input_cost_per_token": 1e-06} , "b":[1,{"c":"}"}], "c\"d": "x\\"y" }`,
		`{"k\u00e9y": {"x": "{[\"]}"}, "n": -1.5e+3, "t": true, "z": null}`, `[1]`, `"s"`, `{"a":{}}` + "\n\n",
		"{\n\t\"gpt-4o\": {\n\t\t\"input_cost_per_token\": 2.5e-06\n\t}\n}"} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pf, err := pricing.ParseFile("fuzz.json", data)
		var want map[string]any
		if json.Unmarshal(data, &want) != nil {
			if err == nil {
				require.Zero(t, pf.Len(), "not an object: no entries")
			}
			return
		}
		if err != nil {
			require.Contains(t, err.Error(), "is there twice")
			return
		}
		objects := 0
		for k, v := range want {
			if _, ok := v.(map[string]any); ok && k != "sample_spec" {
				objects++
			}
		}
		require.Equal(t, objects, pf.Len())
	})
}

// A price file the size of LiteLLM's whole table: 3,000 entries of its
// shape, about 1.5 MB.
func BenchmarkParseFile(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("{\n")
	for i := range 3000 {
		if i > 0 {
			sb.WriteString(",\n")
		}
		fmt.Fprintf(&sb, `    "provider%d/model-%d": {
        "cache_read_input_token_cost": 1.25e-07,
        "input_cost_per_token": 1.25e-06,
        "input_cost_per_token_above_200k_tokens": 2.5e-06,
        "litellm_provider": "provider%d",
        "max_input_tokens": 1048576,
        "max_output_tokens": 65535,
        "max_tokens": 65535,
        "mode": "chat",
        "output_cost_per_token": 1e-05,
        "output_cost_per_token_above_200k_tokens": 1.5e-05,
        "source": "https://example.com/pricing",
        "supported_endpoints": ["/v1/chat/completions", "/v1/responses"],
        "supports_function_calling": true,
        "supports_vision": true
    }`, i%40, i, i%40)
	}
	sb.WriteString("\n}\n")
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		f, err := pricing.ParseFile("bench.json", data)
		if err != nil || f.Len() != 3000 {
			b.Fatal(err)
		}
	}
}
