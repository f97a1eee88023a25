package ratelimit

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"
)

// Cleared is what Reset changed in one key's state.
type Cleared struct {
	Key      string        `json:"key"`
	Cooldown time.Duration `json:"cooldown,omitempty"` // what was left of the cooldown
	Circuit  string        `json:"circuit,omitempty"`  // the circuit's state before, when not closed
}

// String is "openai.1a2b3c4d5e6f: cooldown cleared (9m12s left), circuit closed (was open)".
func (c Cleared) String() string {
	var parts []string
	if c.Cooldown > 0 {
		parts = append(parts, fmt.Sprintf("cooldown cleared (%s left)", c.Cooldown.Round(100*time.Millisecond)))
	}
	if c.Circuit != "" {
		parts = append(parts, fmt.Sprintf("circuit closed (was %s)", c.Circuit))
	}
	if len(parts) == 0 {
		parts = append(parts, "nothing to clear")
	}
	return c.Key + ": " + strings.Join(parts, ", ")
}

// OfProvider reports whether key's state belongs to the provider called
// name, or to one of its deployments.
func OfProvider(key string, s State, name string) bool {
	return s.Provider == name || ProviderOf(key) == token(name) || (s.Of != "" && s.Of == name)
}

// Reset clears the shared cooldown and the circuit of every key of the
// provider called name (each key is one API key of it), at now, for every
// process: each sees the change through its watch. It returns what it
// cleared, by key, sorted; none when the store holds no state of name.
func Reset(ctx context.Context, store Store, name string, now time.Time) ([]Cleared, error) {
	states, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []Cleared
	for key, s := range states {
		if !OfProvider(key, s, name) {
			continue
		}
		var c Cleared
		_, err := store.Update(ctx, key, func(s *State) bool {
			c = Cleared{Key: key}
			if s.Cooling(now) {
				c.Cooldown = s.CooldownUntil.Sub(now)
			}
			if !s.Breaker.Closed() {
				c.Circuit = s.Breaker.State
			}
			s.CooldownUntil, s.CooldownCause = time.Time{}, ""
			s.Breaker.close()
			s.note(now, "reset by jetpool limits reset")
			s.Updated = now
			return true
		})
		if err != nil {
			return out, fmt.Errorf("reset %s: %w", key, err)
		}
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
