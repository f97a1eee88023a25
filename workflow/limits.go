package workflow

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/provider"
)

// Bounds of a provider's limits block and max_retry_after.
const (
	MaxRetryAfterMax = 24 * time.Hour
	// A provider's stream_idle_timeout: a second at least (a gap between
	// two tokens of a loaded model can be most of one).
	StreamIdleTimeoutMin = time.Second
	StreamIdleTimeoutMax = 24 * time.Hour
	BreakerMinCallsMax   = 1_000_000
	BreakerWindowMin     = time.Second
	BreakerWindowMax     = time.Hour
	BreakerCooldownMin   = 100 * time.Millisecond
	BreakerCooldownMax   = 24 * time.Hour
)

// limits reads a provider's limits: block into l.
func (p *parser) limits(f field, l *provider.Limits) {
	lf, ok := p.fields(f.val, f.path, "rpm", "tpm", "concurrency", "adaptive", "breaker")
	if !ok {
		return
	}
	if x, ok := lf["rpm"]; ok {
		l.RPM, _ = p.intIn(x, 0, math.MaxInt)
	}
	if x, ok := lf["tpm"]; ok {
		l.TPM, _ = p.intIn(x, 0, math.MaxInt)
	}
	if x, ok := lf["concurrency"]; ok {
		l.Concurrency, _ = p.intIn(x, 0, math.MaxInt)
	}
	if x, ok := lf["adaptive"]; ok {
		if on, ok := p.boolean(x); ok {
			if l.Budgeted() {
				p.errorf(x.key.Line, x.path, "only without rpm, tpm and concurrency (a budget already turns adaptive concurrency off)")
			}
			l.NoAdaptive = !on
		}
	}
	if x, ok := lf["breaker"]; ok {
		l.Breaker = p.breaker(x)
	}
}

// breaker reads limits.breaker: false (no breaker), or a mapping of
// failure_ratio, min_calls, window, cooldown and cooldown_max.
func (p *parser) breaker(f field) provider.Breaker {
	var b provider.Breaker
	if f.val.Kind == yaml.ScalarNode && f.val.ShortTag() == "!!bool" {
		if on, ok := p.boolean(f); ok {
			if on {
				p.errorf(f.val.Line, f.path, "true is the default; write false to turn the breaker off, or a mapping to tune it")
			}
			b.Off = !on
		}
		return b
	}
	bf, ok := p.fields(f.val, f.path, "failure_ratio", "min_calls", "window", "cooldown", "cooldown_max")
	if !ok {
		return b
	}
	if x, ok := bf["failure_ratio"]; ok {
		b.FailureRatio, _ = p.ratio(x)
	}
	if x, ok := bf["min_calls"]; ok {
		b.MinCalls, _ = p.intIn(x, 1, BreakerMinCallsMax)
	}
	if x, ok := bf["window"]; ok {
		b.Window, _ = p.durationIn(x, BreakerWindowMin, BreakerWindowMax)
	}
	if x, ok := bf["cooldown"]; ok {
		b.Cooldown, _ = p.durationIn(x, BreakerCooldownMin, BreakerCooldownMax)
	}
	if x, ok := bf["cooldown_max"]; ok {
		if d, ok := p.durationIn(x, BreakerCooldownMin, BreakerCooldownMax); ok {
			if b.Cooldown > 0 && d < b.Cooldown {
				p.errorf(x.val.Line, x.path, "%s is shorter than cooldown %s", d, b.Cooldown)
			} else {
				b.CooldownMax = d
			}
		}
	}
	return b
}

// ratio reads a number in (0, 1].
func (p *parser) ratio(f field) (float64, bool) {
	n := f.val
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!float" || n.ShortTag() == "!!int") {
		if v, err := strconv.ParseFloat(strings.TrimSpace(n.Value), 64); err == nil {
			if v > 0 && v <= 1 {
				return v, true
			}
			p.errorf(n.Line, f.path, "%s is out of range: want more than 0 and at most 1 (0.5: half the calls)", n.Value)
			return 0, false
		}
	}
	p.errorf(n.Line, f.path, "want a number between 0 and 1 such as 0.5, got %s", describe(n))
	return 0, false
}

// durationIn reads a duration within [lo, hi].
func (p *parser) durationIn(f field, lo, hi time.Duration) (time.Duration, bool) {
	d, ok := p.duration(f)
	if !ok {
		return 0, false
	}
	if d < lo || d > hi {
		p.errorf(f.val.Line, f.path, "%s is out of range %s-%s", d, lo, hi)
		return 0, false
	}
	return d, true
}

// describeLimits is what validate prints of a provider's limits: the part
// of its line, and the lines under it (the breaker, the Retry-After cap).
func describeLimits(c provider.Config) (part string, lines []string) {
	switch l := c.Limits; {
	case l.Budgeted():
		part = fmt.Sprintf("limits rpm %s, tpm %s, concurrency %s", limit(l.RPM), limit(l.TPM), limit(l.Concurrency))
	case l.NoAdaptive:
		part = "no limits, adaptive concurrency off"
	default:
		part = "no limits: adaptive concurrency"
	}
	if b := c.Limits.Breaker; b.Off {
		lines = append(lines, "breaker: off")
	} else {
		b = b.WithDefaults()
		lines = append(lines, fmt.Sprintf("breaker: opens when %s %% of at least %d calls in %s fail (5xx, overload, connection); open %s, doubling up to %s",
			strconv.FormatFloat(b.FailureRatio*100, 'f', -1, 64), b.MinCalls, b.Window, b.Cooldown, b.CooldownMax))
	}
	lines = append(lines, "Retry-After: honoured up to "+c.RetryAfterCap().String()+" (max_retry_after)")
	return part, lines
}
