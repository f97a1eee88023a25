package workflow

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Describe writes what `jetpool validate` prints: the providers, and for
// every action its provider and model, mode, both retry layers, the worst
// case they allow (calls = attempts × deliveries, and the waiting that takes),
// its expectation and repair budget, and max_calls.
func (w *Workflow) Describe(out io.Writer) {
	pr := func(format string, args ...any) { fmt.Fprintf(out, format, args...) }
	n := len(w.Actions)
	pr("workflow %s: %d action%s\n", cmp.Or(w.Name, w.File, "(unnamed)"), n, plural(n))
	if w.Name != "" && w.File != "" {
		pr("  file: %s\n", w.File)
	}
	if w.MaxCost > 0 {
		pr("  max_cost: $%g (a cap: each call's worst case is set aside before it is sent, and calls go while what is spent and set aside is below it)\n", w.MaxCost)
	}
	if len(w.Carry) > 0 {
		pr("  carry: %s (copied into every result line)\n", strings.Join(w.Carry, ", "))
	}
	if w.Prices != "" {
		pr("  prices: %s (before the built-in table; an action's or provider's price: wins)\n", w.Prices)
	}
	for _, name := range slices.Sorted(maps.Keys(w.Providers)) {
		describeProvider(pr, name, w.Providers[name])
	}
	for i, a := range w.Actions {
		w.describeAction(pr, i, a)
	}
}

// describeProvider writes a provider's line and its limits.
func describeProvider(pr func(string, ...any), name string, c provider.Config) {
	var parts []string
	parts = append(parts, "kind "+c.Kind)
	if c.BaseURL != "" {
		parts = append(parts, c.BaseURL)
	}
	switch {
	case len(c.Deployments) > 0:
		parts = append(parts, fmt.Sprintf("calls spread over %d deployments: to one with room now, by learned rate or rpm; none to one resting (open circuit, cooldown)", len(c.Deployments)))
	case c.APIKeyFile != "":
		parts = append(parts, "key from file "+c.APIKeyFile)
	case c.APIKeyEnv != "":
		parts = append(parts, "key from $"+c.APIKeyEnv)
	}
	if c.Timeout > 0 {
		parts = append(parts, "timeout "+c.Timeout.String())
	}
	limits, lines := describeLimits(c) // limits.go
	parts = append(parts, limits)
	pr("  provider %s: %s\n", name, strings.Join(parts, ", "))
	for _, l := range lines {
		pr("    %s\n", l)
	}
	describeDeployments(pr, c) // deployments.go
	if c.Stream || c.StreamIdleTimeout > 0 {
		pr("    stream: cut after %s without content (stream_idle_timeout), retried as a dropped stream\n", c.StreamIdle())
	}
}

// describeAction writes an action's rows.
func (w *Workflow) describeAction(pr func(string, ...any), i int, a *Action) {
	n := len(w.Actions)
	pr("\naction %d/%d %s (line %d)\n", i+1, n, a.Name, a.Line)
	row := func(label, format string, args ...any) {
		if label != "" {
			label += ":"
		}
		pr("  %-11s %s\n", label, fmt.Sprintf(format, args...))
	}
	var flags []string
	if a.Stream {
		flags = append(flags, "stream")
	}
	if a.JSON {
		flags = append(flags, "json mode")
	}
	model := cmp.Or(a.Model, "(provider default)")
	kind := w.Providers[a.Provider].Kind
	row("provider", "%s/%s (%s)%s", a.Provider, model, kind, prefixed(", ", flags))
	for _, c := range ParamChanges(kind, a.Model, a.Params) {
		row("params", "%s", c)
	}
	if a.Mode == ModeBatch {
		fallback := ""
		if a.Fallback != "" {
			fallback = ", stragglers fall back to " + a.Fallback
		}
		row("mode", "batch: up to %d records, sent after %s, polled every %s%s", a.Batch.MaxRecords, a.Batch.MaxWait, a.Batch.Poll, fallback)
	} else {
		row("mode", "%s", a.Mode)
	}
	w.describeFallbacks(a, row) // fallbacks.go
	calls := describeBudget(a, w.Providers[a.Provider], row)
	if e := a.Expect; e != nil {
		what := e.Format
		switch {
		case e.SchemaFile != "":
			what += ", schema from " + e.SchemaFile
		case e.Schema != nil:
			what += ", inline schema"
		}
		row("expect", "%s", what)
		if e.RepairAttempts > 0 {
			row("repair", "up to %s, then %s", count(e.RepairAttempts, "call", "calls"), cmp.Or(e.RepairOnExhausted, retry.OnExhaustedDefault))
		} else {
			row("repair", "none (an output that fails the expectation fails the record)")
		}
	}
	describeMore(a, kind, row) // multimodal.go
	switch {
	case a.MaxCalls > 0 && a.MaxCalls < calls:
		row("max_calls", "%d (caps the worst case of %d)", a.MaxCalls, calls)
	case a.MaxCalls > 0:
		row("max_calls", "%d", a.MaxCalls)
	}
	if o := a.Overflow; o != nil {
		row("overflow", "%s", o.describe())
		row("", "worst case with its rounds: %s", o.worstCase(a))
	}
	if f := a.Fields(); len(f) > 0 {
		row("reads", "%s", strings.Join(f, ", "))
	}
	w.describePrice(a, kind, row) // prices.go
	if w.MaxCost > 0 {
		row("max_cost", "%s", w.reservation(a)) // budget.go
	}
	if a.OnTruncated != OnTruncatedDefault {
		row("truncated", "%s", describeTruncated(a))
	}
	if a.OnFiltered == OnFilteredOK {
		row("filtered", "ok (an answer stopped by a content filter is kept as it is)")
	}
}

// describeBudget writes an action's retry rows and the worst case they
// allow, and returns its calls before max_calls.
func describeBudget(a *Action, pc provider.Config, row func(label, format string, args ...any)) (calls int) {
	p := a.Retry
	if p.Enabled {
		row("retry", "session: %s, backoff %s doubling up to %s, budget %s", count(p.Attempts(), "attempt", "attempts"),
			p.Backoff, p.MaxBackoff, p.SessionBudget())
		row("", "exec: %s, redeliver backoff %s doubling", count(p.Deliveries(), "delivery", "deliveries"), p.RedeliverBackoff)
		row("", "on_exhausted: %s", p.OnExhausted)
	} else {
		off := "off (1 call, 1 delivery)"
		if p.OnExhausted == retry.Raise {
			off += ", on_exhausted: raise"
		}
		row("retry", "%s", off)
	}
	bound := a.Bound(pc)
	calls = bound.Uncapped
	shape := fmt.Sprintf("%s × %s", count(p.Attempts(), "attempt", "attempts"), count(p.Deliveries(), "delivery", "deliveries"))
	if rounds := bound.Uncapped / max(p.Attempts()*p.Deliveries(), 1); rounds > 1 && a.Mode != ModeBatch {
		what := "repairs, max_tokens doublings"
		if len(a.Fallbacks) > 0 {
			what += ", fallbacks"
		}
		shape += fmt.Sprintf(" × %d rounds (%s)", rounds, what)
	}
	if a.Mode == ModeBatch {
		shape += fmt.Sprintf(", + %d batch rounds", p.Attempts())
	}
	row("worst case", "%s (%s), a hard bound of every layer", count(bound.Calls, "call", "calls"), shape)
	row("", "%s if processes die mid-call (the calls of up to %d deliveries lost with them: docs/durability.md)",
		count(bound.Killed, "call", "calls"), retry.LostBeforeAlone+retry.LostDeliveriesMax)
	row("", "at most %s waiting between calls (max_wait %s for the provider included), %s with every call at its timeout",
		bound.Waiting.Round(time.Millisecond), p.WaitLimit(), bound.Total.Round(time.Second))
	return calls
}

// ParamChanges are what the model's rules change in params at request time
// (provider.AdaptParams): shown by validate, which warns of the dropped ones.
func ParamChanges(kind, model string, params map[string]any) []provider.ParamChange {
	_, changes := provider.AdaptParams(kind, model, params)
	return changes
}

// ParamWarnings are what `jetpool validate` warns of the actions' params:
// each one that a model's rules drop (a temperature gpt-5 refuses, say), so
// that a workflow written for another model is not silently run otherwise.
func (w *Workflow) ParamWarnings() []string {
	var out []string
	for _, a := range w.Actions {
		for _, c := range ParamChanges(w.Providers[a.Provider].Kind, a.Model, a.Params) {
			if c.To == "" {
				out = append(out, fmt.Sprintf("%s:%d: actions[%d].params.%s (action %s)", w.File, a.Line, a.Index, c, a.Name))
			}
		}
	}
	return out
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// count renders "1 call" or "3 calls".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func limit(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func prefixed(sep string, parts []string) string {
	if len(parts) == 0 {
		return ""
	}
	return sep + strings.Join(parts, ", ")
}

// describeTruncated says what a cut answer does under a's on_truncated.
func describeTruncated(a *Action) string {
	switch a.OnTruncated {
	case OnTruncatedOK:
		return "ok (a cut answer is kept, finish_reason length)"
	case OnTruncatedGrow:
		return fmt.Sprintf("grow (asks again with max_tokens doubled, up to %d times), then fail", GrowMax)
	case OnTruncatedFail:
		return "fail (class truncated, dead-lettered with the partial output)"
	}
	if a.Expect != nil && a.Expect.Format == FormatJSON && a.Expect.RepairAttempts > 0 {
		return "repair (the expect: check asks again), then fail"
	}
	return "fail (class truncated, dead-lettered with the partial output)"
}
