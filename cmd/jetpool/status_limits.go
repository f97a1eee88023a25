package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/jobstatus"
	"github.com/jetpool/jetpool/ratelimit"
)

// printLimits lists the shared rate-limit state of every provider+key that
// is cooling down, has a circuit that is not closed, has calls in flight
// under limits.concurrency, or workers with an adaptive window
// (JETPOOL_LIMITS); `jetpool limits` shows all of it.
//
// Its reads are bounded by r; it reports false when they did not answer
// (and says so), true otherwise.
func printLimits(ctx context.Context, e *env, b *broker.Broker, r *jobstatus.Reads) bool {
	var states map[string]ratelimit.State
	err := r.Do(ctx, func(ctx context.Context) error {
		store, err := ratelimit.NewKVStore(ctx, b)
		if err == nil {
			states, err = store.List(ctx)
		}
		return err
	})
	if err != nil && broker.Transient(err) {
		fmt.Fprintf(e.stdout, "provider limits (%s): did not answer within %s (%v)\n", broker.BucketLimits, jobstatus.Bound, err)
		return false
	}
	if err != nil || len(states) == 0 {
		return true
	}
	now := time.Now()
	keys := make([]string, 0, len(states))
	for k, s := range states {
		if s.Cooling(now) || !s.Breaker.Closed() || s.InFlight(now) > 0 || len(s.LiveWindows(now)) > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return true
	}
	sort.Strings(keys)
	tw := newTable(e)
	fmt.Fprintln(tw, "PROVIDER\tKEY\tCIRCUIT\tCOOLDOWN\tIN FLIGHT\tWINDOW\tLIMITS\tLAST CHANGE")
	for _, k := range keys {
		s := states[k]
		circuit := s.Breaker.State
		if circuit == "" {
			circuit = ratelimit.CircuitClosed
		}
		if s.Breaker.State == ratelimit.CircuitOpen && now.Before(s.Breaker.Until) {
			circuit += fmt.Sprintf(" (probe in %s)", s.Breaker.Until.Sub(now).Round(time.Second))
		}
		cool := "-"
		if s.Cooling(now) {
			cool = s.CooldownUntil.Sub(now).Round(100 * time.Millisecond).String()
		}
		window := "-"
		if ws := s.LiveWindows(now); len(ws) > 0 {
			var ns []string
			for _, w := range ws {
				n := fmt.Sprint(w.N)
				if w.Pace > 0 {
					n += fmt.Sprintf(" @%.1f/s", w.Pace)
				}
				ns = append(ns, n)
			}
			sort.Strings(ns)
			window = strings.Join(ns, ", ")
		}
		last := "-"
		if !s.Changed.IsZero() {
			last = s.Changed.Local().Format("15:04:05") + " " + s.Reason
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Provider, k, circuit, cool, s.InFlight(now), window, limitsText(s), last)
	}
	tw.Flush()
	return true
}

// limiterLines are the run summary's line per provider: its window and
// the last reason it changed, the circuit, and what the run met.
func limiterLines(reg *ratelimit.Registry) []string {
	if reg == nil {
		return nil
	}
	var out []string
	for _, l := range reg.Limiters() {
		st := l.Status()
		line := fmt.Sprintf("provider %s: %s; circuit %s", st.Provider, st.Window(), st.Circuit)
		if st.Cooldowns > 0 || st.Congested > 0 || st.Faults > 0 {
			line += fmt.Sprintf("; %d answers said it was full (%d shared cooldowns), %d faults", st.Congested, st.Cooldowns, st.Faults)
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}
