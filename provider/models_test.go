package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

func TestOpenAIReasoning(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]bool{
		"gpt-5": true, "gpt-5-mini": true, "gpt-5.1": true, "openai/gpt-5-nano": true, "o1": true, "o3-mini": true, "o4-mini": true,
		"gpt-5-chat-latest": false, "gpt-4.1-mini": false, "gpt-4o": false, "omni-moderation-latest": false, "o": false,
	} {
		require.Equal(t, want, provider.OpenAIReasoning(model), model)
	}
}

// TestAdaptParamsLeavesTheActionsMap: the action's params are shared by
// every call and every model: they are copied, never changed.
func TestAdaptParamsLeavesTheActionsMap(t *testing.T) {
	t.Parallel()
	params := map[string]any{"max_tokens": 50.0, "temperature": 0.2, "seed": 7.0}
	out, changes := provider.AdaptParams(provider.KindOpenAI, "o3", params)
	require.Equal(t, map[string]any{"max_completion_tokens": 50.0, "seed": 7.0}, out)
	require.Len(t, changes, 2)
	require.Equal(t, map[string]any{"max_tokens": 50.0, "temperature": 0.2, "seed": 7.0}, params)

	same, none := provider.AdaptParams(provider.KindAnthropic, "o3", params)
	require.Empty(t, none, "rules are OpenAI's, for kind openai")
	require.Equal(t, params, same)
}
