package workflow

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
)

// An action's price is its own, else its provider entry's, else the
// built-in table's for a preset's model; unknown stays nil. The encoded
// job keeps the price and the context window it was dispatched with.
func TestPrices(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  mine: {kind: openai, base_url: "http://127.0.0.1:1/v1", price: {input_per_mtok: 1, output_per_mtok: 2}}
  openrouter: {}
defaults:
  provider: openai
actions:
  - {name: builtin, model: gpt-4o-mini-2024-07-18, prompt: hi}
  - {name: own, model: gpt-4o-mini, prompt: hi, price: {input_per_mtok: 0.1, output_per_mtok: 0.2, batch_input_per_mtok: 0.01, batch_output_per_mtok: 0.02}}
  - {name: entry, provider: mine, model: m, prompt: hi}
  - {name: unknown, provider: openrouter, model: gpt-4o-mini, prompt: hi}
  - {name: anthropic, provider: anthropic, model: claude-sonnet-4-5, prompt: hi}
  - {name: near, provider: anthropic, model: claude-opus-4-9, prompt: hi}
`)
	want, _ := pricing.Lookup("openai", "gpt-4o-mini")
	require.Equal(t, &want.Price, w.Actions[0].Price)
	require.Equal(t, "built-in "+pricing.TableDate+": gpt-4o-mini", w.Actions[0].Price.Source)
	require.Equal(t, 128_000, w.Actions[0].ContextWindow)
	require.Equal(t, &pricing.Price{InputPerMTok: 0.1, OutputPerMTok: 0.2, BatchInputPerMTok: 0.01, BatchOutputPerMTok: 0.02, Source: "workflow"}, w.Actions[1].Price)
	require.Equal(t, 128_000, w.Actions[1].ContextWindow, "a price: block overrides the price, not the window")
	require.Equal(t, &pricing.Price{InputPerMTok: 1, OutputPerMTok: 2, Source: "workflow"}, w.Actions[2].Price)
	require.Nil(t, w.Actions[3].Price, "another endpoint's price is not guessed")
	require.Zero(t, w.Actions[3].ContextWindow)
	require.Equal(t, 3.0, w.Actions[4].Price.InputPerMTok)
	require.Equal(t, 200_000, w.Actions[4].Price.LongContext.AboveTokens)
	require.Nil(t, w.Actions[5].Price, "a newer family member is not priced as an older one")

	data, err := w.Encode()
	require.NoError(t, err)
	got, err := Decode(data)
	require.NoError(t, err)
	for i, a := range got.Actions {
		require.Equal(t, w.Actions[i].Price, a.Price, a.Name)
		require.Equal(t, w.Actions[i].ContextWindow, a.ContextWindow, a.Name)
	}

	var out bytes.Buffer
	w.Describe(&out)
	require.Contains(t, out.String(), "price:      $0.15 in, $0.6 out per Mtok, cached $0.075 (built-in "+pricing.TableDate+": gpt-4o-mini)")
	require.Contains(t, out.String(), "context:    128,000 input tokens\n")
	require.Contains(t, out.String(), "price:      unpriced: set `price:` or load a price file (openrouter/gpt-4o-mini is not in the built-in table, "+
		"which prices the models of anthropic, gemini, gemini-openai, groq and openai only; only exact model ids and their dated snapshots are priced): its cost is not counted")
	require.Contains(t, out.String(), "price:      unpriced: set `price:` or load a price file (anthropic/claude-opus-4-9 is not in the built-in table; "+
		"only exact model ids and their dated snapshots are priced)")
}

// A job carries the prices it was dispatched with: a decoded action
// without one stays unpriced, whatever this version's table knows.
func TestDecodeLooksNothingUp(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
actions:
  - {name: a, provider: openrouter, model: gpt-4o, prompt: hi}
providers:
  openrouter: {kind: openai, base_url: "http://127.0.0.1:1/v1"}
`)
	data, err := w.Encode()
	require.NoError(t, err)
	data = bytes.ReplaceAll(data, []byte(`"provider": "openrouter"`), []byte(`"provider": "openai"`))
	data = bytes.ReplaceAll(data, []byte(`"openrouter": {`), []byte(`"openai": {`))
	got, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, "openai", got.Actions[0].Provider)
	require.Nil(t, got.Actions[0].Price, "the table's gpt-4o price is not taken at the worker")
	require.Zero(t, got.Actions[0].ContextWindow)
}

func TestPriceAndBudgetErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, src, want string }{
		{"NegativeRate", `
actions:
  - {name: a, provider: sim, prompt: hi, price: {input_per_mtok: -1, output_per_mtok: 2}}
`, "workflow.yaml:2: actions[0].price.input_per_mtok: -1 must not be negative"},
		{"MissingOutput", `
actions:
  - {name: a, provider: sim, prompt: hi, price: {input_per_mtok: 1}}
`, "workflow.yaml:2: actions[0].price.output_per_mtok: missing; a price needs input_per_mtok and output_per_mtok (dollars per million tokens)"},
		{"RateNotANumber", `
providers:
  openai: {price: {input_per_mtok: cheap, output_per_mtok: 2}}
actions:
  - {name: a, provider: openai, model: m, prompt: hi}
`, `workflow.yaml:2: providers.openai.price.input_per_mtok: want an amount in dollars such as 0.15, got "cheap"`},
		{"BadOnTruncated", `
actions:
  - {name: a, provider: sim, prompt: hi, on_truncated: retry}
`, `workflow.yaml:2: actions[0].on_truncated: bad value "retry" (want fail, ok or grow)`},
		{"BadOnFiltered", `
actions:
  - {name: a, provider: sim, prompt: hi, on_filtered: maybe}
`, `workflow.yaml:2: actions[0].on_filtered: bad value "maybe" (want fail or ok)`},
		{"NegativeBudget", `
defaults: {max_cost: -5}
actions:
  - {name: a, provider: sim, prompt: hi, price: {input_per_mtok: 1, output_per_mtok: 1}}
`, "workflow.yaml:1: defaults.max_cost: -5 must not be negative"},
		{"BudgetOnAnAction", `
actions:
  - {name: a, provider: sim, prompt: hi, max_cost: 5}
`, "workflow.yaml:2: actions[0].max_cost: unknown field"},
		{"BudgetWithoutPrice", `
defaults: {max_cost: 5}
actions:
  - {name: a, provider: sim, prompt: hi}
`, "workflow.yaml:1: defaults.max_cost: action a (provider sim, model default) is unpriced, so the budget could not count its calls: set `price:` or load a price file"},
		{"BudgetWithoutMaxTokens", `
defaults: {max_cost: 5}
actions:
  - {name: a, provider: sim, prompt: hi, price: {input_per_mtok: 1, output_per_mtok: 1}}
`, "workflow.yaml:1: defaults.max_cost: action a (provider sim, model default) sets no max_tokens, so nothing bounds what one of its calls may cost and the budget could be passed by any answer: set params: {max_tokens: N} (or max_completion_tokens) to the most output an answer may need"},
		{"CarryNotAList", `
carry: text
actions:
  - {name: a, provider: sim, prompt: hi}
`, `workflow.yaml:1: carry: want a list of record field names, got "text"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			errs := parseErrs(t, tc.src)
			require.Len(t, errs, 1, "%v", errs)
			require.Contains(t, errs[0], tc.want)
		})
	}
}

// What bounds a call's output under a budget: max_tokens under any of its
// names, or Anthropic's adapter default; nothing for the others.
func TestOutputBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind   string
		params map[string]any
		want   int
		ok     bool
	}{
		{"openai", map[string]any{"max_tokens": 300.0}, 300, true},
		{"openai", map[string]any{"max_completion_tokens": 400.0}, 400, true},
		{"gemini", map[string]any{"max_output_tokens": 500.0}, 500, true},
		{"openai", map[string]any{"temperature": 0.0}, 0, false},
		{"gemini", nil, 0, false},
		{"sim", nil, 0, false},
		{"anthropic", nil, 1024, true},
		{"anthropic", map[string]any{"max_tokens": 64.0}, 64, true},
	} {
		n, ok := OutputBound(tc.kind, tc.params)
		require.Equal(t, tc.ok, ok, "%s %v", tc.kind, tc.params)
		require.Equal(t, tc.want, n, "%s %v", tc.kind, tc.params)
	}
	// An Anthropic action needs no max_tokens under a budget; an OpenAI one does.
	_, err := Parse("wf.yaml", []byte(`
providers:
  a: {kind: anthropic, base_url: "http://127.0.0.1:1/v1", api_key_env: K, price: {input_per_mtok: 3, output_per_mtok: 15}}
  o: {kind: openai, base_url: "http://127.0.0.1:1/v1", api_key_env: K, price: {input_per_mtok: 3, output_per_mtok: 15}}
defaults: {max_cost: 5}
actions:
  - {name: x, provider: a, model: m, prompt: hi}
  - {name: y, provider: o, model: m, prompt: hi, params: {max_completion_tokens: 100}}
`))
	require.NoError(t, err)
}
