package workflow

import (
	"fmt"

	"github.com/jetpool/jetpool/provider"
)

// MaxTokensParams are the names a max_tokens parameter goes by; every
// adapter maps each onto its wire's own (Gemini's maxOutputTokens).
var MaxTokensParams = []string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// OutputBound is the most output a call with params may be billed for on
// a provider of kind: its max_tokens under any name, or for Anthropic the
// max_tokens the adapter sends when none is set. false: nothing bounds it
// (OpenAI and Gemini answer up to the model's own limit).
//
// A job with max_cost reserves each call's worst case before it is sent
// (worker/budget.go), and that needs a bound on the output: a reasoning
// model's output window runs to 100,000 tokens and more, which reserved
// whole would leave a budget room for a few calls at a time, and which
// guessed would make the cap hold only for answers within the guess.
func OutputBound(kind string, params map[string]any) (int, bool) {
	for _, k := range MaxTokensParams {
		switch v := params[k].(type) {
		case float64:
			if v > 0 {
				return int(v), true
			}
		case int:
			if v > 0 {
				return v, true
			}
		}
	}
	if kind == provider.KindAnthropic {
		return provider.AnthropicMaxTokensDefault, true
	}
	return 0, false
}

// unboundedUnderBudget says why action a's calls could not be reserved
// against a budget ("" when they can): an action whose output nothing
// bounds, or whose overflow fallback's output nothing bounds.
func (w *Workflow) unboundedUnderBudget(a *Action) string {
	if a.IsEmbed() || a.Provider == "" {
		return "" // an embedding's cost is its input
	}
	if _, ok := OutputBound(w.Providers[a.Provider].Kind, a.Params); !ok {
		return fmt.Sprintf("action %s (provider %s, model %s) sets no max_tokens, so nothing bounds what one of its calls may cost and the budget could be passed by any answer: set params: {max_tokens: N} (or max_completion_tokens) to the most output an answer may need",
			a.Name, a.Provider, orDefault(a.Model))
	}
	if o := a.Overflow; o != nil && o.FallbackModel != "" {
		if _, ok := OutputBound(w.Providers[o.FallbackProvider].Kind, a.Params); !ok {
			return fmt.Sprintf("action %s's overflow fallback (provider %s, model %s) sets no max_tokens, so nothing bounds what one of its calls may cost: set params: {max_tokens: N} on the action",
				a.Name, o.FallbackProvider, o.FallbackModel)
		}
	}
	return ""
}

// CheckBudget reports why the workflow cannot run under a max_cost (nil
// when it can): an action without a price, whose calls the budget could
// not count, or one whose output nothing bounds, whose calls it could not
// reserve. run/dispatch --max-cost and retry --max-cost check it; a
// workflow file with defaults: max_cost is refused at load, line and field
// named.
func (w *Workflow) CheckBudget() error {
	for _, a := range w.Actions {
		if msg := w.budgetProblem(a); msg != "" {
			return fmt.Errorf("%s", msg)
		}
	}
	return nil
}

// budgetProblem is why action a cannot run under a budget, "" when it can.
func (w *Workflow) budgetProblem(a *Action) string {
	if a.Price == nil && a.Provider != "" {
		return fmt.Sprintf("action %s (provider %s, model %s) is unpriced, so the budget could not count its calls: set `price:` or load a price file",
			a.Name, a.Provider, orDefault(a.Model))
	}
	if o := a.Overflow; o != nil && o.FallbackModel != "" && o.FallbackPrice == nil {
		return fmt.Sprintf("action %s's overflow fallback (provider %s, model %s) is unpriced, so the budget could not count its calls: set `price:` on its provider or load a price file",
			a.Name, o.FallbackProvider, o.FallbackModel)
	}
	for _, f := range a.Fallbacks {
		if f.Price == nil {
			return fmt.Sprintf("action %s's fallback %s is unpriced, so the budget could not count its calls: set its `price:` or load a price file", a.Name, f)
		}
		if _, ok := OutputBound(w.Providers[f.Provider].Kind, a.Params); !ok {
			return fmt.Sprintf("action %s's fallback %s sets no max_tokens, so nothing bounds what one of its calls may cost: set params: {max_tokens: N} on the action", a.Name, f)
		}
	}
	return w.unboundedUnderBudget(a)
}

func orDefault(model string) string {
	if model == "" {
		return "default"
	}
	return model
}

// outputWorstCase is the most the output of one call of action a may cost
// at its price (0, false without a bound or a price).
func (w *Workflow) outputWorstCase(a *Action) (tokens int, dollars float64, ok bool) {
	if a.IsEmbed() || a.Price == nil {
		return 0, 0, false
	}
	n, ok := OutputBound(w.Providers[a.Provider].Kind, a.Params)
	if !ok {
		return 0, 0, false
	}
	return n, a.Price.Cost(provider.Usage{OutputTokens: n}, a.Mode == ModeBatch), true
}

// reservation says what each call of action a sets aside under the budget.
func (w *Workflow) reservation(a *Action) string {
	if a.IsEmbed() {
		return "each request sets aside its inputs' bytes as tokens at the input price until it answers"
	}
	n, c, ok := w.outputWorstCase(a)
	if !ok {
		return "unbounded: set max_tokens"
	}
	return fmt.Sprintf("each call sets aside %d output tokens ($%.4f) and its input (its bytes as tokens, at most) until it answers", n, c)
}

// BudgetWarnings are what `jetpool validate` warns of a budget: an action
// none of whose calls fits it, and one whose calls set aside so much of it
// that few can run at once near its end.
func (w *Workflow) BudgetWarnings() []string {
	if w.MaxCost <= 0 {
		return nil
	}
	var out []string
	for _, a := range w.Actions {
		n, c, ok := w.outputWorstCase(a)
		switch {
		case !ok:
		case c >= w.MaxCost:
			out = append(out, fmt.Sprintf("action %s: one call's output alone (max_tokens %d) may cost $%.4f, more than max_cost $%g: the first call may pass the budget by that much, and calls go one at a time", a.Name, n, c, w.MaxCost))
		case c > w.MaxCost/10:
			out = append(out, fmt.Sprintf("action %s: each call sets aside up to $%.4f of the $%g budget until it answers (max_tokens %d): near its end few calls run at once, and the last may pass the budget by that much; a max_tokens closer to its answers lets more run",
				a.Name, c, w.MaxCost, n))
		}
		if len(a.Images)+len(a.Documents) > 0 {
			out = append(out, fmt.Sprintf("action %s: its images and documents are set aside at an estimate (%d tokens each); a PDF of many pages can cost more, by which the budget can be passed", a.Name, PartTokensEstimate))
		}
	}
	return out
}

// PartTokensEstimate is what an image or a document of a call sets aside
// of the budget, in input tokens: a high-detail image is up to about 1,600
// tokens at Anthropic and OpenAI's 4o, more tiles at Gemini; a document
// page about as much.
const PartTokensEstimate = 6000
