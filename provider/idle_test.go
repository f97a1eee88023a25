package provider_test

import (
	"strings"
	"time"

	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// idleCases are the suite's streams that stay open without content: each
// wire format's keep-alives (an SSE comment and empty chunks for OpenAI,
// pings for Anthropic, empty and usage-only chunks for Gemini), and
// silence, are cut after the stream idle timeout, long before the call's
// timeout, as a network error: retried, like a stream that dropped. A
// slow stream whose content keeps coming is not cut, however long it takes.
func idleCases() []suiteCase {
	const every = 20 * time.Millisecond
	stalled := func(msg string, oai, ant, gem providertest.Stall) map[string]cell {
		w := want{err: &wantErr{class: retry.ClassNetwork, typeName: "StreamIdleError",
			msg: "the stream sent no content for 300ms (stream_idle_timeout), " + msg}}
		return map[string]cell{
			"openai": {serve: oai, want: w}, "anthropic": {serve: ant, want: w}, "gemini": {serve: gem, want: w},
			"sim": {skip: "wire-only: the sim has no stream to stall"},
		}
	}
	// A slow stream: more deltas than fit in the idle timeout, each well
	// within it.
	slow := make([]string, 40)
	for i := range slow {
		slow[i] = string(rune('a' + i%26))
	}
	text := strings.Join(slow, "")
	trickle := func(evs []string) providertest.Trickle {
		return providertest.Trickle{Events: evs, Every: 100 * time.Millisecond}
	}
	return []suiteCase{{
		name: "a stream of keep-alives and no content", stream: true, timeout: time.Minute, idle: 300 * time.Millisecond,
		cells: stalled("only",
			providertest.Stall{Start: providertest.OpenAIStart("gpt-4o-mini"), Keepalives: providertest.OpenAIKeepalives("gpt-4o-mini"), Every: every},
			providertest.Stall{Start: providertest.AnthropicStart("claude-sonnet-4-5"), Keepalives: providertest.AnthropicKeepalives(), Every: every},
			providertest.Stall{Keepalives: providertest.GeminiKeepalives("gemini-2.5-flash"), Every: every}),
	}, {
		name: "a stream that goes silent after its headers", stream: true, timeout: time.Minute, idle: 300 * time.Millisecond,
		cells: stalled("not even a keep-alive",
			providertest.Stall{Every: every}, providertest.Stall{Every: every}, providertest.Stall{Every: every}),
	}, {
		name: "a slow stream that keeps making progress", stream: true, idle: 1500 * time.Millisecond, timeout: time.Minute,
		cells: map[string]cell{
			"openai":    {serve: trickle(providertest.OpenAIStream("gpt-4o-mini", slow, 12, 5)), want: want{text: text}},
			"anthropic": {serve: trickle(providertest.AnthropicStream("claude-sonnet-4-5", slow, 12, 5)), want: want{text: text}},
			"gemini":    {serve: trickle(providertest.GeminiStream("gemini-2.5-flash", slow, 12, 5)), want: want{text: text}},
			"sim":       {skip: "wire-only: the sim has no stream to stall"},
		},
	}}
}
