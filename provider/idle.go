package provider

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
)

// A stream that stays open without content — keep-alive comments,
// Anthropic's pings, chunks with empty deltas, or nothing at all — holds
// its worker's slot until the call's timeout: a provider that accepted the
// request and then stalls keeps the stream alive for as long as it likes.
// So a streamed answer must make progress: a call whose stream brings no
// content (text, a tool call's name or arguments, reasoning) for the
// provider's stream idle timeout is cut, as a network error, and retried
// like a stream that dropped.

// StreamIdle is how long a streamed answer of c may go without content
// before it is cut: StreamIdleTimeout when set, else half the
// call's timeout (a minute with the default timeout). Half, so that a
// stalled stream frees its slot well before the timeout would, while a
// model that thinks silently (a reasoning model whose thinking is not
// streamed) gets as much room as the timeout the operator gave it allows.
// A value at or above the timeout leaves the timeout alone to end a stream.
func (c Config) StreamIdle() time.Duration {
	if c.StreamIdleTimeout > 0 {
		return c.StreamIdleTimeout
	}
	return cmp.Or(c.Timeout, TimeoutDefault) / 2
}

// StreamIdleError is the cause of a stream cut for making no progress; the
// call's error is a network error that says it.
type StreamIdleError struct {
	After      time.Duration // the stream idle timeout
	Keepalives int           // comments and events without content since the last content
}

func (e *StreamIdleError) Error() string {
	s := fmt.Sprintf("the stream sent no content for %s (stream_idle_timeout)", e.After)
	switch e.Keepalives {
	case 0:
		return s + ", not even a keep-alive"
	case 1:
		return s + ", only 1 keep-alive or empty event"
	}
	return s + fmt.Sprintf(", only %d keep-alives or empty events", e.Keepalives)
}

// stopKey carries a call's context's cancel function (callContext), for its
// stream's idle watch.
type stopKey struct{}

// callContext is withTimeout for a model call: a stream's context can also
// be cut by its idle watch (watchIdle).
func (c *client) callContext(ctx context.Context, stream bool) (context.Context, context.CancelFunc) {
	ctx, cancel := c.withTimeout(ctx)
	if !stream {
		return ctx, cancel
	}
	ctx, stop := context.WithCancelCause(ctx)
	return context.WithValue(ctx, stopKey{}, stop), func() { stop(nil); cancel() }
}

// idleWatch cuts a stream that makes no progress for limit: a timer that,
// when it fires, looks at when content last came and either waits the rest
// or cancels the call's context with a *StreamIdleError. Content costs a
// clock read and an atomic store, not a timer reset.
type idleWatch struct {
	limit      time.Duration
	last       atomic.Int64 // unix ns of the last content (or the start)
	keepalives atomic.Int64 // since the last content
	done       atomic.Bool
	stop       context.CancelCauseFunc
	timer      *time.Timer
}

// watchIdle starts watching the stream of a call whose context came from
// callContext; nil (whose methods do nothing) for any other context.
func (c *client) watchIdle(ctx context.Context) *idleWatch {
	stop, ok := ctx.Value(stopKey{}).(context.CancelCauseFunc)
	if !ok {
		return nil
	}
	w := &idleWatch{limit: c.cfg.StreamIdle(), stop: stop}
	w.last.Store(time.Now().UnixNano())
	w.timer = time.AfterFunc(w.limit, w.fire)
	return w
}

func (w *idleWatch) fire() {
	if w.done.Load() {
		return
	}
	if idle := time.Since(time.Unix(0, w.last.Load())); idle < w.limit {
		w.timer.Reset(w.limit - idle)
		return
	}
	w.stop(&StreamIdleError{After: w.limit, Keepalives: int(w.keepalives.Load())})
}

// progress notes content.
func (w *idleWatch) progress() {
	if w != nil {
		w.last.Store(time.Now().UnixNano())
		w.keepalives.Store(0)
	}
}

// keepalive notes a comment or an event without content: the stream is
// alive, but it is not progress.
func (w *idleWatch) keepalive() {
	if w != nil {
		w.keepalives.Add(1)
	}
}

// end stops the watch when the stream is over.
func (w *idleWatch) end() {
	if w != nil {
		w.done.Store(true)
		w.timer.Stop()
	}
}

// streamIdle is the cause of ctx's end when its stream was cut for idling.
func streamIdle(ctx context.Context) (*StreamIdleError, bool) {
	e, ok := context.Cause(ctx).(*StreamIdleError)
	return e, ok
}

func isStreamIdle(ctx context.Context) bool {
	_, ok := streamIdle(ctx)
	return ok
}

// openAIDeltaMoves reports whether an OpenAI delta without text carries
// content: a tool call's name or arguments, or reasoning (reasoning_content
// of DeepSeek and vLLM, reasoning of OpenRouter and Ollama).
func openAIDeltaMoves(delta json.RawMessage) bool {
	if len(delta) < 3 { // {}, null
		return false
	}
	var d struct {
		ToolCalls []struct {
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
		ReasoningContent string `json:"reasoning_content"`
		Reasoning        string `json:"reasoning"`
	}
	if json.Unmarshal(delta, &d) != nil {
		return false
	}
	for _, c := range d.ToolCalls {
		if c.Function.Name != "" || c.Function.Arguments != "" {
			return true
		}
	}
	return d.ReasoningContent != "" || d.Reasoning != ""
}

// anthropicMoves reports whether an Anthropic event carries content: a
// delta of text, of a tool's input, of thinking, or the message's end.
func anthropicMoves(kind string, text json.RawMessage, partial, thinking, signature string) bool {
	switch kind {
	case "content_block_delta":
		return (len(text) > 0 && string(text) != `""` && string(text) != "null") || partial != "" || thinking != "" || signature != ""
	case "message_delta", "message_stop":
		return true
	}
	return false
}

// geminiThinks reports whether a Gemini chunk carries a thought (which
// apply leaves out of the answer): the model is working.
func geminiThinks(r *geminiResponse) bool {
	if len(r.Candidates) == 0 || len(r.Candidates[0].Content) == 0 {
		return false
	}
	var content struct {
		Parts []struct {
			Text    string `json:"text"`
			Thought bool   `json:"thought"`
		} `json:"parts"`
	}
	if json.Unmarshal(r.Candidates[0].Content, &content) != nil {
		return false
	}
	for _, p := range content.Parts {
		if p.Thought && p.Text != "" {
			return true
		}
	}
	return false
}
