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
	"bytes"
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
	return fmt.Sprintf("%s%04d", prefix, s.seq)
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

// --- OpenAI -----------------------------------------------------------------

// The endpoints of an OpenAI batch (every line of a batch has its batch's).
const (
	chatEndpoint       = "/v1/chat/completions"
	embeddingsEndpoint = "/v1/embeddings"
)

func firstOf(l []any) any {
	if len(l) == 0 {
		return nil
	}
	return l[0]
}

func (s *Server) openAIBatch(b *fakeBatch) map[string]any {
	completed, failed := 0, 0
	if b.done {
		for _, r := range b.reqs {
			a := s.answer(r)
			switch {
			case s.Final != "" || a.Omit:
			case a.Expire || a.Status != 0:
				failed++
			default:
				completed++
			}
		}
	}
	out := map[string]any{"id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": nil,
		"input_file_id": "file-in-" + b.id, "completion_window": "24h", "status": b.status,
		"output_file_id": nil, "error_file_id": nil, "created_at": b.created.Unix(),
		"request_counts": map[string]int{"total": len(b.reqs), "completed": completed, "failed": failed},
		"metadata":       map[string]string{"jetpool_batch": b.key}}
	if b.out != "" {
		out["output_file_id"] = b.out
	}
	if b.err != "" {
		out["error_file_id"] = b.err
	}
	return out
}

func (s *Server) openAIResults(b *fakeBatch) {
	b.status = "completed"
	if s.Final != "" {
		b.status = s.Final
	}
	var out, errs bytes.Buffer
	for _, r := range b.reqs {
		a := s.answer(r)
		switch {
		case a.Omit:
		case s.Final != "" || a.Expire:
			code := "batch_expired"
			if s.Final == "cancelled" {
				code = "batch_cancelled"
			}
			fmt.Fprintf(&errs, `{"id":"batch_req_%s","custom_id":%s,"response":null,"error":{"code":%s,"message":"This request could not be executed before the completion window expired."}}`+"\n", r.CustomID, q(r.CustomID), q(code))
		case a.Status != 0:
			fmt.Fprintf(&errs, `{"id":"batch_req_%s","custom_id":%s,"response":{"status_code":%d,"request_id":"req_x","body":%s},"error":null}`+"\n", r.CustomID, q(r.CustomID), a.Status, a.Error)
		case b.endpoint == embeddingsEndpoint:
			model, _ := r.Body["model"].(string)
			v := a.Vector
			if v == nil {
				in, _ := r.Body["input"].([]any)
				text, _ := firstOf(in).(string)
				v = []float32{float32(len(text)), 0.5, -0.25}
			}
			vb, _ := json.Marshal(v)
			body := fmt.Sprintf(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":%s}],"model":%s,"usage":{"prompt_tokens":5,"total_tokens":5}}`, vb, q(model))
			fmt.Fprintf(&out, `{"id":"batch_req_%s","custom_id":%s,"response":{"status_code":200,"request_id":"req_x","body":%s},"error":null}`+"\n", r.CustomID, q(r.CustomID), body)
		default:
			model, _ := r.Body["model"].(string)
			text, content, refusal := a.Text, q(a.Text), "null"
			if a.Refusal != "" {
				text, content, refusal = a.Refusal, "null", q(a.Refusal)
			}
			in, n := s.billed(provider.KindOpenAI, r.Body, text, true)
			body := fmt.Sprintf(`{"id":"chatcmpl-%s","object":"chat.completion","created":1741570283,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":%s},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, r.CustomID, q(model), content, refusal, in, n, in+n)
			fmt.Fprintf(&out, `{"id":"batch_req_%s","custom_id":%s,"response":{"status_code":200,"request_id":"req_x","body":%s},"error":null}`+"\n", r.CustomID, q(r.CustomID), body)
		}
	}
	if out.Len() > 0 {
		b.out = s.nextID("file-out-")
		s.files[b.out] = out.Bytes()
	}
	if errs.Len() > 0 {
		b.err = s.nextID("file-err-")
		s.files[b.err] = errs.Bytes()
	}
}

func (s *Server) openAI(w http.ResponseWriter, r *http.Request, p string) {
	switch {
	case r.Method == http.MethodPost && p == "chat/completions":
		s.online++
		model, text, req := lastUser(r)
		reply := s.onlineText(text)
		in, out := s.billed(provider.KindOpenAI, req, reply, false)
		body := fmt.Sprintf(`{"id":"chatcmpl-online","object":"chat.completion","created":1741570283,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, q(model), q(reply), in, out, in+out)
		writeJSON(w, 200, body)
	case r.Method == http.MethodPost && p == "files":
		if err := r.ParseMultipartForm(64 << 20); err != nil || r.FormValue("purpose") != "batch" {
			writeJSON(w, 400, OpenAIError("purpose must be batch and file a multipart part", "invalid_request_error", ""))
			return
		}
		f, _, err := r.FormFile("file")
		if err != nil {
			writeJSON(w, 400, OpenAIError("missing file", "invalid_request_error", ""))
			return
		}
		data, _ := io.ReadAll(f)
		s.uploads++
		id := s.nextID("file-")
		s.files[id] = data
		writeJSON(w, 200, map[string]any{"id": id, "object": "file", "bytes": len(data), "created_at": time.Now().Unix(),
			"filename": "batch.jsonl", "purpose": "batch"})
	case r.Method == http.MethodPost && p == "batches":
		if s.FailCreate != nil {
			writeJSON(w, s.FailCreate.Status, s.FailCreate.Error)
			return
		}
		var in struct {
			InputFileID      string            `json:"input_file_id"`
			Endpoint         string            `json:"endpoint"`
			CompletionWindow string            `json:"completion_window"`
			Metadata         map[string]string `json:"metadata"`
		}
		if json.NewDecoder(r.Body).Decode(&in) != nil || (in.Endpoint != chatEndpoint && in.Endpoint != embeddingsEndpoint) || in.CompletionWindow != "24h" {
			writeJSON(w, 400, OpenAIError("bad batch request", "invalid_request_error", ""))
			return
		}
		data, ok := s.files[in.InputFileID]
		if !ok {
			writeJSON(w, 404, OpenAIError("No such File object: "+in.InputFileID, "invalid_request_error", ""))
			return
		}
		b := &fakeBatch{id: s.nextID("batch_"), key: in.Metadata["jetpool_batch"], status: "validating", created: time.Now(), endpoint: in.Endpoint}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var l struct {
				CustomID string         `json:"custom_id"`
				Method   string         `json:"method"`
				URL      string         `json:"url"`
				Body     map[string]any `json:"body"`
			}
			if json.Unmarshal(line, &l) != nil || l.CustomID == "" || l.Method != "POST" || l.URL != in.Endpoint {
				writeJSON(w, 400, OpenAIError("invalid batch line: "+string(line), "invalid_request_error", ""))
				return
			}
			b.reqs = append(b.reqs, Request{CustomID: l.CustomID, Body: l.Body})
		}
		if !s.record(w, b) {
			return
		}
		b.status = "in_progress"
		writeJSON(w, 200, s.openAIBatch(b))
	case r.Method == http.MethodGet && p == "batches":
		// Newest first, as the API lists them; one page.
		var data []any
		for i := len(s.order) - 1; i >= 0; i-- {
			data = append(data, s.openAIBatch(s.batches[s.order[i]]))
		}
		writeJSON(w, 200, map[string]any{"object": "list", "data": data, "has_more": false})
	case r.Method == http.MethodGet && strings.HasPrefix(p, "batches/"):
		b, ok := s.batches[strings.TrimPrefix(p, "batches/")]
		if !ok {
			writeJSON(w, 404, OpenAIError("No batch found", "invalid_request_error", ""))
			return
		}
		if b.status == "validating" {
			b.status = "in_progress"
		}
		s.advance(b)
		writeJSON(w, 200, s.openAIBatch(b))
	case r.Method == http.MethodGet && strings.HasPrefix(p, "files/") && strings.HasSuffix(p, "/content"):
		data, ok := s.files[strings.TrimSuffix(strings.TrimPrefix(p, "files/"), "/content")]
		if !ok {
			writeJSON(w, 404, OpenAIError("No such File object", "invalid_request_error", ""))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(data)
	default:
		writeJSON(w, 404, OpenAIError("Invalid URL ("+r.Method+" "+r.URL.Path+")", "invalid_request_error", ""))
	}
}

// --- Anthropic --------------------------------------------------------------

func (s *Server) anthropicBatch(b *fakeBatch) map[string]any {
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	var resultsURL any
	if !b.done {
		counts["processing"] = len(b.reqs)
	} else {
		resultsURL = s.URL + "/v1/messages/batches/" + b.id + "/results"
		for _, r := range b.reqs {
			a := s.answer(r)
			switch {
			case a.Omit:
			case s.Final == "cancelled":
				counts["canceled"]++
			case s.Final != "" || a.Expire:
				counts["expired"]++
			case a.Status != 0:
				counts["errored"]++
			default:
				counts["succeeded"]++
			}
		}
	}
	return map[string]any{"id": b.id, "type": "message_batch", "processing_status": b.status, "request_counts": counts,
		"ended_at": nil, "created_at": b.created.Format(time.RFC3339), "expires_at": b.created.Add(24 * time.Hour).Format(time.RFC3339),
		"archived_at": nil, "cancel_initiated_at": nil, "results_url": resultsURL}
}

func (s *Server) anthropicResults(b *fakeBatch) {
	var out bytes.Buffer
	for _, r := range b.reqs {
		a := s.answer(r)
		switch {
		case a.Omit:
		case s.Final == "cancelled":
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"canceled"}}`+"\n", q(r.CustomID))
		case s.Final != "" || a.Expire:
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"expired"}}`+"\n", q(r.CustomID))
		case a.Status != 0:
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"errored","error":%s}}`+"\n", q(r.CustomID), a.Error)
		default:
			model, _ := r.Body["model"].(string)
			text, stop := a.Text, "end_turn"
			if a.Refusal != "" {
				text, stop = a.Refusal, "refusal"
			}
			in, n := s.billed(provider.KindAnthropic, r.Body, text, true)
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"succeeded","message":{"id":"msg_%s","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s}],"stop_reason":%s,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}}}`+"\n",
				q(r.CustomID), r.CustomID, q(model), q(text), q(stop), in, n)
		}
	}
	b.results = out.Bytes()
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request, p string) {
	if r.Header.Get("Anthropic-Version") == "" {
		writeJSON(w, 400, AnthropicError("invalid_request_error", "anthropic-version: header is required"))
		return
	}
	switch {
	case r.Method == http.MethodPost && p == "messages":
		s.online++
		model, text, req := lastUser(r)
		reply := s.onlineText(text)
		in, out := s.billed(provider.KindAnthropic, req, reply, false)
		body := fmt.Sprintf(`{"id":"msg_online","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`, q(model), q(reply), in, out)
		writeJSON(w, 200, body)
	case r.Method == http.MethodPost && p == "messages/batches":
		if s.FailCreate != nil {
			writeJSON(w, s.FailCreate.Status, s.FailCreate.Error)
			return
		}
		var in struct {
			Requests []struct {
				CustomID string         `json:"custom_id"`
				Params   map[string]any `json:"params"`
			} `json:"requests"`
		}
		if json.NewDecoder(r.Body).Decode(&in) != nil || len(in.Requests) == 0 {
			writeJSON(w, 400, AnthropicError("invalid_request_error", "requests: field required"))
			return
		}
		b := &fakeBatch{id: s.nextID("msgbatch_"), status: "in_progress", created: time.Now()}
		for _, rq := range in.Requests {
			if rq.CustomID == "" || rq.Params["max_tokens"] == nil {
				writeJSON(w, 400, AnthropicError("invalid_request_error", "requests: custom_id and params.max_tokens are required"))
				return
			}
			b.reqs = append(b.reqs, Request{CustomID: rq.CustomID, Body: rq.Params})
		}
		if !s.record(w, b) {
			return
		}
		writeJSON(w, 200, s.anthropicBatch(b))
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/results"):
		b, ok := s.batches[strings.TrimSuffix(strings.TrimPrefix(p, "messages/batches/"), "/results")]
		if !ok || !b.done {
			writeJSON(w, 404, AnthropicError("not_found_error", "batch results not available"))
			return
		}
		w.Header().Set("Content-Type", "application/binary")
		w.Write(b.results)
	case r.Method == http.MethodGet && strings.HasPrefix(p, "messages/batches/"):
		b, ok := s.batches[strings.TrimPrefix(p, "messages/batches/")]
		if !ok {
			writeJSON(w, 404, AnthropicError("not_found_error", "batch not found"))
			return
		}
		s.advance(b)
		writeJSON(w, 200, s.anthropicBatch(b))
	default:
		writeJSON(w, 404, AnthropicError("not_found_error", "Not Found"))
	}
}
