package providertest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"regexp"
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

// Rates is a model's price on the bill, in US dollars per million tokens.
type Rates struct {
	Input, Output float64
	// CachedInput is the rate of input read from the prompt cache, and
	// CacheWrite of input written to it (Anthropic bills 1.25× input).
	CachedInput, CacheWrite float64
	// Batch is the share of every rate a batch answer pays (0.5 when 0).
	Batch float64
	// LongAbove, when above 0, is the prompt size past which the whole
	// call pays the Long rates (Gemini 2.5 Pro and Claude Sonnet above
	// 200,000 input tokens).
	LongAbove                                              int
	LongInput, LongOutput, LongCachedInput, LongCacheWrite float64
}

// BillUsage is what one answer is billed for: Input counts every prompt
// token, CachedInput and CacheWrite the parts of it read from and written
// to the cache; Output every generated one, reasoning included.
type BillUsage struct {
	Input, CachedInput, CacheWrite, Output int
}

// BillLine is one answer on the bill.
type BillLine struct {
	Key     string // the call's marker ([[record:action]]), "" when it had none
	Model   string
	Batch   bool
	Usage   BillUsage
	Dollars float64
}

// Record is the record part of the line's key (before its ':').
func (l BillLine) Record() string {
	r, _, _ := strings.Cut(l.Key, ":")
	return r
}

// Biller is a provider's bill: every answer priced as it is given.
type Biller struct {
	rates map[string]Rates

	mu      sync.Mutex
	lines   []BillLine
	unknown map[string]bool
}

// NewBiller bills by rates, by model name.
func NewBiller(rates map[string]Rates) *Biller {
	return &Biller{rates: rates, unknown: map[string]bool{}}
}

// Charge bills one answer and returns what it cost. A model not in the
// table costs nothing and is listed by Unknown.
func (b *Biller) Charge(key, model string, u BillUsage, batch bool) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	r, ok := b.rates[model]
	if !ok {
		b.unknown[model] = true
	}
	in, out, cached, write := r.Input, r.Output, r.CachedInput, r.CacheWrite
	if r.LongAbove > 0 && u.Input > r.LongAbove {
		in, out, cached, write = r.LongInput, r.LongOutput, r.LongCachedInput, r.LongCacheWrite
	}
	if cached == 0 {
		cached = in
	}
	if write == 0 {
		write = in
	}
	if batch {
		f := r.Batch
		if f == 0 {
			f = 0.5
		}
		in, out, cached, write = in*f, out*f, cached*f, write*f
	}
	fresh := u.Input - u.CachedInput - u.CacheWrite
	d := (float64(fresh)*in + float64(u.CachedInput)*cached + float64(u.CacheWrite)*write + float64(u.Output)*out) / 1e6
	b.lines = append(b.lines, BillLine{Key: key, Model: model, Batch: batch, Usage: u, Dollars: d})
	return d
}

// Total is the bill's sum.
func (b *Biller) Total() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s float64
	for _, l := range b.lines {
		s += l.Dollars
	}
	return s
}

// ByRecord is the bill by record (BillLine.Record).
func (b *Biller) ByRecord() map[string]float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]float64{}
	for _, l := range b.lines {
		out[l.Record()] += l.Dollars
	}
	return out
}

// Lines returns the bill's lines so far.
func (b *Biller) Lines() []BillLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines)
}

// Unknown lists the models billed that the table did not have.
func (b *Biller) Unknown() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Sorted(maps.Keys(b.unknown))
}

// Tokens is what the fake providers count a text as: a token for every
// four bytes, or part of four (a real tokenizer's count is between this
// and the text's bytes).
func Tokens(s string) int { return (len(s) + 3) / 4 }

// messageTokens is what a message's framing counts, beside its text.
const messageTokens = 4

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

var markerRE = regexp.MustCompile(`\[\[([^\]]+)\]\]`)

// prompt is a request read for the bill: its messages' texts (the system
// prompt first, when set) and what the call is.
type prompt struct {
	call     BillCall
	system   string
	cacheSys bool // the system prompt is marked cacheable (Anthropic)
	texts    []string
	user     []string
}

// inputTokens is what the prompt counts as, before any cache.
func (p *prompt) inputTokens() (total, system int) {
	for _, t := range p.texts {
		total += Tokens(t) + messageTokens
	}
	if p.system != "" {
		system = Tokens(p.system) + messageTokens
		total += system
	}
	return total, system
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

// readPrompt reads a request of any of the three wire formats.
func readPrompt(path string, body map[string]any) (prompt, bool) {
	var p prompt
	str := func(v any) string { s, _ := v.(string); return s }
	// text of a content: a string, or a list of parts/blocks with "text".
	text := func(v any) string {
		if s, ok := v.(string); ok {
			return s
		}
		var sb strings.Builder
		if l, ok := v.([]any); ok {
			for _, e := range l {
				if m, ok := e.(map[string]any); ok {
					sb.WriteString(str(m["text"]))
				}
			}
		}
		return sb.String()
	}
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		p.call.Kind = "openai"
		p.call.Model, p.call.Stream = str(body["model"]), body["stream"] == true
		_, p.call.JSON = body["response_format"]
		msgs, _ := body["messages"].([]any)
		for _, e := range msgs {
			m, _ := e.(map[string]any)
			t := text(m["content"])
			if str(m["role"]) == "system" {
				p.system += t
				continue
			}
			p.texts = append(p.texts, t)
			if str(m["role"]) == "user" {
				p.user = append(p.user, t)
			}
		}
	case strings.HasSuffix(path, "/messages"):
		p.call.Kind = "anthropic"
		p.call.Model, p.call.Stream = str(body["model"]), body["stream"] == true
		switch sys := body["system"].(type) {
		case string:
			p.system = sys
		case []any:
			p.system = text(sys)
			for _, e := range sys {
				if m, ok := e.(map[string]any); ok && m["cache_control"] != nil {
					p.cacheSys = true
				}
			}
		}
		msgs, _ := body["messages"].([]any)
		for _, e := range msgs {
			m, _ := e.(map[string]any)
			t := text(m["content"])
			p.texts = append(p.texts, t)
			if str(m["role"]) == "user" {
				p.user = append(p.user, t)
			}
		}
		p.call.JSON = strings.Contains(strings.ToLower(p.system), "json")
	case strings.Contains(path, ":generateContent"), strings.Contains(path, ":streamGenerateContent"):
		p.call.Kind = "gemini"
		name := path[strings.LastIndex(path, "/models/")+len("/models/"):]
		p.call.Model, _, _ = strings.Cut(name, ":")
		p.call.Stream = strings.Contains(path, ":streamGenerateContent")
		if si, ok := body["systemInstruction"].(map[string]any); ok {
			p.system = text(si["parts"])
		}
		contents, _ := body["contents"].([]any)
		for _, e := range contents {
			m, _ := e.(map[string]any)
			t := text(m["parts"])
			p.texts = append(p.texts, t)
			if str(m["role"]) == "user" {
				p.user = append(p.user, t)
			}
		}
		if gc, ok := body["generationConfig"].(map[string]any); ok {
			p.call.JSON = str(gc["responseMimeType"]) == "application/json"
		}
	default:
		return p, false
	}
	p.call.MaxTokens = maxTokens(body)
	if len(p.user) > 0 {
		p.call.Prompt = p.user[len(p.user)-1]
		for _, u := range p.user {
			if m := markerRE.FindStringSubmatch(u); m != nil {
				p.call.Key = m[1]
				break
			}
		}
	}
	return p, true
}

// answer is one composed answer, billed or not.
type answer struct {
	kind, model string
	text        string
	finish      string // the wire format's own word
	usage       BillUsage
	reasoning   int
}

// compose makes the answer to p under a: its text, finish and usage.
func (s *BillingServer) compose(p *prompt, a BillAnswer) answer {
	ans := answer{kind: p.call.Kind, model: p.call.Model, reasoning: a.Reasoning}
	ans.text = a.Text
	if ans.text == "" {
		ans.text = "answer of " + p.call.Key
		if p.call.JSON {
			b, _ := json.Marshal(map[string]string{"answer": ans.text})
			ans.text = string(b)
		}
	}
	in, sys := p.inputTokens()
	in += a.PadInput
	u := BillUsage{Input: in}
	s.mu.Lock()
	switch {
	case p.call.Kind == "anthropic" && p.cacheSys && sys > 0:
		if s.cached["anthropic\x00"+p.system] {
			u.CachedInput = sys
		} else {
			u.CacheWrite = sys
			s.cached["anthropic\x00"+p.system] = true
		}
	case p.call.Kind != "anthropic" && s.CachePrefix && sys > 0:
		if s.cached[p.call.Kind+"\x00"+p.system] {
			u.CachedInput = sys
		}
		s.cached[p.call.Kind+"\x00"+p.system] = true
	}
	s.mu.Unlock()
	out := Tokens(ans.text)
	cut := a.Finish == "length"
	if limit := p.call.MaxTokens; limit > 0 {
		ans.reasoning = min(ans.reasoning, limit)
		if room := limit - ans.reasoning; out > room {
			out, cut = room, true
		}
	} else if cut {
		out = (out + 1) / 2
	}
	if cut {
		ans.text = ans.text[:min(len(ans.text), out*4)]
	}
	u.Output = out + ans.reasoning
	ans.usage = u
	ans.finish = finishWord(p.call.Kind, cut)
	return ans
}

func finishWord(kind string, cut bool) string {
	switch {
	case kind == "anthropic" && cut:
		return "max_tokens"
	case kind == "anthropic":
		return "end_turn"
	case kind == "gemini" && cut:
		return "MAX_TOKENS"
	case kind == "gemini":
		return "STOP"
	case cut:
		return "length"
	}
	return "stop"
}

// body is the answer as a whole response body of its wire format.
func (a answer) body() string {
	u := a.usage
	switch a.kind {
	case "anthropic":
		return mustJSON(map[string]any{"id": "msg_bill", "type": "message", "role": "assistant", "model": a.model,
			"content": []any{map[string]any{"type": "text", "text": a.text}}, "stop_reason": a.finish, "stop_sequence": nil,
			"usage": a.anthropicUsage(true)})
	case "gemini":
		return a.geminiChunk(a.text, true)
	}
	return mustJSON(map[string]any{"id": "chatcmpl-bill", "object": "chat.completion", "created": 1741570283, "model": a.model,
		"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": a.text, "refusal": nil},
			"logprobs": nil, "finish_reason": a.finish}},
		"usage": map[string]any{"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
			"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedInput},
			"completion_tokens_details": map[string]any{"reasoning_tokens": a.reasoning}}})
}

// anthropicUsage is Anthropic's usage object: input_tokens leaves out what
// was read from or written to the cache.
func (a answer) anthropicUsage(withOutput bool) map[string]any {
	u := a.usage
	m := map[string]any{"input_tokens": u.Input - u.CachedInput - u.CacheWrite,
		"cache_creation_input_tokens": u.CacheWrite, "cache_read_input_tokens": u.CachedInput, "output_tokens": 1}
	if withOutput {
		m["output_tokens"] = u.Output
	}
	return m
}

func (a answer) geminiChunk(text string, last bool) string {
	cand := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
	out := map[string]any{"candidates": []any{cand}, "modelVersion": a.model, "responseId": "bill"}
	if last {
		u := a.usage
		cand["finishReason"] = a.finish
		meta := map[string]any{"promptTokenCount": u.Input, "candidatesTokenCount": u.Output - a.reasoning,
			"totalTokenCount": u.Input + u.Output}
		if a.reasoning > 0 {
			meta["thoughtsTokenCount"] = a.reasoning
		}
		if u.CachedInput > 0 {
			meta["cachedContentTokenCount"] = u.CachedInput
		}
		out["usageMetadata"] = meta
	}
	return mustJSON(out)
}

// stream sends the answer as its wire format's stream, in two chunks of
// text; drop cuts it after the first, with no usage sent.
func (s *BillingServer) stream(w http.ResponseWriter, a answer, drop bool) {
	half := len(a.text) / 2
	parts := []string{a.text[:half], a.text[half:]}
	var evs []string
	switch a.kind {
	case "anthropic":
		evs = append(evs,
			anthropicEvent("message_start", mustJSON(map[string]any{"type": "message_start", "message": map[string]any{
				"id": "msg_bill", "type": "message", "role": "assistant", "content": []any{}, "model": a.model,
				"stop_reason": nil, "stop_sequence": nil, "usage": a.anthropicUsage(false)}})),
			anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
		for _, t := range parts {
			evs = append(evs, anthropicEvent("content_block_delta", mustJSON(map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]any{"type": "text_delta", "text": t}})))
		}
		evs = append(evs, anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
			anthropicEvent("message_delta", mustJSON(map[string]any{"type": "message_delta",
				"delta": map[string]any{"stop_reason": a.finish, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": a.usage.Output}})),
			anthropicEvent("message_stop", `{"type":"message_stop"}`))
	case "gemini":
		evs = append(evs, "data: "+a.geminiChunk(parts[0], false)+"\r\n\r\n", "data: "+a.geminiChunk(parts[1], true)+"\r\n\r\n")
	default:
		chunk := func(choices any, usage any) string {
			return "data: " + mustJSON(map[string]any{"id": "chatcmpl-bill", "object": "chat.completion.chunk", "created": 1741570283,
				"model": a.model, "choices": choices, "usage": usage}) + "\n\n"
		}
		evs = append(evs, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"role": "assistant", "content": ""}, "finish_reason": nil}}, nil))
		for _, t := range parts {
			evs = append(evs, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{"content": t}, "finish_reason": nil}}, nil))
		}
		u := a.usage
		evs = append(evs, chunk([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": a.finish}}, nil),
			chunk([]any{}, map[string]any{"prompt_tokens": u.Input, "completion_tokens": u.Output, "total_tokens": u.Input + u.Output,
				"prompt_tokens_details":     map[string]any{"cached_tokens": u.CachedInput},
				"completion_tokens_details": map[string]any{"reasoning_tokens": a.reasoning}}),
			"data: [DONE]\n\n")
	}
	if drop {
		// The first chunks only: the role, and the first half of the text.
		n := 2
		if a.kind == "anthropic" {
			n = 3
		}
		if a.kind == "gemini" {
			n = 1
		}
		SSE{Events: evs[:n], Drop: true}.ServeHTTP(w, nil)
		return
	}
	SSE{Events: evs}.ServeHTTP(w, nil)
}

// fail answers an error status in kind's wire format.
func (s *BillingServer) fail(w http.ResponseWriter, kind string, a BillAnswer) {
	body := a.Body
	if body == "" {
		msg := fmt.Sprintf("the billing fake answers %d", a.Status)
		switch kind {
		case "anthropic":
			typ := "api_error"
			if a.Status == http.StatusTooManyRequests {
				typ = "rate_limit_error"
			}
			body = AnthropicError(typ, msg)
		case "gemini":
			status := "UNAVAILABLE"
			if a.Status == http.StatusTooManyRequests {
				status = "RESOURCE_EXHAUSTED"
			}
			body = GeminiError(a.Status, status, msg)
		default:
			typ := "server_error"
			if a.Status == http.StatusTooManyRequests {
				typ = "rate_limit_exceeded"
			}
			body = OpenAIError(msg, typ, "")
		}
	}
	rp := Reply{Status: a.Status, Body: body}
	if a.RetryAfter != "" {
		rp.Header = Header("Retry-After", a.RetryAfter)
	}
	rp.ServeHTTP(w, nil)
}

// BatchUsage is what a batch request of kind's wire format (an OpenAI
// batch line's body, an Anthropic batch request's params) answered with
// text is billed for, counted as BillingServer counts an online call.
func BatchUsage(kind string, body map[string]any, text string) (BillUsage, BillCall) {
	path := "/v1/chat/completions"
	if kind == "anthropic" {
		path = "/v1/messages"
	}
	p, _ := readPrompt(path, body)
	in, _ := p.inputTokens()
	return BillUsage{Input: in, Output: Tokens(text)}, p.call
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("providertest: " + err.Error())
	}
	return string(b)
}
