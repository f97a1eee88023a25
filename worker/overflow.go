package worker

import (
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// Compaction: an action's overflow: block answers a call refused
// for a prompt longer than the model's context window. The design's retry
// layers never retry context_overflow (docs/design.md §1: "compaction's
// job"); this is that job, as rounds of the session like repairs are:
//
//   - On an overflow, the record moves to the fallback model when there is
//     one and it has not moved yet (nothing is cut while a larger model may
//     take it all); otherwise the field is cut by what the provider said is
//     over (retry.ParseOverflow, retry.Overflow.Keep), the prompt rendered
//     again over the shortened field and sent as a new conversation.
//   - Each round is a call: it counts against max_calls (a cap that stops
//     a round ends the record with reason max_calls, as it does a repair)
//     and in validate's bound (retry.Action.OverflowRounds). Rounds are per
//     delivery, as repairs are.
//   - A record whose rounds are spent, or that no cut of the field could
//     fit, is dead-lettered as context_overflow with what was tried.
//   - Each overflow that names the window teaches it (retry.Window) to the
//     job's later records on this worker: a prompt estimated well over it is
//     moved or cut before it is sent, without paying a call to learn it.
//
// Every step is in the record's story (broker.Recovery.Compacted) and
// written on the attempt that overflowed.

// overflowRun is one delivery's compaction: rounds spent, the field as the
// record has it, how much of it the prompt now holds.
type overflowRun struct {
	rounds int
	moved  bool   // on the fallback model
	orig   []rune // the field, once read
	kept   int    // runes of orig in the prompt
	story  []broker.Compaction
}

// compactions is the delivery's story of compaction (nil: none).
func (run *sessionEnd) compactions() []broker.Compaction {
	if run == nil || run.overflow == nil {
		return nil
	}
	return run.overflow.story
}

// compact answers a round that ended with a context overflow: it returns
// the provider to call in the next round, with d.action, the history and
// run set for it, or nil when the record ends here (run.explain then says
// what was tried).
func (jr *jobRunner) compact(d *delivery, run *sessionEnd, h *history, e *retry.Error, pr provider.Provider) provider.Provider {
	cfg := d.action.Overflow
	if cfg == nil || len(run.attempts) == 0 {
		return nil
	}
	if run.overflow == nil {
		run.overflow = &overflowRun{}
	}
	st := run.overflow
	sent := sentRunes(d.action.System, h.msgs)
	o, _ := retry.ParseOverflow(e.Message)
	learn(jr.id, d.action, o, sent)
	last := &run.attempts[len(run.attempts)-1]
	giveUp := func(why string) provider.Provider {
		run.explain = func(all []retry.Attempt) string {
			return retry.Diagnose(e, all, d.delivery()) + "; overflow: " + st.tried() + why
		}
		return nil
	}
	if st.rounds >= cfg.MaxRounds {
		return giveUp(fmt.Sprintf("still too long (%s) after %s (max_rounds %d)", o, count(st.rounds, "round"), cfg.MaxRounds))
	}
	if a := d.action; a.MaxCalls > 0 && len(d.prior())+run.calls >= a.MaxCalls {
		run.reason = retry.ReasonMaxCalls
		run.explain = maxCallsDiag(a.MaxCalls, d.delivery(), "")
		return nil
	}
	next, c, why := jr.overflowStep(d, run, h, o, sent, pr)
	if next == nil {
		return giveUp(why)
	}
	st.rounds++
	c.After = last.N
	st.story = append(st.story, c)
	last.Error += "; then " + c.Note
	return next
}

// overflowStep makes the next move for a prompt of sent runes that o says
// does not fit: to the fallback, else a cut of the field. It returns the
// provider to call and the step's story, or nil and why not.
func (jr *jobRunner) overflowStep(d *delivery, run *sessionEnd, h *history, o retry.Overflow, sent int, pr provider.Provider) (provider.Provider, broker.Compaction, string) {
	cfg, st := d.action.Overflow, run.overflow
	if cfg.FallbackModel != "" && !st.moved {
		next, err := jr.providerAt(d.revision, cfg.FallbackProvider)
		if err != nil {
			return nil, broker.Compaction{}, "the fallback's provider: " + err.Error()
		}
		f := *d.action
		f.Provider, f.Model, f.Price, f.ContextWindow = cfg.FallbackProvider, cfg.FallbackModel, cfg.FallbackPrice, cfg.FallbackContextWindow
		d.action, run.model, st.moved = &f, cfg.FallbackModel, true
		return next, broker.Compaction{Model: cfg.FallbackProvider + "/" + cfg.FallbackModel,
			Note: "moved to " + cfg.FallbackProvider + "/" + cfg.FallbackModel}, ""
	}
	if cfg.Truncate == "" {
		return nil, broker.Compaction{}, fmt.Sprintf("the fallback %s/%s is too small too (%s), and no field may be shortened (overflow.truncate)",
			cfg.FallbackProvider, cfg.FallbackModel, o)
	}
	if st.orig == nil {
		text, why := fieldText(d, cfg.Truncate)
		if why != "" {
			return nil, broker.Compaction{}, why
		}
		st.orig = []rune(text)
		st.kept = len(st.orig)
	}
	keep, ok := o.Keep(sent, st.kept)
	if !ok {
		return nil, broker.Compaction{}, fmt.Sprintf("%s cannot be shortened enough: the prompt is over (%s) even without its %s chars",
			cfg.Truncate, o, retry.Thousands(st.kept))
	}
	data, err := templateData(d, nil)
	if err != nil {
		return nil, broker.Compaction{}, err.Error()
	}
	data[cfg.Truncate] = cut(st.orig, keep, cfg.Keep)
	prompt, err := d.action.Render(data)
	if err != nil {
		return nil, broker.Compaction{}, err.Error()
	}
	c := broker.Compaction{Field: cfg.Truncate, From: st.kept, To: keep,
		Note: fmt.Sprintf("%s %s → %s chars", cfg.Truncate, retry.Thousands(st.kept), retry.Thousands(keep))}
	st.kept = keep
	// A new conversation over the shortened prompt: the turns of a repair
	// under way are dropped with the prompt they answered.
	h.msgs = []provider.Message{{Role: "user", Content: prompt}}
	return pr, c, ""
}

// estimateOverflow, before the first call, moves or cuts a prompt that a
// window an earlier overflow named, or else the model's context window the
// job was dispatched with, says will not fit (retry.Window.Estimate): no
// call is paid to learn it again. A prompt the estimate cannot fix is sent
// as it is: the provider's own numbers decide.
func (jr *jobRunner) estimateOverflow(d *delivery, run *sessionEnd, h *history, pr provider.Provider) provider.Provider {
	cfg := d.action.Overflow
	if cfg == nil {
		return pr
	}
	for range 2 { // the action's model, then perhaps the fallback's
		w, known := window(jr.id, d.action)
		if !known {
			return pr
		}
		sent := sentRunes(d.action.System, h.msgs)
		o, over := w.Estimate(sent)
		if !over {
			return pr
		}
		if run.overflow == nil {
			run.overflow = &overflowRun{}
		}
		next, c, _ := jr.overflowStep(d, run, h, o, sent, pr)
		if next == nil {
			return pr
		}
		c.Note += fmt.Sprintf(" before the first call (estimated %s)", o)
		run.overflow.story = append(run.overflow.story, c)
		if c.Field != "" {
			return next // cut to fit its window
		}
		pr = next
	}
	return pr
}

// tried lists the steps taken so far, for a diagnostic.
func (st *overflowRun) tried() string {
	if len(st.story) == 0 {
		return ""
	}
	notes := make([]string, len(st.story))
	for i, c := range st.story {
		notes[i] = c.Note
	}
	return "tried " + strings.Join(notes, ", then ") + "; "
}

// fieldText is the text of the record's field name (or an earlier action's
// text output of that name), or why it cannot be cut.
func fieldText(d *delivery, name string) (string, string) {
	data, err := templateData(d, []string{name})
	if err != nil {
		return "", err.Error()
	}
	switch v := data[name].(type) {
	case string:
		return v, ""
	case nil:
		return "", fmt.Sprintf("the record has no text in %s to shorten", name)
	default:
		return "", fmt.Sprintf("%s is a JSON %s, not text: it cannot be shortened", name, jsonKind(v))
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "boolean"
	}
	return "number"
}

// cut keeps keep runes of r: its head, its tail or its middle.
func cut(r []rune, keep int, how string) string {
	if keep >= len(r) {
		return string(r)
	}
	keep = max(keep, 0)
	switch how {
	case workflow.KeepTail:
		return string(r[len(r)-keep:])
	case workflow.KeepMiddle:
		from := (len(r) - keep) / 2
		return string(r[from : from+keep])
	}
	return string(r[:keep])
}

// sentRunes is the size of a request in characters: its system prompt and
// messages.
func sentRunes(system string, msgs []provider.Message) int {
	n := utf8.RuneCountInString(system)
	for _, m := range msgs {
		n += utf8.RuneCountInString(m.Content)
	}
	return n
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// windows are the context windows overflows have named, by job, provider
// and model: what lets a worker estimate a prompt before it is sent.
// Bounded, for long-running workers that see many jobs.
var windows = struct {
	sync.Mutex
	m map[windowKey]retry.Window
}{m: map[windowKey]retry.Window{}}

const windowsMax = 256

type windowKey struct{ job, provider, model string }

// learn keeps the window o names for a's model, measured on a request of
// sent runes. Of the ratios measured it keeps the most characters per
// token: an estimate then counts the fewest tokens a prompt may hold, so
// that a record of denser text than another is never cut before the call
// for the other's sake (it is sent, and cut by its own numbers).
func learn(job string, a *workflow.Action, o retry.Overflow, sent int) {
	w, ok := o.Window(sent)
	if !ok {
		return
	}
	k := windowKey{job, a.Provider, a.Model}
	windows.Lock()
	defer windows.Unlock()
	if old, ok := windows.m[k]; ok {
		w.PerToken = max(w.PerToken, old.PerToken)
	} else if len(windows.m) >= windowsMax {
		clear(windows.m)
	}
	windows.m[k] = w
}

// window is what the job has learned of a's model's window, else the
// context window its price source gives (retry.KnownWindow): counted at
// the fewest tokens a prompt's characters may make, until an overflow
// measures the job's own ratio.
func window(job string, a *workflow.Action) (retry.Window, bool) {
	windows.Lock()
	w, ok := windows.m[windowKey{job, a.Provider, a.Model}]
	windows.Unlock()
	if !ok && a.ContextWindow > 0 {
		return retry.KnownWindow(a.ContextWindow), true
	}
	return w, ok
}
