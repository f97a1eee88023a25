package provider

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// Calls in flight to one host keep their connections between rounds:
// the second and third rounds of as many calls at once dial nothing new
// (net/http's own default keeps two idle connections a host, and every
// other connection was closed after its call and dialled again).
func TestConnectionsKeptForEverySlot(t *testing.T) {
	t.Parallel()
	const slots = 48
	var dialled atomic.Int64
	var round sync.WaitGroup
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		round.Done()
		round.Wait() // every call of the round in flight at once
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini",` +
			`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	p, err := newOpenAI(Config{Name: "local", Kind: "openai", BaseURL: srv.URL + "/v1"})
	require.NoError(t, err)
	for r := range 3 {
		round.Add(slots)
		var calls sync.WaitGroup
		errs := make(chan error, slots)
		for range slots {
			calls.Add(1)
			go func() {
				defer calls.Done()
				_, err := p.Call(context.Background(), Request{Model: "gpt-4o-mini", Messages: []Message{{Role: "user", Content: "hi"}}})
				errs <- err
			}()
		}
		calls.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		require.EqualValues(t, slots, dialled.Load(), "connections dialled after round %d", r+1)
	}
}
