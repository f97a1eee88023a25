package provider

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
		okChat(w)
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
		callAll(t, p, slots)
		require.EqualValues(t, slots, dialled.Load(), "connections dialled after round %d", r+1)
	}
}

// okChat answers an OpenAI chat completion.
func okChat(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o-mini",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],` +
		`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`))
}

// tlsProvider is an openai adapter that trusts srv's certificate.
func tlsProvider(t *testing.T, srv *httptest.Server) Provider {
	t.Helper()
	p, err := newOpenAI(Config{Name: "local", Kind: "openai", BaseURL: srv.URL + "/v1"})
	require.NoError(t, err)
	c := p.(*openAI).client
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	c.tr.h1.TLSClientConfig = &tls.Config{RootCAs: roots}
	c.tr.pool.dialer.TLSClientConfig = &tls.Config{RootCAs: roots}
	t.Cleanup(c.CloseIdleConnections)
	return p
}

// callAll makes n calls at once and fails the test on any error.
func callAll(t *testing.T, p Provider, n int) {
	t.Helper()
	var calls sync.WaitGroup
	errs := make(chan error, n)
	for range n {
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
}

// Over HTTPS the calls share HTTP/2 connections: a burst of calls takes a
// few connections, dialled one at a time, not a connection (and a
// handshake) each as net/http's own pool dialled for every call that found
// no free stream; the calls after them reuse those connections.
func TestHTTPSCallsShareHTTP2Connections(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ calls, streams int }{{calls: 450, streams: 100}, {calls: 300, streams: 250}, {calls: 300, streams: 128}, {calls: 64, streams: 1000},
		{calls: 120, streams: 20}, {calls: 90, streams: 30}} {
		t.Run(fmt.Sprintf("%d calls, %d streams", tc.calls, tc.streams), func(t *testing.T) {
			t.Parallel()
			var dialled, h2, arrived atomic.Int64
			allIn := make(chan struct{})
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor == 2 {
					h2.Add(1)
				}
				if n := arrived.Add(1); n == int64(tc.calls) {
					close(allIn)
				} else if n < int64(tc.calls) {
					// Every call of the burst in flight at once; bounded, so
					// that a call that failed fails the test, not hangs it.
					select {
					case <-allIn:
					case <-time.After(10 * time.Second):
					}
				}
				okChat(w)
			}))
			srv.EnableHTTP2 = true
			srv.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: tc.streams}
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					dialled.Add(1)
				}
			}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			p := tlsProvider(t, srv)
			callAll(t, p, tc.calls)
			// A connection takes h2YoungStreams calls at most until the
			// server's settings are known, and one dial more than that at
			// most: one another call began just before a stream came free.
			per := min(tc.streams, h2YoungStreams)
			need := int64((tc.calls + per - 1) / per)
			require.LessOrEqual(t, dialled.Load(), need+1, "connections dialled for the burst")
			burst := dialled.Load()
			for range 5 {
				callAll(t, p, 1)
			}
			require.EqualValues(t, tc.calls+5, h2.Load(), "calls over HTTP/2")
			require.Equal(t, burst, dialled.Load(), "calls after the burst reuse its connections")
		})
	}
}

// An HTTPS endpoint without HTTP/2 is called over HTTP/1.1: the handshake
// that finds it out is the only one spent on HTTP/2, the request's body
// arrives whole on the HTTP/1.1 connection, and later calls go straight to
// HTTP/1.1.
func TestHTTPSWithoutHTTP2FallsBackToHTTP1(t *testing.T) {
	t.Parallel()
	var dialled, h1 atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.Messages) != 1 || body.Messages[0].Content != "hi" {
			http.Error(w, `{"error":{"message":"bad body","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		if r.ProtoMajor == 1 {
			h1.Add(1)
		}
		okChat(w)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	srv.StartTLS() // HTTP/1.1 only: EnableHTTP2 is not set
	t.Cleanup(srv.Close)
	p := tlsProvider(t, srv)
	callAll(t, p, 1)
	require.EqualValues(t, 1, h1.Load())
	require.EqualValues(t, 2, dialled.Load(), "the handshake that offered HTTP/2, then HTTP/1.1's")
	for range 3 {
		callAll(t, p, 1)
	}
	require.EqualValues(t, 4, h1.Load())
	require.EqualValues(t, 2, dialled.Load(), "later calls reuse the HTTP/1.1 connection")
}

// A server that sends GOAWAY on its connections (it is shutting down, or
// closes a connection after so many requests): the calls it did not take
// go on a new connection, and none fails.
func TestHTTPSCallsSurviveGoAway(t *testing.T) {
	t.Parallel()
	var dialled atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { okChat(w) }))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dialled.Add(1)
		}
	}
	// Without keep-alives Go's HTTP/2 server answers each connection's
	// streams with a graceful GOAWAY.
	srv.Config.SetKeepAlivesEnabled(false)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	p := tlsProvider(t, srv)
	callAll(t, p, 50)
	for range 10 {
		callAll(t, p, 1)
	}
	require.Greater(t, dialled.Load(), int64(1), "GOAWAY made new connections")
}
