package worker

import (
	"fmt"
	"maps"
	"strings"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// finishErr decides what a successful call's answer is worth to action a:
// an answer cut at max_tokens or stopped by a content filter is not a
// silent ok.
//
//   - finish_reason length: with on_truncated ok the partial answer is the
//     output; left unset on an action whose expect: block has repairs, the
//     answer goes on to the check, whose correction names the truncation;
//     otherwise (fail, and grow once its growth is spent) it is a
//     TruncatedError of class truncated.
//   - finish_reason content_filter (a filtered answer, a refusal, a
//     blocked prompt): a ContentFilterError of class content_filter, unless
//     on_filtered: ok. It ends the session before the expect: check, so a
//     refusal is never repaired.
//
// Both classes are permanent: neither retry layer calls again (the same
// request is cut or filtered again), the record is dead-lettered with
// reason truncated or content_filter, and output holds the partial answer
// for the failed result. Anything else (stop, tool_calls, other, or a
// provider that gave no reason) is accepted as it is.
func finishErr(a *workflow.Action, resp provider.Response) *retry.Error {
	switch resp.FinishReason {
	case provider.FinishLength:
		switch a.OnTruncated {
		case workflow.OnTruncatedOK:
			return nil
		case workflow.OnTruncatedDefault:
			if a.Expect != nil && a.Expect.Format == workflow.FormatJSON && a.Expect.RepairAttempts > 0 {
				return nil // the repair loop's business
			}
		}
		return &retry.Error{Class: retry.ClassTruncated, TypeName: "TruncatedError",
			Message:  fmt.Sprintf("answer cut at max_tokens after %d output tokens (finish_reason %s)", resp.Usage.OutputTokens, rawReason(resp)),
			Provider: a.Provider, Model: resp.Model}
	case provider.FinishContentFilter:
		if a.OnFiltered == workflow.OnFilteredOK {
			return nil
		}
		return &retry.Error{Class: retry.ClassContentFilter, TypeName: "ContentFilterError",
			Message:  fmt.Sprintf("%s (finish_reason %s)", filtered(resp.FinishReasonRaw), rawReason(resp)),
			Provider: a.Provider, Model: resp.Model}
	}
	return nil
}

// filtered says which of a content filter's answers raw is: a refusal (the
// model's own words, in the output), a prompt blocked before any answer,
// or an answer the filter stopped.
func filtered(raw string) string {
	switch {
	case raw == provider.FinishRawRefusal:
		return "the model refused to answer"
	case strings.HasPrefix(raw, provider.FinishRawBlockPrefix):
		return "prompt blocked by the provider's content filter"
	}
	return "answer stopped by the provider's content filter"
}

func rawReason(resp provider.Response) string {
	if resp.FinishReasonRaw != "" && resp.FinishReasonRaw != resp.FinishReason {
		return resp.FinishReason + ", provider said " + resp.FinishReasonRaw
	}
	return resp.FinishReason
}

// maxTokensParams are the names a max_tokens parameter goes by; the
// adapters map each onto their wire's own.
var maxTokensParams = []string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// grown returns params with max_tokens doubled, for the next ask of an
// action with on_truncated: grow whose answer was cut: from the action's
// own max_tokens (whichever name it uses), else from workflow.GrowFrom. ok
// is false once workflow.GrowMax doublings are spent.
func grown(params map[string]any, grows int) (out map[string]any, ok bool) {
	if grows >= workflow.GrowMax {
		return params, false
	}
	out = maps.Clone(params)
	if out == nil {
		out = map[string]any{}
	}
	for _, k := range maxTokensParams {
		if v, set := out[k].(float64); set && v > 0 {
			out[k] = v * 2
			return out, true
		}
	}
	out["max_tokens"] = float64(workflow.GrowFrom * 2)
	return out, true
}

// paramsFor is the parameters of the run's next ask: the action's, or
// their grown copy after a cut answer.
func (run *sessionEnd) paramsFor(a *workflow.Action) map[string]any {
	if run.params != nil {
		return run.params
	}
	return a.Params
}
