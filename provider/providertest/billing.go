package providertest

import (
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A provider's own bill, for tests that hold jetpool's money figures to it:
// a Biller prices every answer a fake endpoint gives, by its own table and
// its own rules — written apart from jetpool's pricing package, so that a
// test comparing the two is not comparing a formula with itself — and
// BillingServer is a local endpoint speaking OpenAI's Chat Completions
// (streamed too), Anthropic's Messages (streamed too) and Gemini's
// generateContent (streamed too) that counts tokens its own way and bills
// each answer it gives. batchtest bills its batches with a Biller as well.
//
// What is billed, as the providers bill: every answer sent whole with
// status 200 — a cut (length) answer, one that fails an expectation, a
// filtered one. What is not: an error status (429, 5xx) and an answer
// dropped before its end (the fake sends no usage then, so neither side
// can know it; a real provider may bill the tokens it generated).

// BillCall is a call as BillingServer read it.
type BillCall struct {
	Kind   string // provider.KindOpenAI, KindAnthropic, KindGemini
	Model  string
	Stream bool
	// Key is the call's marker: the first [[…]] of its user messages (a
	// test's prompts carry "[[{{ .id }}:action]]"); N is the how-manieth
	// call of that key this is, from 1.
	Key string
	N   int
	// Prompt is the last user message's text.
	Prompt string
	// MaxTokens is the output the call asked for at most (0: none).
	MaxTokens int
	// JSON: the call asked for a JSON answer.
	JSON bool
}

// BillAnswer is what BillingServer does with a call (the zero value: a
// whole answer).
type BillAnswer struct {
	// Status, when not 0 or 200, answers that error status with the wire
	// format's error body (Body when set) and Retry-After when set.
	Status     int
	Body       string
	RetryAfter string
	// Drop cuts the answer: a stream after its first chunk, a plain
	// answer before its headers. Nothing is billed.
	Drop bool
	// Text replaces the answer's text ("answer of KEY", a JSON object
	// when the call asked for JSON).
	Text string
	// Finish "length" cuts the answer at its max_tokens, or at half its
	// text when it asked for none: a truncated answer, billed.
	Finish string
	// Reasoning adds reasoning tokens to the output (billed as output).
	Reasoning int
	// PadInput counts the prompt this many tokens larger, as a provider
	// counts an image or a long document (for the long-context tier).
	PadInput int
	// Latency delays the answer.
	Latency time.Duration
}

// BillingServer is a local provider endpoint of every wire format that
// bills each answer it gives (see Biller).
type BillingServer struct {
	*Server
	Bill *Biller
	// Script decides each call; nil answers every call whole.
	Script func(c BillCall) BillAnswer
	// CachePrefix: a system prompt seen before is read from the cache
	// (OpenAI's and Gemini's automatic prefix caching). Anthropic caches
	// what a request marks with cache_control, whatever this says.
	CachePrefix bool

	mu     sync.Mutex
	calls  map[string]int
	cached map[string]bool
	count  int
}

// NewBillingServer starts a billing endpoint that bills into bill.
func NewBillingServer(t testing.TB, bill *Biller) *BillingServer {
	t.Helper()
	s := &BillingServer{Bill: bill, calls: map[string]int{}, cached: map[string]bool{}}
	s.Server = NewServer(t, http.HandlerFunc(s.serve))
	return s
}

// Calls is every call the server received, answered or not.
func (s *BillingServer) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// CallsOf is the calls of key so far.
func (s *BillingServer) CallsOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

func (s *BillingServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		s.models(w, r)
		return
	}
	var body map[string]any
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		Reply{Status: 400, Body: OpenAIError("bad json: "+err.Error(), "invalid_request_error", "")}.ServeHTTP(w, r)
		return
	}
	p, ok := readPrompt(r.URL.Path, body)
	if !ok {
		Reply{Status: 404, Body: OpenAIError("no such endpoint: "+r.URL.Path, "invalid_request_error", "")}.ServeHTTP(w, r)
		return
	}
	s.mu.Lock()
	s.count++
	s.calls[p.call.Key]++
	p.call.N = s.calls[p.call.Key]
	s.mu.Unlock()
	var a BillAnswer
	if s.Script != nil {
		a = s.Script(p.call)
	}
	if a.Latency > 0 {
		select {
		case <-time.After(a.Latency):
		case <-r.Context().Done():
			return
		}
	}
	if a.Status != 0 && a.Status != http.StatusOK {
		s.fail(w, p.call.Kind, a)
		return
	}
	if a.Drop && !p.call.Stream {
		dropConn(w)
		return
	}
	ans := s.compose(&p, a)
	if a.Drop {
		s.stream(w, ans, true)
		return
	}
	// Billed as it is sent: a client that hangs up after this has had it.
	s.Bill.Charge(p.call.Key, p.call.Model, ans.usage, false)
	if p.call.Stream {
		s.stream(w, ans, false)
		return
	}
	Reply{Status: 200, Body: ans.body()}.ServeHTTP(w, r)
}

// models answers the preflight's model lookups of each wire format.
func (s *BillingServer) models(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	switch {
	case strings.HasPrefix(path, "/v1beta/"):
		name := strings.TrimPrefix(path, "/v1beta/")
		Reply{Status: 200, Body: GeminiModel(name)}.ServeHTTP(w, r)
	case strings.HasPrefix(path, "/v1/models/"):
		Reply{Status: 200, Body: AnthropicModel(strings.TrimPrefix(path, "/v1/models/"))}.ServeHTTP(w, r)
	default:
		Reply{Status: 200, Body: OpenAIModels(slices.Sorted(maps.Keys(s.Bill.rates))...)}.ServeHTTP(w, r)
	}
}
