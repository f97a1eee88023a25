package pricing

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// Model is what a price source knows of a model id: its price, its context
// window and its retirement.
type Model struct {
	Price
	// ContextWindow is the most input tokens the model takes (LiteLLM's
	// max_input_tokens); 0 when the source does not say.
	ContextWindow int
	// Retires is the date (YYYY-MM-DD) the source gives for the model's
	// shutdown (LiteLLM's deprecation_date); "" when it gives none.
	Retires string
	// Key is the source's entry that priced the id: the id itself, the
	// model a dated snapshot is of, or a price file's "gemini/…" key.
	Key string
}

// Candidates are the ids a model id may be priced by, in order: the id
// itself, then, when it is a dated snapshot, the model it is a snapshot of.
// A snapshot is the id with one of the vendors' date suffixes:
//
//   - "-YYYY-MM-DD" (OpenAI: gpt-4o-2024-08-06),
//   - "-YYYYMMDD" (Anthropic: claude-sonnet-4-5-20250929),
//   - "@YYYYMMDD" (Vertex AI: claude-sonnet-4-5@20250929),
//
// where the date is a real calendar date. Gemini's "models/" resource
// prefix is dropped first. Nothing else maps: not a longer name
// ("o3-mini" is not "o3", "claude-opus-4-5" is not "claude-opus-4"), not a
// "-latest" alias (it moves to other models), not a preview date or a
// version number ("-preview-06-17", "-001", "-0613"), whose models have had
// prices of their own; a source lists those it prices.
func Candidates(model string) []string {
	model = strings.TrimPrefix(model, "models/")
	if model == "" {
		return nil
	}
	if base, ok := snapshotOf(model); ok {
		return []string{model, base}
	}
	return []string{model}
}

// snapshotOf returns the model a dated snapshot id is of.
func snapshotOf(id string) (string, bool) {
	for _, f := range []struct{ sep, layout string }{{"-", "2006-01-02"}, {"-", "20060102"}, {"@", "20060102"}} {
		n := len(f.layout)
		if len(id) <= n+1 || id[len(id)-n-1:len(id)-n] != f.sep {
			continue
		}
		date := id[len(id)-n:]
		if !digitsAt(date, f.layout) {
			continue
		}
		if _, err := time.Parse(f.layout, date); err != nil {
			continue
		}
		return id[:len(id)-n-1], true
	}
	return "", false
}

// digitsAt reports whether s has a digit wherever layout has one, and
// layout's other characters elsewhere: time.Parse alone takes "2024-1-02".
func digitsAt(s, layout string) bool {
	if len(s) != len(layout) {
		return false
	}
	for i := range len(s) {
		isDigit := s[i] >= '0' && s[i] <= '9'
		if want := layout[i] >= '0' && layout[i] <= '9'; want != isDigit || !want && s[i] != layout[i] {
			return false
		}
	}
	return true
}

// Lookup is the built-in price of model on the preset called providerName
// (openai, anthropic, gemini, gemini-openai, groq): the table's entry for
// the exact id, else, for a dated snapshot (Candidates), the entry of the
// model it is a snapshot of. A snapshot the table lists has its own entry,
// which wins (gpt-4o-2024-05-13 is not priced as gpt-4o). Any other id is
// unpriced: ok is false.
func Lookup(providerName, model string) (Model, bool) {
	models, ok := builtin()[providerName]
	if !ok {
		return Model{}, false
	}
	for _, id := range Candidates(model) {
		if e, ok := models[id]; ok {
			m := e.model
			m.Key = id
			if e.alias != "" {
				m = models[e.alias].model
				m.Key = e.alias
			}
			m.Source = "built-in " + e.date() + ": " + m.Key
			return m, true
		}
	}
	return Model{}, false
}

// Retired reports whether m's source says it was shut down by now.
func (m Model) Retired(now time.Time) bool {
	d, err := time.Parse(time.DateOnly, m.Retires)
	return err == nil && !now.Before(d)
}

// TableProviders are the presets the built-in table prices models of.
func TableProviders() []string {
	return slices.Sorted(maps.Keys(builtin()))
}
