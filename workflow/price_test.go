package workflow

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
)

// An action's price is its own, else its provider entry's, else the
// built-in table's for a preset's model; unknown stays nil. The encoded
// job keeps the price it was dispatched with.
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
`)
	want, _ := pricing.Lookup("openai", "gpt-4o-mini")
	require.Equal(t, &want, w.Actions[0].Price)
	require.Equal(t, "built-in "+pricing.TableDate, w.Actions[0].Price.Source)
	require.Equal(t, &pricing.Price{InputPerMTok: 0.1, OutputPerMTok: 0.2, BatchInputPerMTok: 0.01, BatchOutputPerMTok: 0.02, Source: "workflow"}, w.Actions[1].Price)
	require.Equal(t, &pricing.Price{InputPerMTok: 1, OutputPerMTok: 2, Source: "workflow"}, w.Actions[2].Price)
	require.Nil(t, w.Actions[3].Price, "another endpoint's price is not guessed")
	require.Equal(t, 3.0, w.Actions[4].Price.InputPerMTok)

	data, err := w.Encode()
	require.NoError(t, err)
	got, err := Decode(data)
	require.NoError(t, err)
	for i, a := range got.Actions {
		require.Equal(t, w.Actions[i].Price, a.Price, a.Name)
	}

	var out bytes.Buffer
	w.Describe(&out)
	require.Contains(t, out.String(), "price:      $0.15 in, $0.6 out per Mtok, cached $0.075 (built-in "+pricing.TableDate+")")
	require.Contains(t, out.String(), "price:      unknown (no price: block, and not in the built-in table)")
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
`, "workflow.yaml:1: defaults.max_cost: action a (provider sim, model default) has no known price, so the budget could not count its calls: give it a price: block"},
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
