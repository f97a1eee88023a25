// Package batchtest is a fake of the providers' batch APIs on a loopback
// httptest server, speaking their real wire formats: OpenAI's Files and
// Batches (multipart upload with purpose batch, batch objects, output and
// error files as JSONL) and Anthropic's Message Batches (results JSONL with
// result.type succeeded / errored / canceled / expired). Tests script what
// each request gets back and count what reached the server.
//
//	srv := batchtest.New(t, provider.KindOpenAI)
//	srv.Answer = func(id string, body map[string]any) batchtest.Answer { return batchtest.OK("hi") }
//	cfg := srv.Config() // a provider.Config whose base_url is the fake
package batchtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
)

// Answer is what the fake does with one request of a batch.
type Answer struct {
	Text   string // the model's text (success)
	Status int    // an error status (OpenAI: the line's status_code; Anthropic: errored)
	Error  string // the error body: an OpenAI or Anthropic error object
	Omit   bool   // leave the request out of every result file
	Expire bool   // the request expired (OpenAI batch_expired; Anthropic result.type expired)
	// Refusal, when set, is the model declining: OpenAI's message.refusal
	// (content null, finish_reason stop), Anthropic's stop_reason refusal.
	Refusal string
	// Vector is an embeddings request's answer (OpenAI /v1/embeddings
	// batches); nil answers a vector made of the input's length.
	Vector []float32
}

// OK answers text.
func OK(text string) Answer { return Answer{Text: text} }

// Refuse answers a refusal whose text is text.
func Refuse(text string) Answer { return Answer{Refusal: text} }

// Fail answers an error of status with body (see OpenAIError, AnthropicError).
func Fail(status int, body string) Answer { return Answer{Status: status, Error: body} }

// OpenAIError is an OpenAI error object body.
func OpenAIError(message, typ, code string) string {
	c := "null"
	if code != "" {
		c = q(code)
	}
	return fmt.Sprintf(`{"error":{"message":%s,"type":%s,"param":null,"code":%s}}`, q(message), q(typ), c)
}

// AnthropicError is an Anthropic error object, as in an errored result.
func AnthropicError(typ, message string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%s,"message":%s}}`, q(typ), q(message))
}

func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Request is one request of a submitted batch, as the fake received it.
type Request struct {
	CustomID string
	N        int            // the how-manieth submission of CustomID this is
	Body     map[string]any // the chat completion body / the message params
}

type fakeBatch struct {
	id       string
	key      string
	reqs     []Request
	polls    int
	created  time.Time
	done     bool
	status   string
	out, err string // file ids (openai)
	results  []byte // anthropic
	endpoint string // openai: /v1/chat/completions or /v1/embeddings
}

// Server is the fake. Set its fields before the code under test runs, or
// under Lock.
type Server struct {
	*httptest.Server
	Kind string

	mu sync.Mutex
	// Answer decides each request; n is how many times this custom_id has
	// been submitted so far (1 in its first batch). Nil answers
	// OK("ok <custom_id>").
	Answer func(customID string, n int, body map[string]any) Answer
	// Final is how a batch ends: "" (OpenAI completed, Anthropic ended),
	// "expired" or "cancelled" (every request not yet answered — all of
	// them here — is expired or canceled).
	Final string
	// Polls is how many status polls a batch stays in progress (default 1).
	Polls int
	// Hold keeps every batch in progress until Release.
	Hold bool
	// DropCreates makes the next N batch creations succeed at the server
	// but lose their response (the connection closes): a crash between the
	// provider creating a batch and jetpool hearing of it.
	DropCreates int
	// FailCreate, when set, answers batch creation with this status and body.
	FailCreate *Answer
	// OnlineReply, when set, is the text of an online call's answer, given
	// the call's last user message (default: "online: " + that message).
	OnlineReply func(lastUser string) string
	// Name, when set, is in every id the fake makes (batch_<name>0001):
	// two fakes then never know each other's batches.
	Name string
	// Bill, when set, bills every answer the fake gives — a batch's at
	// the batch rates, an online call's at the online ones — counting its
	// tokens as providertest's billing server does, and answers with
	// that usage (otherwise: 7 input and 3 output tokens each).
	Bill *providertest.Biller

	batches map[string]*fakeBatch
	order   []string
	files   map[string][]byte
	created int
	uploads int
	online  int
	seq     int
}

// New starts a fake of kind (provider.KindOpenAI or provider.KindAnthropic).
func New(t testing.TB, kind string) *Server {
	s := &Server{Kind: kind, batches: map[string]*fakeBatch{}, files: map[string][]byte{}, Polls: 1}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Config is a provider entry pointing at the fake (base_url …/v1).
func (s *Server) Config() provider.Config {
	return provider.Config{Name: s.Kind + "-fake", Kind: s.Kind, BaseURL: s.URL + "/v1", Timeout: 10 * time.Second}
}

// Lock runs fn with the server's state locked (to change its fields while it serves).
func (s *Server) Lock(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// Release ends Hold.
func (s *Server) Release() { s.Lock(func() { s.Hold = false }) }

// Created is the number of batches created (what the provider would bill).
func (s *Server) Created() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// Submitted returns how many times each custom_id was submitted, all batches.
func (s *Server) Submitted() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[string]int{}
	for _, b := range s.batches {
		for _, r := range b.reqs {
			n[r.CustomID]++
		}
	}
	return n
}

// Requests returns every request of every batch, in submission order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Request
	for _, id := range s.order {
		out = append(out, s.batches[id].reqs...)
	}
	return out
}

func (s *Server) nextID(prefix string) string {
	s.seq++
	return fmt.Sprintf("%s%s%04d", prefix, s.Name, s.seq)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if s, ok := v.(string); ok {
		io.WriteString(w, s)
		return
	}
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := strings.TrimPrefix(r.URL.Path, "/v1/")
	if s.Kind == provider.KindAnthropic {
		s.anthropic(w, r, p)
		return
	}
	s.openAI(w, r, p)
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

func (s *Server) answer(r Request) Answer {
	if s.Answer == nil {
		return OK("ok " + r.CustomID)
	}
	return s.Answer(r.CustomID, r.N, r.Body)
}

// number sets each request's N from the batches before it.
func (s *Server) number(b *fakeBatch) {
	seen := map[string]int{}
	for _, id := range s.order {
		for _, r := range s.batches[id].reqs {
			seen[r.CustomID]++
		}
	}
	for i := range b.reqs {
		seen[b.reqs[i].CustomID]++
		b.reqs[i].N = seen[b.reqs[i].CustomID]
	}
}

// record keeps a batch just created; false when the create's response is
// to be lost (DropCreates): the connection was dropped instead.
func (s *Server) record(w http.ResponseWriter, b *fakeBatch) bool {
	s.number(b)
	s.batches[b.id] = b
	s.order = append(s.order, b.id)
	s.created++
	if s.DropCreates > 0 {
		s.DropCreates--
		drop(w)
		return false
	}
	return true
}

// Online is the number of online calls (chat/completions, messages) served.
func (s *Server) Online() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.online
}

func (s *Server) onlineText(lastUser string) string {
	if s.OnlineReply != nil {
		return s.OnlineReply(lastUser)
	}
	return "online: " + lastUser
}

// lastUser is the last user message of an online call body, and the body.
func lastUser(r *http.Request) (model, text string, body map[string]any) {
	var in struct {
		Model    string `json:"model"`
		Messages []struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
	}
	raw, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(raw, &in)
	_ = json.Unmarshal(raw, &body)
	for _, m := range in.Messages {
		if m.Role == "user" {
			text = m.Content
		}
	}
	return in.Model, text, body
}

// billed is the usage of an answer of text to a request body, billed when
// the fake has a Bill (7 and 3 tokens otherwise).
func (s *Server) billed(kind string, body map[string]any, text string, batch bool) (in, out int) {
	if s.Bill == nil {
		return 7, 3
	}
	u, c := providertest.BatchUsage(kind, body, text)
	s.Bill.Charge(c.Key, c.Model, u, batch)
	return u.Input, u.Output
}

// advance moves a batch on by one poll and ends it when due.
func (s *Server) advance(b *fakeBatch) {
	b.polls++
	if b.done || s.Hold || b.polls <= s.Polls {
		return
	}
	b.done = true
	if s.Kind == provider.KindAnthropic {
		b.status = "ended"
		s.anthropicResults(b)
		return
	}
	s.openAIResults(b)
}
