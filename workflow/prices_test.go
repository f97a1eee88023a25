package workflow

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
)

// litellmFixture is a price file in LiteLLM's format whose figures differ
// from the built-in table's, so that a test sees which one priced a call.
const litellmFixture = `{
    "sample_spec": {"max_input_tokens": "max input tokens, if the provider specifies it"},
    "gpt-4o": {
        "cache_read_input_token_cost": 1.3e-06,
        "input_cost_per_token": 2.6e-06,
        "litellm_provider": "openai",
        "max_input_tokens": 100000,
        "mode": "chat",
        "output_cost_per_token": 1.1e-05
    },
    "gemini/gemini-2.5-pro": {
        "cache_read_input_token_cost": 1.25e-07,
        "cache_read_input_token_cost_above_200k_tokens": 2.5e-07,
        "input_cost_per_token": 1.25e-06,
        "input_cost_per_token_above_200k_tokens": 2.5e-06,
        "litellm_provider": "gemini",
        "max_input_tokens": 1048576,
        "mode": "chat",
        "output_cost_per_token": 1e-05,
        "output_cost_per_token_above_200k_tokens": 1.5e-05
    },
    "mine/big-model": {
        "input_cost_per_token": 1e-06,
        "litellm_provider": "mine",
        "max_input_tokens": 400000,
        "mode": "chat",
        "output_cost_per_token": 4e-06
    },
    "acme-small": {
        "deprecation_date": "2020-01-01",
        "input_cost_per_token": 1e-07,
        "litellm_provider": "mine",
        "max_input_tokens": 8000,
        "mode": "chat",
        "output_cost_per_token": 2e-07
    }
}`

// writeFiles writes files (name to content) into a new directory and
// returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(strings.TrimPrefix(content, "\n")), 0o600))
	}
	return dir
}

// Precedence: an action's price: > its provider's price: > the price file
// > the built-in table; the window comes from the file or the table
// whichever price wins; validate says which for each action.
func TestPriceFile(t *testing.T) {
	t.Parallel()
	dir := writeFiles(t, map[string]string{"prices/litellm.json": litellmFixture, "wf.yaml": `
prices: prices/litellm.json
providers:
  mine: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
  priced: {kind: openai, base_url: "http://127.0.0.1:2/v1", price: {input_per_mtok: 7, output_per_mtok: 8}}
defaults: {provider: openai}
actions:
  - {name: file, model: gpt-4o-2024-11-20, prompt: "{{ .text }}", overflow: {truncate: text, fallback_model: big-model, provider: mine}}
  - {name: table, provider: anthropic, model: claude-opus-4-8, prompt: hi}
  - {name: own, model: gpt-4o, prompt: hi, price: {input_per_mtok: 1, output_per_mtok: 2}}
  - {name: entry, provider: priced, model: big-model, prompt: hi}
  - {name: tier, provider: gemini, model: models/gemini-2.5-pro, prompt: hi}
  - {name: none, provider: anthropic, model: claude-opus-4-9, prompt: hi}
  - {name: retired, provider: mine, model: acme-small, prompt: hi}
`})
	file := filepath.Join(dir, "prices/litellm.json")
	w, err := Load(filepath.Join(dir, "wf.yaml"))
	require.NoError(t, err)
	require.Equal(t, file, w.Prices)
	byName := func(name string) *Action { a, _ := w.Action(name); return a }

	a := byName("file")
	require.Equal(t, &pricing.Price{InputPerMTok: 2.6, OutputPerMTok: 11, CachedInputPerMTok: 1.3, Source: "price file litellm.json: gpt-4o"}, a.Price)
	require.Equal(t, 100_000, a.ContextWindow, "the file's window, not the table's 128,000")
	require.Equal(t, &pricing.Price{InputPerMTok: 1, OutputPerMTok: 4, Source: "price file litellm.json: mine/big-model"}, a.Overflow.FallbackPrice)
	require.Equal(t, 400_000, a.Overflow.FallbackContextWindow)

	table, _ := pricing.Lookup("anthropic", "claude-opus-4-8")
	require.Equal(t, &table.Price, byName("table").Price, "a model the file lacks: the table's")
	require.Equal(t, 5.0, byName("table").Price.InputPerMTok)

	require.Equal(t, &pricing.Price{InputPerMTok: 1, OutputPerMTok: 2, Source: "workflow"}, byName("own").Price)
	require.Equal(t, 100_000, byName("own").ContextWindow)
	require.Equal(t, &pricing.Price{InputPerMTok: 7, OutputPerMTok: 8, Source: "workflow"}, byName("entry").Price)
	require.Zero(t, byName("entry").ContextWindow, "the file's mine/big-model is another provider's")

	tier := byName("tier").Price
	require.Equal(t, &pricing.Tier{AboveTokens: 200_000, InputPerMTok: 2.5, OutputPerMTok: 15, CachedInputPerMTok: 0.25}, tier.LongContext)
	require.Nil(t, byName("none").Price)
	require.Equal(t, "2020-01-01", byName("retired").Retires)

	var out bytes.Buffer
	w.Describe(&out)
	for _, want := range []string{
		"  prices: " + file + " (before the built-in table; an action's or provider's price: wins)\n",
		"price:      $2.6 in, $11 out per Mtok, cached $1.3 (price file litellm.json: gpt-4o)\n",
		"context:    100,000 input tokens (overflow: estimates a prompt against it before the first call)\n",
		"price:      $5 in, $25 out per Mtok, cached $0.5, cache write $6.25 (built-in " + pricing.TableDate + ": claude-opus-4-8)\n",
		"price:      $1.25 in, $10 out per Mtok, cached $0.125; above 200,000 input tokens $2.5 in, $15 out, cached $0.25 (price file litellm.json: gemini/gemini-2.5-pro)\n",
		"price:      unpriced: set `price:` or load a price file (anthropic/claude-opus-4-9 is in neither " + file + " nor the built-in table; only exact model ids and their dated snapshots are priced): its cost is not counted\n",
		"retired:    2020-01-01, its price source says: calls to acme-small may be refused\n",
	} {
		require.Contains(t, out.String(), want)
	}

	// The job carries what the file said: no worker reads it.
	data, err := w.Encode()
	require.NoError(t, err)
	require.NoError(t, os.Remove(file))
	got, err := Decode(data)
	require.NoError(t, err)
	require.Empty(t, got.Prices)
	for i, a := range got.Actions {
		require.Equal(t, w.Actions[i].Price, a.Price, a.Name)
		require.Equal(t, w.Actions[i].ContextWindow, a.ContextWindow, a.Name)
	}
	require.Equal(t, w.Actions[0].Overflow, got.Actions[0].Overflow)
}

// JETPOOL_PRICES names a price file for every workflow Load reads; a
// workflow's own prices: wins, and Parse never reads the variable.
func TestPriceFileEnv(t *testing.T) {
	dir := writeFiles(t, map[string]string{"env.json": litellmFixture, "own.json": strings.ReplaceAll(litellmFixture, "2.6e-06", "2.7e-06"),
		"plain.yaml": "actions:\n  - {name: a, provider: openai, model: gpt-4o, prompt: hi}\n",
		"own.yaml":   "prices: own.json\nactions:\n  - {name: a, provider: openai, model: gpt-4o, prompt: hi}\n"})
	t.Setenv(PricesEnv, filepath.Join(dir, "env.json"))
	w, err := Load(filepath.Join(dir, "plain.yaml"))
	require.NoError(t, err)
	require.Equal(t, 2.6, w.Actions[0].Price.InputPerMTok)
	require.Equal(t, filepath.Join(dir, "env.json"), w.Prices)

	w, err = Load(filepath.Join(dir, "own.yaml"))
	require.NoError(t, err)
	require.Equal(t, 2.7, w.Actions[0].Price.InputPerMTok)

	data, err := os.ReadFile(filepath.Join(dir, "plain.yaml"))
	require.NoError(t, err)
	w, err = Parse(filepath.Join(dir, "plain.yaml"), data)
	require.NoError(t, err)
	require.Equal(t, 2.5, w.Actions[0].Price.InputPerMTok, "Parse: the built-in table")

	t.Setenv(PricesEnv, filepath.Join(dir, "missing.json"))
	_, err = Load(filepath.Join(dir, "plain.yaml"))
	require.ErrorContains(t, err, filepath.Join(dir, "plain.yaml")+": JETPOOL_PRICES: price file: open "+filepath.Join(dir, "missing.json"))
}

func TestPriceFileErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, prices, workflow, want string
	}{
		{"Missing", "", "prices: nope.json\nactions:\n  - {name: a, provider: sim, prompt: hi}\n",
			"wf.yaml:1: prices: price file: open DIR/nope.json: no such file or directory"},
		{"Empty", "", "prices: \"\"\nactions:\n  - {name: a, provider: sim, prompt: hi}\n",
			"wf.yaml:1: prices: empty; want the path of a price file in LiteLLM's format"},
		{"NotJSON", "{\n\"gpt-4o\": {\n\"input_cost_per_token\": 1e-06\n\"output_cost_per_token\": 1e-06}}",
			"prices: p.json\nactions:\n  - {name: a, provider: sim, prompt: hi}\n",
			"wf.yaml:1: prices: price file DIR/p.json:4: not JSON: invalid character '\"' after object key:value pair"},
		{"BadEntry", "{\n\"gpt-4o\": {\"input_cost_per_token\": \"x\", \"output_cost_per_token\": 1e-06}\n}",
			"prices: p.json\nactions:\n  - name: a\n    provider: openai\n    model: gpt-4o-2024-08-06\n    prompt: hi\n",
			`wf.yaml:5: actions[0].model: price file DIR/p.json:2: entry "gpt-4o": input_cost_per_token: want a number, got "x"`},
		{"BadFallbackEntry", "{\n\"gpt-4o\": {\"input_cost_per_token\": -1, \"output_cost_per_token\": 1e-06}\n}",
			"prices: p.json\nactions:\n  - {name: a, provider: openai, model: gpt-4.1, prompt: \"{{ .t }}\", overflow: {fallback_model: gpt-4o}}\n",
			`wf.yaml:3: actions[0].overflow.fallback_model: price file DIR/p.json:2: entry "gpt-4o": input_cost_per_token: -1 must not be negative`},
		{"NotAString", "", "prices: [a, b]\nactions:\n  - {name: a, provider: sim, prompt: hi}\n",
			"wf.yaml:1: prices: want a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{"wf.yaml": tc.workflow}
			if tc.prices != "" {
				files["p.json"] = tc.prices
			}
			dir := writeFiles(t, files)
			_, err := Load(filepath.Join(dir, "wf.yaml"))
			require.Error(t, err)
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			want = strings.Replace(want, "wf.yaml", filepath.Join(dir, "wf.yaml"), 1)
			require.Contains(t, err.Error(), want)
		})
	}
}

// A price: block's long_context tier: read, checked, carried by the job.
func TestPriceLongContext(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  mine:
    kind: openai
    base_url: "http://127.0.0.1:1/v1"
    price:
      input_per_mtok: 3
      output_per_mtok: 15
      cached_input_per_mtok: 0.3
      long_context: {above_tokens: 128000, input_per_mtok: 6, output_per_mtok: 22.5}
actions:
  - {name: a, provider: mine, model: m, prompt: hi}
`)
	p := w.Actions[0].Price
	require.Equal(t, &pricing.Tier{AboveTokens: 128_000, InputPerMTok: 6, OutputPerMTok: 22.5}, p.LongContext)
	data, err := w.Encode()
	require.NoError(t, err)
	got, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, p, got.Actions[0].Price)

	for _, tc := range []struct{ tier, want string }{
		{"{input_per_mtok: 6, output_per_mtok: 22.5}", "actions[0].price.long_context.above_tokens: missing; the tier's rates apply to calls whose prompt has more input tokens than this"},
		{"{above_tokens: 0, input_per_mtok: 6, output_per_mtok: 22.5}", "actions[0].price.long_context.above_tokens: 0 is less than 1"},
		{"{above_tokens: 200000, output_per_mtok: 22.5}", "actions[0].price.long_context.input_per_mtok: missing"},
		{"{above_tokens: 200000, input_per_mtok: -6, output_per_mtok: 22.5}", "actions[0].price.long_context.input_per_mtok: -6 must not be negative"},
		{"{above_tokens: 200000, input_per_mtok: 6, output_per_mtok: 22.5, batch_input_per_mtok: 3}", "actions[0].price.long_context.batch_input_per_mtok: unknown field"},
		{"200000", "actions[0].price.long_context: want a mapping"},
	} {
		errs := parseErrs(t, "actions:\n  - {name: a, provider: sim, prompt: hi, price: {input_per_mtok: 3, output_per_mtok: 15, long_context: "+tc.tier+"}}\n")
		require.Len(t, errs, 1, "%v", errs)
		require.Contains(t, errs[0], "workflow.yaml:2: "+tc.want)
	}
}
