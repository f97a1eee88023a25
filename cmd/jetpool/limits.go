package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
)

const limitsHelp = `Show every provider's shared rate-limit state (JETPOOL_LIMITS), one entry
per provider and API key (each deployment is one, under its own name, with the
provider it belongs to): its limits, the adaptive windows of the workers calling
it and their learned pace, the calls in flight under limits.concurrency, the
shared cooldown and its cause, the circuit, and the last change and why.

  jetpool limits [--json]          list
  jetpool limits reset PROVIDER    clear PROVIDER's cooldown and circuit, for every
                                   key and every deployment of it (or one deployment,
                                   by its name)

A cooldown always ends by itself (within the provider's max_retry_after) and an
open circuit probes again after its cooldown; reset is for when you know better
(the key was replaced, the outage is over).`

func cmdLimits(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "limits", "[reset PROVIDER] [--json]", limitsHelp)
	asJSON := fs.Bool("json", false, "print the states as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
	case pos[0] == "reset" && len(pos) == 2:
	case pos[0] == "reset":
		return usageErr("limits reset: want exactly one PROVIDER")
	default:
		fs.Usage()
		return usageErr("unexpected arguments %v", pos)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	store, err := ratelimit.NewKVStore(ctx, b)
	if err != nil {
		return err
	}
	if len(pos) == 2 {
		cleared, err := ratelimit.Reset(ctx, store, pos[1], time.Now())
		if err != nil {
			return err
		}
		if len(cleared) == 0 {
			return usageErr("limits reset: no shared state of provider %q (see jetpool limits)", pos[1])
		}
		for _, c := range cleared {
			fmt.Fprintln(e.stdout, c)
		}
		return nil
	}
	states, err := store.List(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(states)
	}
	printLimitStates(e.stdout, states, time.Now())
	return nil
}

// printLimitStates writes one block per provider+key.
func printLimitStates(w io.Writer, states map[string]ratelimit.State, now time.Time) {
	if len(states) == 0 {
		fmt.Fprintln(w, "no shared rate-limit state yet (it appears once a worker has called a provider)")
		return
	}
	keys := make([]string, 0, len(states))
	for k := range states {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		s := states[k]
		if i > 0 {
			fmt.Fprintln(w)
		}
		row := func(label, format string, args ...any) {
			fmt.Fprintf(w, "  %-10s %s\n", label+":", fmt.Sprintf(format, args...))
		}
		of := ""
		if s.Of != "" {
			of = ", deployment of " + s.Of
		}
		fmt.Fprintf(w, "%s (key %s%s)\n", cmpStr(s.Provider, ratelimit.ProviderOf(k)), k, of)
		row("limits", "%s", limitsText(s))
		if ws := windowsText(s, now); ws != "" {
			row("window", "%s", ws)
		}
		row("in flight", "%d", s.InFlight(now))
		row("cooldown", "%s", cooldownText(s, now))
		row("circuit", "%s", circuitText(s, now))
		if !s.Changed.IsZero() {
			row("changed", "%s: %s", clock(s.Changed, now), s.Reason)
		}
	}
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// clock is a time as 15:04:05, and how long ago.
func clock(t, now time.Time) string {
	return fmt.Sprintf("%s (%s ago)", t.Local().Format("15:04:05"), now.Sub(t).Round(time.Second))
}

func limitsText(s ratelimit.State) string {
	l := s.Limits
	switch {
	case l.Budgeted():
		return fmt.Sprintf("rpm %d, tpm %d, concurrency %d", l.RPM, l.TPM, l.Concurrency)
	case l.NoAdaptive:
		return "none (adaptive: false)"
	}
	return "adaptive (no rpm, tpm or concurrency)"
}

// windowsText lists the live adaptive windows, one per worker process.
func windowsText(s ratelimit.State, now time.Time) string {
	live := s.LiveWindows(now)
	holders := make([]string, 0, len(live))
	for h := range live {
		holders = append(holders, h)
	}
	sort.Strings(holders)
	var parts []string
	for _, h := range holders {
		w := live[h]
		text := fmt.Sprintf("%d", w.N)
		if !w.Change.At.IsZero() {
			text = fmt.Sprintf("%d (last change %d → %d at %s: %s)", w.N, w.Change.From, w.Change.To,
				w.Change.At.Local().Format("15:04:05"), w.Change.Reason)
		}
		if w.Pace > 0 {
			text += fmt.Sprintf(", paced at %.1f calls/s", w.Pace)
		}
		parts = append(parts, text+" ["+h+"]")
	}
	return strings.Join(parts, "; ")
}

func cooldownText(s ratelimit.State, now time.Time) string {
	if !s.Cooling(now) {
		return "none"
	}
	left := s.CooldownUntil.Sub(now)
	text := fmt.Sprintf("%s left: %s", left.Round(100*time.Millisecond), cmpStr(s.CooldownCause, "(no cause recorded)"))
	if left > provider.MaxRetryAfterDefault {
		text += fmt.Sprintf(" (past the cap: workers read it as at most their provider's max_retry_after, %s unless set)", provider.MaxRetryAfterDefault)
	}
	return text
}

func circuitText(s ratelimit.State, now time.Time) string {
	b := s.Breaker
	switch {
	case b.Closed():
		return ratelimit.CircuitClosed
	case b.State == ratelimit.CircuitOpen && now.Before(b.Until):
		return fmt.Sprintf("open, probe in %s (trip %d): %s", b.Until.Sub(now).Round(time.Second), b.Trips, b.LastError)
	case b.State == ratelimit.CircuitOpen:
		return fmt.Sprintf("open, probe due (trip %d): %s", b.Trips, b.LastError)
	}
	return fmt.Sprintf("half-open, probed by %s: %s", b.Probe, b.LastError)
}
