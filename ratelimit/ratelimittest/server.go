// Package ratelimittest has a loopback OpenAI-compatible endpoint that
// enforces a request rate the way providers do: a token bucket of R
// requests refilled at R per second, a 429 with a whole-second Retry-After
// and an OpenAI rate_limit_exceeded body when it is empty, and a fixed
// latency for the calls it serves. Tests and the rate-limit benchmark use it.
package ratelimittest

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetpool/jetpool/provider/providertest"
)

// Server is a rate-limited chat-completions endpoint on 127.0.0.1.
type Server struct {
	*httptest.Server
	Rate    float64       // requests per second (and the bucket's size)
	Latency time.Duration // of a served call

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	times    []time.Time // arrivals of served calls
	limited  []time.Time // arrivals of 429s
	failedAt []time.Time // arrivals of calls answered 500
	inflight int
	maxIn    int
	failing  atomic.Bool
	failed   atomic.Int64
	headers  atomic.Bool
}

// New starts a server allowing rate requests per second.
func New(rate float64, latency time.Duration) *Server {
	s := &Server{Rate: rate, Latency: latency, tokens: rate, last: time.Now()}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	return s
}

// BaseURL is the provider base_url (…/v1).
func (s *Server) BaseURL() string { return s.URL + "/v1" }

// SetFailing makes every call answer 500 (true) or be served normally.
func (s *Server) SetFailing(v bool) { s.failing.Store(v) }

// SetHeaders makes every answer carry OpenAI's rate-limit headers
// (x-ratelimit-limit-requests as a per-minute limit, -remaining-requests,
// -reset-requests: until the bucket is full again), as OpenAI and Groq send
// them on successes and 429s alike.
func (s *Server) SetHeaders(v bool) { s.headers.Store(v) }

// rateHeaders are the headers of an answer given with tokens left (s.mu held).
func (s *Server) rateHeaders(h http.Header, tokens float64) http.Header {
	if !s.headers.Load() {
		return h
	}
	if h == nil {
		h = http.Header{}
	}
	h.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(int(s.Rate*60)))
	h.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(int(math.Floor(tokens))))
	full := time.Duration((s.Rate - tokens) / s.Rate * float64(time.Second))
	h.Set("X-Ratelimit-Reset-Requests", full.Round(time.Millisecond).String())
	return h
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	if s.failing.Load() {
		s.mu.Lock()
		s.failedAt = append(s.failedAt, time.Now())
		s.mu.Unlock()
		s.failed.Add(1)
		providertest.Reply{Status: 500, Body: providertest.OpenAIError("The server had an error while processing your request.", "server_error", "")}.ServeHTTP(w, r)
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.tokens = math.Min(s.Rate, s.tokens+now.Sub(s.last).Seconds()*s.Rate)
	s.last = now
	if s.tokens < 1 {
		wait := (1 - s.tokens) / s.Rate
		s.limited = append(s.limited, now)
		h := s.rateHeaders(nil, s.tokens)
		s.mu.Unlock()
		secs := int(math.Ceil(wait))
		if h == nil {
			h = http.Header{}
		}
		h.Set("Retry-After", strconv.Itoa(max(secs, 1)))
		providertest.Reply{Status: 429, Header: h,
			Body: providertest.OpenAIError(fmt.Sprintf("Rate limit reached for requests. Limit: %g / s. Please try again in %.0fms.", s.Rate, wait*1000),
				"requests", "rate_limit_exceeded")}.ServeHTTP(w, r)
		return
	}
	s.tokens--
	s.times = append(s.times, now)
	s.inflight++
	s.maxIn = max(s.maxIn, s.inflight)
	h := s.rateHeaders(nil, s.tokens)
	s.mu.Unlock()
	t := time.NewTimer(s.Latency)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	s.mu.Lock()
	s.inflight--
	s.mu.Unlock()
	providertest.Reply{Status: 200, Header: h, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 12, 1)}.ServeHTTP(w, r)
}

// Stats are what the server saw.
type Stats struct {
	Served, Limited, Failed int
	MaxInFlight             int
	First, Last             time.Time // of served calls
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Served: len(s.times), Limited: len(s.limited), Failed: int(s.failed.Load()), MaxInFlight: s.maxIn}
	if len(s.times) > 0 {
		st.First, st.Last = s.times[0], s.times[len(s.times)-1]
	}
	return st
}

// Calls is every call received: served, limited and failed.
func (st Stats) Calls() int { return st.Served + st.Limited + st.Failed }

// Arrivals returns the arrival times of served and limited calls.
func (s *Server) Arrivals() (served, limited []time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.times...), append([]time.Time(nil), s.limited...)
}

// FailedAt returns the arrival times of the calls answered 500.
func (s *Server) FailedAt() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.failedAt...)
}
