package provider

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// SimConfig configures the built-in simulated model. Every fault is decided
// by a hash of (seed, record, call number), so a run is reproducible.
type SimConfig struct {
	// Latency of every call; Jitter adds up to that much more (seeded).
	Latency time.Duration `json:"latency,omitempty" yaml:"latency"`
	Jitter  time.Duration `json:"jitter,omitempty" yaml:"jitter"`
	Seed    int64         `json:"seed,omitempty" yaml:"seed"`

	// Faults are per-call probabilities of each failure.
	Faults SimFaults `json:"faults,omitzero" yaml:"faults"`

	// RetryAfter sent with a simulated rate limit (SimRetryAfterDefault).
	RetryAfter time.Duration `json:"retry_after,omitempty" yaml:"retry_after"`
	// SlowLatency of a "slow" call (SimSlowLatencyDefault).
	SlowLatency time.Duration `json:"slow_latency,omitempty" yaml:"slow_latency"`

	// FailFirst makes the first N calls for every record fail with FailClass
	// (rate_limit, server, network, auth, invalid_request, context_overflow).
	FailFirst int    `json:"fail_first,omitempty" yaml:"fail_first"`
	FailClass string `json:"fail_class,omitempty" yaml:"fail_class"`

	// ValidKey, when set, limits the auth fault: records hit by it fail with
	// "invalid api key" only while the key variable does not hold ValidKey,
	// so a demo can "fix the key" and replay.
	ValidKey string `json:"valid_key,omitempty" yaml:"valid_key"`

	// Reply is a Go template for the answer, over .Prompt, .Record, .Call,
	// .Images and .Documents (the counts of the turn's parts)
	// (SimReplyDefault; with a schema to answer and no Reply, an answer
	// that satisfies it). Replies, when set, are used in turn per record
	// (the last one repeats): scripted outputs for tests of expectations.
	// A request with tools is answered with a call of one (sim_tools.go).
	Reply   string   `json:"reply,omitempty" yaml:"reply"`
	Replies []string `json:"replies,omitempty" yaml:"replies"`

	// Dimensions is the length of the sim's embeddings
	// (SimDimensionsDefault); a request's dimensions param wins.
	Dimensions int `json:"dimensions,omitempty" yaml:"dimensions"`
}

// SimFaults are per-call fault probabilities (0–1). Auth is per record:
// a record that draws it fails on every call.
type SimFaults struct {
	RateLimit       float64 `json:"rate_limit,omitempty" yaml:"rate_limit"`
	Server          float64 `json:"server,omitempty" yaml:"server"`
	Drop            float64 `json:"drop,omitempty" yaml:"drop"`
	Auth            float64 `json:"auth,omitempty" yaml:"auth"`
	Slow            float64 `json:"slow,omitempty" yaml:"slow"`
	ContextOverflow float64 `json:"context_overflow,omitempty" yaml:"context_overflow"`
	// ContentFilter: the call succeeds but the answer is withheld
	// (finish_reason content_filter, empty text).
	ContentFilter float64 `json:"content_filter,omitempty" yaml:"content_filter"`
}

// Defaults of SimConfig.
const (
	SimRetryAfterDefault  = time.Second
	SimSlowLatencyDefault = 5 * time.Second
	SimReplyDefault       = simReplyPrefix + "{{.Prompt}}"
	simReplyPrefix        = "sim reply to: "
	SimModelDefault       = "sim-1"
)

// Validate checks probabilities and the reply template.
func (c *SimConfig) Validate() error {
	for name, p := range map[string]float64{"rate_limit": c.Faults.RateLimit, "server": c.Faults.Server,
		"drop": c.Faults.Drop, "auth": c.Faults.Auth, "slow": c.Faults.Slow, "context_overflow": c.Faults.ContextOverflow,
		"content_filter": c.Faults.ContentFilter} {
		if p < 0 || p > 1 {
			return fmt.Errorf("faults.%s: %v is out of range 0-1", name, p)
		}
	}
	switch c.FailClass {
	case "", "rate_limit", "server", "network", "auth", "invalid_request", "context_overflow", "unknown":
	default:
		return fmt.Errorf("fail_class: unknown class %q", c.FailClass)
	}
	if c.Reply != "" {
		if _, err := template.New("reply").Parse(c.Reply); err != nil {
			return fmt.Errorf("reply: %v", err)
		}
	}
	if c.Dimensions < 0 || c.Dimensions > simDimensionsMax {
		return fmt.Errorf("dimensions: %d is out of range 0-%d", c.Dimensions, simDimensionsMax)
	}
	return nil
}

type sim struct {
	cfg   Config
	sc    SimConfig
	reply *template.Template

	mu     sync.Mutex
	calls  map[string]int // record → calls so far in this process (scripts only)
	total  int
	cached map[uint64]bool // system prompts cached (Request.CacheSystem)
}

func newSim(cfg Config) (Provider, error) {
	var sc SimConfig
	if cfg.Sim != nil {
		sc = *cfg.Sim
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("provider %s: sim: %w", cfg.Name, err)
	}
	sc.RetryAfter = positiveOr(sc.RetryAfter, SimRetryAfterDefault)
	sc.SlowLatency = positiveOr(sc.SlowLatency, SimSlowLatencyDefault)
	t, err := template.New("reply").Parse(cmp.Or(sc.Reply, SimReplyDefault))
	if err != nil {
		return nil, err
	}
	return &sim{cfg: cfg, sc: sc, reply: t, calls: map[string]int{}, cached: map[uint64]bool{}}, nil
}

// positiveOr is d when it is positive, else def (a negative duration is
// as unset as a zero one).
func positiveOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func (s *sim) Name() string { return s.cfg.Name }
func (s *sim) Kind() string { return KindSim }

// Calls returns how many calls this sim instance has answered or failed.
func (s *sim) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// draw returns a deterministic number in [0,1) for (seed, record, call, salt).
// It is FNV-1a of the seed, the record, the call and the salt, written out
// (hash/fnv's would allocate its state on every draw of every call).
func (s *sim) draw(record string, call int, salt string) float64 {
	h := uint64(fnvOffset)
	h = fnvWord(h, uint64(s.sc.Seed))
	h = fnvString(h, record)
	h = fnvWord(h, uint64(call))
	h = fnvString(h, salt)
	return float64(h>>11) / float64(1<<53)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// fnvWord hashes w's eight bytes, little-endian.
func fnvWord(h, w uint64) uint64 {
	for range 8 {
		h = (h ^ w&0xff) * fnvPrime
		w >>= 8
	}
	return h
}

// Preflight of the sim always passes: its key is checked only by the auth
// fault, so a demo can show a key that fails mid-run.
func (s *sim) Preflight(ctx context.Context, model string) error { return nil }

func (s *sim) fail(class retry.Class, model string) *retry.Error {
	e := &retry.Error{Class: class, Provider: s.cfg.Name, Model: model}
	switch class {
	case retry.ClassRateLimit:
		e.Status, e.ProviderType, e.RetryAfter = 429, "rate_limit_error", s.sc.RetryAfter
		e.Message = fmt.Sprintf("429 rate limit exceeded, retry after %s", s.sc.RetryAfter)
		e.TypeName = "RateLimitError"
	case retry.ClassServer:
		e.Status, e.ProviderType, e.Message, e.TypeName = 503, "overloaded_error", "503 service unavailable", "ServerError"
	case retry.ClassNetwork:
		e.TypeName = "NetworkError" // a stream dropped before any error body: empty message
	case retry.ClassAuth:
		e.Status, e.ProviderType, e.Message, e.TypeName = 401, "authentication_error", "invalid api key", "AuthError"
	case retry.ClassInvalidRequest:
		e.Status, e.ProviderType, e.Message, e.TypeName = 400, "invalid_request_error", "invalid image: not a valid image", "InvalidRequestError"
	case retry.ClassContextOverflow:
		e.Status, e.ProviderCode, e.Message, e.TypeName = 400, "context_length_exceeded", "prompt is too long: context_length_exceeded", "ContextOverflowError"
	default:
		e.Class, e.Message, e.TypeName = retry.ClassUnknown, "the simulated model said something odd", "SimError"
	}
	return e
}

func (s *sim) Call(ctx context.Context, req Request) (Response, error) {
	return timed(func() (Response, error) { return s.call(ctx, req) })
}

func (s *sim) call(ctx context.Context, req Request) (Response, error) {
	model := cmp.Or(req.Model, SimModelDefault)
	record := req.RecordID
	if record == "" {
		record = lastUser(req.Messages)
	}
	drop := func() {
		if req.Stream && req.OnDelta != nil {
			req.OnDelta("partial answ") // the stream breaks mid-flight
		}
	}
	call, ferr := s.begin(ctx, model, []string{record}, drop)
	if ferr != nil {
		return Response{}, ferr
	}
	last := lastUserMessage(req.Messages)
	images, docs, perr := s.parts(last.Parts, model)
	if perr != nil {
		return Response{}, perr
	}

	prompt := last.Content
	var text string
	var calls []ToolCall
	switch {
	case len(req.Tools) > 0 && req.ToolChoice != ToolChoiceNone:
		// Like a model told to use its tools: a call to the one it was
		// told to, else the first, with arguments that fit its schema.
		t := req.Tools[0]
		for _, x := range req.Tools {
			if x.Name == req.ToolChoice {
				t = x
			}
		}
		args, _ := json.Marshal(example(t.parameters(), prompt))
		calls = []ToolCall{{ID: fmt.Sprintf("call_sim_%d", call), Name: t.Name, Arguments: args}}
	case len(s.sc.Replies) > 0:
		text = s.sc.Replies[min(call, len(s.sc.Replies))-1]
	case s.sc.Reply == "" && req.JSON && req.Schema != nil:
		// Structured output: an answer that satisfies the schema.
		b, _ := json.Marshal(example(req.Schema, prompt))
		text = string(b)
	case s.sc.Reply == "":
		text = simReplyPrefix + prompt // SimReplyDefault, without a template run per call
	default:
		var sb strings.Builder
		data := map[string]any{"Prompt": prompt, "Record": record, "Call": call, "Images": images, "Documents": docs}
		if err := s.reply.Execute(&sb, data); err != nil {
			return Response{}, &retry.Error{Class: retry.ClassProgramming, TypeName: "TemplateError", Message: err.Error(), Provider: s.cfg.Name, Model: model}
		}
		text = sb.String()
	}
	out := Response{Text: text, ToolCalls: calls, FinishReason: FinishStop, FinishReasonRaw: "stop", Model: model}
	if len(calls) > 0 {
		out.FinishReason, out.FinishReasonRaw = FinishToolCalls, "tool_calls"
	}
	outTokens := len(text)/4 + 1
	for _, c := range calls {
		outTokens += len(c.Arguments) / 4
	}
	// Like a real model, the sim stops at max_tokens (four characters a token).
	if mt := maxTokens(req.Params); mt > 0 && outTokens > mt && len(calls) == 0 {
		r := []rune(text)
		out.Text = string(r[:min(len(r), mt*4)])
		out.FinishReason, out.FinishReasonRaw, outTokens = FinishLength, "length", mt
	}
	if f := s.sc.Faults; f.ContentFilter > 0 && s.draw(record, call, "filter") < f.ContentFilter {
		out.Text, out.ToolCalls, out.FinishReason, out.FinishReasonRaw = "", nil, FinishContentFilter, "content_filter"
	}
	if req.Stream && req.OnDelta != nil && out.Text != "" {
		req.OnDelta(out.Text)
	}
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content)/4 + 1 + simPartTokens*len(m.Parts)
	}
	sys := len(req.System) / 4
	out.Usage = Usage{InputTokens: in + sys, OutputTokens: outTokens}
	if req.CacheSystem && sys > 0 {
		// Like Anthropic's cache: the first call with a system prompt
		// writes it, later ones read it.
		if s.cacheHit(req.System) {
			out.Usage.CachedInputTokens = sys
		} else {
			out.Usage.CacheWriteTokens = sys
		}
	}
	return out, nil
}

// simPartTokens is what an image or a document counts in the sim's usage.
const simPartTokens = 85

// begin counts a call of the records and plays its latency and faults,
// drawn for the first record (a real provider fails a request whole): it
// returns the call's number and the simulated failure, if any. drop is
// called before a dropped stream fails.
func (s *sim) begin(ctx context.Context, model string, records []string, drop func()) (int, *retry.Error) {
	record := records[0]
	s.mu.Lock()
	s.total++
	call := s.total
	first := false
	if s.sc.FailFirst > 0 || len(s.sc.Replies) > 0 {
		// Scripts are per record: count each record's calls. Otherwise the
		// faults of a call are drawn from the process-wide call number, and
		// nothing per record is kept, so a million-record job costs no memory.
		for i, r := range records {
			s.calls[r]++
			if i == 0 {
				call = s.calls[r]
			}
			first = first || s.calls[r] <= s.sc.FailFirst
		}
	}
	s.mu.Unlock()

	latency := s.sc.Latency
	if s.sc.Jitter > 0 {
		latency += time.Duration(s.draw(record, call, "jitter") * float64(s.sc.Jitter))
	}
	f := s.sc.Faults
	r := s.draw(record, call, "fault")
	if f.Slow > 0 && s.draw(record, call, "slow") < f.Slow {
		latency = s.sc.SlowLatency
	}
	if latency > 0 {
		if s.cfg.Timeout > 0 {
			// Like the real adapters: Config.Timeout bounds one call. A call
			// without latency cannot outlast it.
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
			defer cancel()
		}
		t := time.NewTimer(latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return call, &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
				Message: ctx.Err().Error(), Provider: s.cfg.Name, Model: model, Err: ctx.Err()}
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return call, &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
			Message: err.Error(), Provider: s.cfg.Name, Model: model, Err: err}
	}

	if first {
		return call, s.fail(retry.Class(cmp.Or(s.sc.FailClass, string(retry.ClassServer))), model)
	}
	for _, rec := range records {
		if f.Auth > 0 && s.draw(rec, 0, "auth") < f.Auth {
			key, _ := s.cfg.APIKey()
			if s.sc.ValidKey == "" || key != s.sc.ValidKey {
				return call, s.fail(retry.ClassAuth, model)
			}
		}
		if f.ContextOverflow > 0 && s.draw(rec, 0, "overflow") < f.ContextOverflow {
			return call, s.fail(retry.ClassContextOverflow, model)
		}
	}
	switch {
	case r < f.RateLimit:
		return call, s.fail(retry.ClassRateLimit, model)
	case r < f.RateLimit+f.Server:
		return call, s.fail(retry.ClassServer, model)
	case r < f.RateLimit+f.Server+f.Drop:
		drop()
		return call, s.fail(retry.ClassNetwork, model)
	}
	return call, nil
}

// parts checks a turn's images and documents as a provider would: data
// that is base64 of an accepted type (a URL is taken as it is), else an
// invalid_request "invalid image" that no retry mends.
func (s *sim) parts(parts []Part, model string) (images, docs int, err *retry.Error) {
	for i, p := range parts {
		if p.Type == PartDocument {
			docs++
		} else {
			images++
		}
		if p.Data == "" {
			continue
		}
		_, derr := base64.StdEncoding.DecodeString(p.Data)
		if derr != nil || !slices.Contains(AcceptedTypes(p.Type), p.mediaType()) {
			what := "invalid image"
			if p.Type == PartDocument {
				what = "invalid document"
			}
			return 0, 0, &retry.Error{Class: retry.ClassInvalidRequest, Status: 400, ProviderType: "invalid_request_error",
				TypeName: "InvalidRequestError", Provider: s.cfg.Name, Model: model,
				Message: fmt.Sprintf("%s: part %d (%s) is not valid base64 %s data", what, i, p.mediaType(), p.Type)}
		}
	}
	return images, docs, nil
}

// simCacheMax bounds the system prompts the sim remembers as cached.
const simCacheMax = 1024

// cacheHit reports whether the system prompt was cached by an earlier
// call, and caches it.
func (s *sim) cacheHit(system string) bool {
	k := fnvString(fnvOffset, system)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cached[k] {
		return true
	}
	if len(s.cached) >= simCacheMax {
		clear(s.cached)
	}
	s.cached[k] = true
	return false
}

// maxTokens reads a max_tokens parameter under any of its names (0: none).
func maxTokens(params map[string]any) int {
	for _, k := range []string{"max_tokens", "max_completion_tokens", "max_output_tokens"} {
		if n := intParam(params, k); n != 0 {
			return n
		}
	}
	return 0
}

// intParam reads a number parameter (0: none).
func intParam(params map[string]any, k string) int {
	switch v := params[k].(type) {
	case float64:
		return int(v)
	case int:
		return v
	}
	return 0
}

func lastUser(msgs []Message) string { return lastUserMessage(msgs).Content }

func lastUserMessage(msgs []Message) Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i]
		}
	}
	return Message{}
}
