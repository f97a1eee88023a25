package provider

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// What counts as content in each wire format: text, a tool call's name or
// arguments, reasoning and thinking (a model that thinks aloud is working);
// not a role chunk, an empty delta, a ping, a block's start.
func TestStreamProgress(t *testing.T) {
	t.Parallel()
	for delta, moves := range map[string]bool{
		`{}`:                                false,
		`null`:                              false,
		`{"role":"assistant","content":""}`: false,
		`{"content":null,"tool_calls":[]}`:  false,
		`{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}`:     true,
		`{"tool_calls":[{"index":0,"id":"c1","function":{"name":"get"}}]}`: true,
		`{"reasoning_content":"Let me think"}`:                             true,
		`{"reasoning":"step 1"}`:                                           true,
		`{"reasoning_content":""}`:                                         false,
	} {
		require.Equal(t, moves, openAIDeltaMoves(json.RawMessage(delta)), "openai delta %s", delta)
	}
	for _, c := range []struct {
		kind, text, partial, thinking, signature string
		moves                                    bool
	}{
		{kind: "ping"},
		{kind: "message_start"},
		{kind: "content_block_start"},
		{kind: "content_block_delta", text: `""`},
		{kind: "content_block_delta", text: `"Hi"`, moves: true},
		{kind: "content_block_delta", partial: `{"a":`, moves: true},
		{kind: "content_block_delta", thinking: "Hmm", moves: true},
		{kind: "content_block_delta", signature: "EqQB", moves: true},
		{kind: "message_delta", moves: true},
	} {
		require.Equal(t, c.moves, anthropicMoves(c.kind, json.RawMessage(c.text), c.partial, c.thinking, c.signature), "%+v", c)
	}
	for chunk, thinks := range map[string]bool{
		`{"usageMetadata":{"promptTokenCount":3}}`:                                               false,
		`{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"}}]}`:                    false,
		`{"candidates":[{"content":{"parts":[{"text":"plan","thought":true}],"role":"model"}}]}`: true,
	} {
		var r geminiResponse
		require.NoError(t, json.Unmarshal([]byte(chunk), &r))
		require.Equal(t, thinks, geminiThinks(&r), chunk)
	}
}

// The default leaves a silent thinker half the timeout it was given.
func TestStreamIdleDefault(t *testing.T) {
	t.Parallel()
	require.Equal(t, TimeoutDefault/2, Config{}.StreamIdle())
	require.Equal(t, 5*time.Minute, Config{Timeout: 10 * time.Minute}.StreamIdle())
	require.Equal(t, 7*time.Second, Config{Timeout: 10 * time.Minute, StreamIdleTimeout: 7 * time.Second}.StreamIdle())
}
