package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

func TestFinish(t *testing.T) {
	t.Parallel()
	repairing := &workflow.Expect{Format: workflow.FormatJSON, RepairAttempts: 2}
	cut := provider.Response{Text: `{"title": "Du`, FinishReason: provider.FinishLength, FinishReasonRaw: "max_tokens",
		Model: "claude-sonnet-4-5", Usage: provider.Usage{OutputTokens: 12}}
	filtered := provider.Response{Text: "", FinishReason: provider.FinishContentFilter, FinishReasonRaw: "SAFETY", Model: "gemini-2.5-flash"}
	refusal := provider.Response{Text: "I'm sorry, I can't help with that.", FinishReason: provider.FinishContentFilter,
		FinishReasonRaw: provider.FinishRawRefusal, Model: "gpt-4o-mini"}
	blocked := provider.Response{FinishReason: provider.FinishContentFilter, FinishReasonRaw: provider.FinishRawBlockPrefix + "SAFETY",
		Model: "gemini-2.5-flash", Usage: provider.Usage{InputTokens: 8}}
	for _, tc := range []struct {
		name   string
		action workflow.Action
		resp   provider.Response
		class  retry.Class // "" : accepted
		msg    string
	}{
		{"stop is accepted", workflow.Action{}, provider.Response{Text: "hi", FinishReason: provider.FinishStop}, "", ""},
		{"no reason is accepted", workflow.Action{}, provider.Response{Text: "hi"}, "", ""},
		{"tool calls are accepted", workflow.Action{}, provider.Response{FinishReason: provider.FinishToolCalls}, "", ""},
		{"truncated fails by default", workflow.Action{Provider: "anthropic"}, cut, retry.ClassTruncated,
			"TruncatedError: answer cut at max_tokens after 12 output tokens (finish_reason length, provider said max_tokens)"},
		{"truncated fails with fail, even with repairs", workflow.Action{OnTruncated: workflow.OnTruncatedFail, Expect: repairing}, cut, retry.ClassTruncated, "TruncatedError"},
		{"truncated goes to the repair loop by default", workflow.Action{Expect: repairing}, cut, "", ""},
		{"truncated without repairs fails", workflow.Action{Expect: &workflow.Expect{Format: workflow.FormatJSON}}, cut, retry.ClassTruncated, "TruncatedError"},
		{"truncated is accepted with ok", workflow.Action{OnTruncated: workflow.OnTruncatedOK}, cut, "", ""},
		{"grow fails once spent", workflow.Action{OnTruncated: workflow.OnTruncatedGrow}, cut, retry.ClassTruncated, "TruncatedError"},
		{"filtered fails by default", workflow.Action{}, filtered, retry.ClassContentFilter,
			"ContentFilterError: answer stopped by the provider's content filter (finish_reason content_filter, provider said SAFETY)"},
		{"filtered is accepted with ok", workflow.Action{OnFiltered: workflow.OnFilteredOK}, filtered, "", ""},
		{"a refusal fails, even with repairs", workflow.Action{Expect: repairing}, refusal, retry.ClassContentFilter,
			"ContentFilterError: the model refused to answer (finish_reason content_filter, provider said refusal)"},
		{"a refusal is accepted with ok", workflow.Action{OnFiltered: workflow.OnFilteredOK}, refusal, "", ""},
		{"a blocked prompt fails", workflow.Action{}, blocked, retry.ClassContentFilter,
			"ContentFilterError: prompt blocked by the provider's content filter (finish_reason content_filter, provider said blockReason SAFETY)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := finishErr(&tc.action, tc.resp)
			if tc.class == "" {
				require.Nil(t, err)
				return
			}
			require.NotNil(t, err)
			require.Equal(t, tc.class, err.Class)
			require.True(t, err.Class.Permanent(), "neither layer calls again")
			require.False(t, retry.Retryable(err))
			require.Contains(t, err.Error(), tc.msg)
			reason := map[retry.Class]retry.Reason{retry.ClassTruncated: retry.ReasonTruncated, retry.ClassContentFilter: retry.ReasonContentFilter}[tc.class]
			dec := (retry.Policy{Enabled: true}).Decide(retry.Outcome{Err: err}, 1)
			require.Equal(t, retry.Decision{Verdict: retry.VerdictDeadLetter, Reason: reason}, dec, "dead-lettered at once")
		})
	}
}

func TestGrown(t *testing.T) {
	t.Parallel()
	p, ok := grown(map[string]any{"temperature": 0.0, "max_completion_tokens": 100.0}, 0)
	require.True(t, ok)
	require.Equal(t, map[string]any{"temperature": 0.0, "max_completion_tokens": 200.0}, p)
	p, ok = grown(nil, 1)
	require.True(t, ok)
	require.Equal(t, map[string]any{"max_tokens": float64(2 * workflow.GrowFrom)}, p)
	_, ok = grown(p, workflow.GrowMax)
	require.False(t, ok)
}
