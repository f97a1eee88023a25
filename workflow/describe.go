package workflow

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

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
	for _, name := range slices.Sorted(maps.Keys(w.Providers)) {
		c := w.Providers[name]
		var parts []string
		parts = append(parts, "kind "+c.Kind)
		if c.BaseURL != "" {
			parts = append(parts, c.BaseURL)
		}
		switch {
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
	}
	for i, a := range w.Actions {
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
		if a.Mode == ModeBatch {
			fallback := ""
			if a.Fallback != "" {
				fallback = ", stragglers fall back to " + a.Fallback
			}
			row("mode", "batch: up to %d records, sent after %s, polled every %s%s", a.Batch.MaxRecords, a.Batch.MaxWait, a.Batch.Poll, fallback)
		} else {
			row("mode", "%s", a.Mode)
		}
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
		calls, elapsed := p.WorstCase()
		wait := "no waiting"
		if elapsed > 0 {
			wait = elapsed.Round(time.Millisecond).String() + " of waiting between calls"
		}
		row("worst case", "%s (%s × %s), %s", count(calls, "call", "calls"), count(p.Attempts(), "attempt", "attempts"),
			count(p.Deliveries(), "delivery", "deliveries"), wait)
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
		switch {
		case a.MaxCalls > 0 && a.MaxCalls < calls:
			row("max_calls", "%d (caps the worst case of %d)", a.MaxCalls, calls)
		case a.MaxCalls > 0:
			row("max_calls", "%d", a.MaxCalls)
		}
		if f := a.Fields(); len(f) > 0 {
			row("reads", "%s", strings.Join(f, ", "))
		}
	}
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
