package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/ratelimit"
)

// printLimits lists the shared rate-limit state of every provider+key that
// is cooling down, has a circuit that is not closed, or has calls in flight
// under limits.concurrency (JETPOOL_LIMITS).
func printLimits(ctx context.Context, e *env, b *broker.Broker) {
	store, err := ratelimit.NewKVStore(ctx, b)
	if err != nil {
		return
	}
	states, err := store.List(ctx)
	if err != nil || len(states) == 0 {
		return
	}
	now := time.Now()
	keys := make([]string, 0, len(states))
	for k, s := range states {
		if s.Cooling(now) || !s.Breaker.Closed() || s.InFlight(now) > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return
	}
	sort.Strings(keys)
	tw := newTable(e)
	fmt.Fprintln(tw, "PROVIDER\tKEY\tCIRCUIT\tCOOLDOWN\tIN FLIGHT\tLIMITS\tLAST ERROR")
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
		lim := fmt.Sprintf("rpm %d, tpm %d, concurrency %d", s.Limits.RPM, s.Limits.TPM, s.Limits.Concurrency)
		if !s.Limits.Budgeted() {
			lim = "adaptive"
			if s.Limits.NoAdaptive {
				lim = "none (adaptive off)"
			}
		}
		last := s.Breaker.LastError
		if last == "" {
			last = s.CooldownCause
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Provider, k, circuit, cool, s.InFlight(now), lim, last)
	}
	tw.Flush()
}
