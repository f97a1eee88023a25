// Package providertest has fake provider endpoints for tests: loopback HTTP
// servers and handlers that speak the real wire formats of OpenAI's Chat
// Completions, Anthropic's Messages and Gemini's generateContent — bodies,
// headers and SSE framing — including the ways they fail (error bodies, a
// connection reset before headers, a stream dropped mid-flight, a server that
// never answers, a body that never ends).
//
//	srv := providertest.NewServer(t, providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "hi", 3, 1)})
//	p := providertest.New(t, providertest.Config(provider.KindOpenAI, srv))
package providertest

import (
	"bytes"
	"cmp"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetpool/jetpool/provider"
)

// Server is a fake provider endpoint on 127.0.0.1. It records every request.
// When the test ends it first releases the handlers that Hang, then closes.
type Server struct {
	*httptest.Server

	done    chan struct{}
	mu      sync.Mutex
	handler http.Handler
	reqs    []Request
}

// Request is a request the server received.
type Request struct {
	Method string
	Path   string
	Query  string
	Header http.Header
	Body   []byte
}

type doneKey struct{}

// NewServer starts a server that answers with h (SetHandler may change it).
func NewServer(t testing.TB, h http.Handler) *Server {
	t.Helper()
	s := &Server{done: make(chan struct{}), handler: h}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(context.Background(), doneKey{}, (<-chan struct{})(s.done))
	}
	s.Start()
	t.Cleanup(func() {
		close(s.done)
		s.Close()
	})
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body})
	h := s.handler
	s.mu.Unlock()
	if h == nil {
		http.Error(w, "providertest: no handler", http.StatusNotImplemented)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body)) // handlers may read it too
	h.ServeHTTP(w, r)
}

// SetHandler replaces the handler.
func (s *Server) SetHandler(h http.Handler) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = h
}

// Requests returns the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// Config is a provider configuration of kind that points at s, with the base
// path each real API uses (/v1, /v1beta) and a 5 s timeout. It names no key.
func Config(kind string, s *Server) provider.Config {
	base := s.URL + "/v1"
	if kind == provider.KindGemini {
		base = s.URL + "/v1beta"
	}
	return provider.Config{Name: "fake-" + kind, Kind: kind, BaseURL: base, Timeout: 5 * time.Second}
}

// New builds the provider for cfg and closes its idle connections when the test ends.
func New(t testing.TB, cfg provider.Config) provider.Provider {
	t.Helper()
	p, err := provider.New(cfg)
	if err != nil {
		t.Fatalf("provider.New: %v", err)
	}
	if c, ok := p.(interface{ CloseIdleConnections() }); ok {
		t.Cleanup(c.CloseIdleConnections)
	}
	return p
}

// Header builds a header from key, value pairs.
func Header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// Reply answers with a status, headers and a JSON body (Content-Type
// application/json unless Header sets one).
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

func (rp Reply) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	for k, vs := range rp.Header {
		w.Header()[k] = vs
	}
	if w.Header().Get("Content-Type") == "" && rp.Body != "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rp.Body)))
	w.WriteHeader(rp.Status)
	io.WriteString(w, rp.Body)
}

// SSE answers 200 with a text/event-stream, flushing after each event.
// Each event is written as given (see the *Stream builders).
type SSE struct {
	Header http.Header
	Events []string
	// Drop, when set, hijacks and closes the connection after the events
	// instead of ending the stream: a stream dropped mid-flight.
	Drop bool
}

func (s SSE) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	for k, vs := range s.Header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	for _, ev := range s.Events {
		io.WriteString(w, ev)
		rc.Flush()
	}
	if s.Drop {
		dropConn(w)
	}
}

// dropConn hijacks the connection, flushes what was written and closes it
// with a TCP reset, so the client's read fails mid-body.
func dropConn(w http.ResponseWriter) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic("providertest: hijack: " + err.Error())
	}
	buf.Flush()
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // RST, not FIN
	}
	conn.Close()
}

// ResetBeforeHeaders closes the connection with a TCP reset before any
// response byte is written.
var ResetBeforeHeaders = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { dropConn(w) })

// Raw writes a raw HTTP response (status line, headers, body) and closes the
// connection: for wire shapes net/http will not produce, such as a status
// line without a reason phrase ("HTTP/1.1 529 \r\n").
type Raw string

func (raw Raw) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic("providertest: hijack: " + err.Error())
	}
	buf.WriteString(string(raw))
	buf.Flush()
	conn.Close()
}

// Hang never answers: it blocks until the test ends (the server's cleanup
// releases it), so the client's timeout must fire.
var Hang = http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
	done, _ := r.Context().Value(doneKey{}).(<-chan struct{})
	<-done
})

// CutBody declares Content-Length of the whole body, writes only the first n
// bytes and drops the connection.
type CutBody struct {
	Body string
	N    int
}

func (c CutBody) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(c.Body)))
	w.WriteHeader(http.StatusOK)
	io.WriteString(w, c.Body[:c.N])
	http.NewResponseController(w).Flush()
	dropConn(w)
}

// HugeLimit is the most a Huge handler ever writes.
const HugeLimit = 1 << 30

// Huge answers Status (200 when 0) with Prefix followed by filler that does not end (up to
// HugeLimit, or until the client goes away). Written counts the bytes that
// the server managed to write, so a test can prove the client stopped reading.
type Huge struct {
	Status      int
	ContentType string
	Prefix      string
	Written     *atomic.Int64
}

func (h Huge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", cmp.Or(h.ContentType, "application/json"))
	w.WriteHeader(cmp.Or(h.Status, http.StatusOK))
	n, err := io.WriteString(w, h.Prefix)
	h.Written.Add(int64(n))
	chunk := bytes.Repeat([]byte("a"), 32<<10)
	for err == nil && h.Written.Load() < HugeLimit && r.Context().Err() == nil {
		n, err = w.Write(chunk)
		h.Written.Add(int64(n))
	}
}
