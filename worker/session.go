package worker

import (
	"context"
	"maps"
	"strings"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// history is a session's message history (retry.History).
type history struct{ msgs []provider.Message }

func (h *history) Len() int       { return len(h.msgs) }
func (h *history) Truncate(n int) { h.msgs = h.msgs[:n] }

// sessionRun is what one delivery's session produced.
type sessionRun struct {
	outcome retry.Outcome
	output  any
	model   string
	usage   provider.Usage
	calls   int
	repairs int
	diag    string // set when the session ends the record itself (e.g. repair exhausted)
}

// templateData is what an action's prompt sees: the record's fields, and
// the outputs of earlier actions by action name.
func templateData(d *delivery) map[string]any {
	data := make(map[string]any, len(d.env.Record)+len(d.env.Outputs))
	maps.Copy(data, d.env.Record)
	maps.Copy(data, d.env.Outputs)
	return data
}

func (jr *jobRunner) runSession(ctx context.Context, d *delivery) *sessionRun {
	run := &sessionRun{model: d.action.Model}
	a := d.action
	prompt, err := a.Render(templateData(d))
	if err != nil {
		run.outcome = retry.Outcome{Err: &retry.Error{Class: retry.ClassProgramming, TypeName: "TemplateError", Message: err.Error()}}
		return run
	}
	pr, err := jr.provider(a.Provider)
	if err != nil {
		run.outcome = retry.Outcome{Err: &retry.Error{Class: retry.ClassProgramming, TypeName: "ProviderError", Message: err.Error()}}
		return run
	}
	h := &history{msgs: []provider.Message{{Role: "user", Content: prompt}}}
	s := &retry.Session{
		Policy:        a.Retry,
		Clock:         jr.p.cfg.Clock,
		History:       h,
		Delivery:      d.n,
		PriorAttempts: len(d.prior),
	}
	var text string
	run.outcome = s.Run(ctx, func(ctx context.Context, attempt int) error {
		req := provider.Request{
			Model: a.Model, System: a.System, Messages: h.msgs, Params: a.Params, JSON: a.JSON,
			Stream: a.Stream, RecordID: d.env.ID,
		}
		if a.Expect != nil {
			req.JSON, req.Schema = true, a.Expect.Schema
		}
		var partial *strings.Builder
		if req.Stream {
			// The assistant turn grows as the stream arrives; if the stream
			// breaks, the session pops it before the next attempt.
			partial = &strings.Builder{}
			h.msgs = append(h.msgs, provider.Message{Role: "assistant"})
			idx := len(h.msgs) - 1
			req.Messages = h.msgs[:idx]
			req.OnDelta = func(t string) {
				partial.WriteString(t)
				h.msgs[idx].Content = partial.String()
			}
		}
		run.calls++
		resp, err := jr.call(ctx, a.Provider, pr, req)
		if err != nil {
			return err
		}
		run.usage.InputTokens += resp.Usage.InputTokens
		run.usage.OutputTokens += resp.Usage.OutputTokens
		if resp.Model != "" {
			run.model = resp.Model
		}
		if !req.Stream {
			h.msgs = append(h.msgs, provider.Message{Role: "assistant", Content: resp.Text})
		} else {
			h.msgs[len(h.msgs)-1].Content = resp.Text
		}
		text = resp.Text
		return nil
	})
	if run.outcome.Err == nil && !run.outcome.Canceled {
		run.output = text
	}
	return run
}
