package pricing

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every model of the built-in table is priced by its exact id, by a dated
// snapshot in each vendor form, and by Gemini's models/ name, at its own
// price; every near miss (a newer family member, a longer or shorter name,
// a version bumped) is either a model of the table at its own price or
// unpriced — never another model's price.
func TestEveryTableModel(t *testing.T) {
	t.Parallel()
	own := func(prov, id string) Model {
		e := builtin()[prov][id]
		if e.alias != "" {
			return builtin()[prov][e.alias].model
		}
		return e.model
	}
	checked, nearPriced := 0, 0
	for prov, models := range builtin() {
		for id := range models {
			want := own(prov, id)
			for _, alias := range []string{id, id + "-2025-03-14", id + "-20250314", id + "@20250314", "models/" + id, "models/" + id + "-2026-01-31"} {
				got, ok := Lookup(prov, alias)
				require.True(t, ok, "%s/%s", prov, alias)
				if _, listed := models[Candidates(alias)[0]]; listed && alias != id && Candidates(alias)[0] != id {
					continue // a snapshot with an entry of its own
				}
				require.Equal(t, want.Price.withoutSource(), got.Price.withoutSource(), "%s/%s", prov, alias)
				require.Equal(t, want.ContextWindow, got.ContextWindow, "%s/%s", prov, alias)
				require.NotZero(t, got.ContextWindow, "%s/%s: every entry has its window", prov, alias)
				require.Positive(t, got.InputPerMTok, "%s/%s", prov, alias)
				require.NoError(t, got.Validate(), "%s/%s", prov, alias)
				checked++
			}
			for _, near := range nearMisses(id) {
				got, ok := Lookup(prov, near)
				if !ok {
					continue
				}
				// Priced: so the near miss is a listed id, or a dated
				// snapshot of one, at that id's own price.
				matched := ""
				for _, c := range Candidates(near) {
					if _, listed := models[c]; listed {
						matched = c
						break
					}
				}
				require.NotEmpty(t, matched, "%s/%s priced as %s: only a listed id or its dated snapshot is priced", prov, near, got.Key)
				require.Equal(t, own(prov, matched).Price.withoutSource(), got.Price.withoutSource(), "%s/%s", prov, near)
				if matched != id && models[matched].alias == "" {
					require.NotEqual(t, id, got.Key, "%s/%s took %s's price", prov, near, id)
				}
				nearPriced++
			}
		}
	}
	require.Greater(t, checked, 300)
	t.Logf("%d ids priced as a table model; %d near misses that are themselves table models (or their snapshots) priced as such", checked, nearPriced)
}

func (p Price) withoutSource() Price {
	p.Source = ""
	return p
}

var digitRE = regexp.MustCompile(`\d+`)

// nearMisses are ids one step from id: a family member, a version up or
// down, a suffix more or less, an invalid date.
func nearMisses(id string) []string {
	out := []string{id + "-mini", id + "-pro", id + "-lite", id + "-nano", id + "-fast", id + "-latest", id + "-preview",
		id + "x", id + "-1", id + ".1", id + "-9", id + "-001", id + "-0613", id + "-2025-13-01", id + "-20251399", id + "@2025",
		id + "-2025-03", id[:len(id)-1], "x" + id, "openai/" + id}
	for _, loc := range digitRE.FindAllStringIndex(id, -1) {
		n, _ := strconv.Atoi(id[loc[0]:loc[1]])
		for _, v := range []int{n - 1, n + 1, n + 10} {
			if v >= 0 {
				out = append(out, id[:loc[0]]+fmt.Sprint(v)+id[loc[1]:])
			}
		}
	}
	return out
}
