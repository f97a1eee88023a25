package providertest

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Stall answers 200 with a text/event-stream, writes Start (the stream's
// first events), then writes the Keepalives in turn, one every Every, and
// never any content: a stream that is alive and makes no progress. It ends
// when the client goes away (or the test ends); Sent counts the
// keep-alives written, when set.
type Stall struct {
	Start      []string
	Keepalives []string
	Every      time.Duration
	Sent       *atomic.Int64
}

func (s Stall) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, ev := range s.Start {
		io.WriteString(w, ev)
	}
	rc.Flush()
	done, _ := r.Context().Value(doneKey{}).(<-chan struct{})
	t := time.NewTicker(s.Every)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		case <-done:
			return
		}
		if len(s.Keepalives) == 0 {
			continue // silence
		}
		if _, err := io.WriteString(w, s.Keepalives[i%len(s.Keepalives)]); err != nil {
			return
		}
		if rc.Flush() != nil {
			return
		}
		if s.Sent != nil {
			s.Sent.Add(1)
		}
	}
}

// Trickle answers 200 with a text/event-stream of Events, one every Every:
// a slow stream that makes progress all along.
type Trickle struct {
	Events []string
	Every  time.Duration
}

func (s Trickle) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	t := time.NewTicker(s.Every)
	defer t.Stop()
	for _, ev := range s.Events {
		if _, err := io.WriteString(w, ev); err != nil {
			return
		}
		rc.Flush()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
	}
}

// The keep-alives each wire format sends while it has nothing to say.

// OpenAIKeepalives are an SSE comment (as OpenRouter and many gateways
// send) and chunks without content: an empty delta, no choices at all.
func OpenAIKeepalives(model string) []string {
	return []string{
		": keepalive\n\n",
		fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":%s,"+
			"\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", q(model)),
		": OPENROUTER PROCESSING\n\n",
		fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,\"model\":%s,"+
			"\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n", q(model)),
	}
}

// OpenAIStart is the role chunk a stream opens with.
func OpenAIStart(model string) []string { return OpenAIStream(model, nil, 0, 0)[:1] }

// AnthropicKeepalives are Messages API pings.
func AnthropicKeepalives() []string { return []string{anthropicEvent("ping", `{"type": "ping"}`)} }

// AnthropicStart is message_start and the first content_block_start.
func AnthropicStart(model string) []string { return AnthropicStream(model, nil, 10, 0)[:2] }

// GeminiKeepalives are streamGenerateContent chunks without content: a
// part with empty text, a chunk of usage alone.
func GeminiKeepalives(model string) []string {
	return []string{
		"data: " + fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"index":0}],"modelVersion":%s}`, q(model)) + "\r\n\r\n",
		"data: " + fmt.Sprintf(`{"usageMetadata":{"promptTokenCount":10,"totalTokenCount":10},"modelVersion":%s}`, q(model)) + "\r\n\r\n",
	}
}
