package provider

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
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

	// Reply is a Go template for the answer, over .Prompt, .Record and .Call
	// (SimReplyDefault). Replies, when set, are used in turn per record
	// (the last one repeats): scripted outputs for tests of expectations.
	Reply   string   `json:"reply,omitempty" yaml:"reply"`
	Replies []string `json:"replies,omitempty" yaml:"replies"`
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
		"drop": c.Faults.Drop, "auth": c.Faults.Auth, "slow": c.Faults.Slow, "context_overflow": c.Faults.ContextOverflow} {
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
	return nil
}

type sim struct {
	cfg   Config
	sc    SimConfig
	reply *template.Template

	mu    sync.Mutex
	calls map[string]int // record → calls so far in this process (scripts only)
	total int
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
	return &sim{cfg: cfg, sc: sc, reply: t, calls: map[string]int{}}, nil
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
func (s *sim) draw(record string, call int, salt string) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(s.sc.Seed))
	h.Write(b[:])
	h.Write([]byte(record))
	binary.LittleEndian.PutUint64(b[:], uint64(call))
	h.Write(b[:])
	h.Write([]byte(salt))
	return float64(h.Sum64()>>11) / float64(1<<53)
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
	model := cmp.Or(req.Model, SimModelDefault)
	record := req.RecordID
	if record == "" {
		record = lastUser(req.Messages)
	}
	s.mu.Lock()
	s.total++
	call := s.total
	if s.sc.FailFirst > 0 || len(s.sc.Replies) > 0 {
		// Scripts are per record: count each record's calls. Otherwise the
		// faults of a call are drawn from the process-wide call number, and
		// nothing per record is kept, so a million-record job costs no memory.
		s.calls[record]++
		call = s.calls[record]
	}
	s.mu.Unlock()

	if s.cfg.Timeout > 0 {
		// Like the real adapters: Config.Timeout bounds one call.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
	}
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
		t := time.NewTimer(latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return Response{}, &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
				Message: ctx.Err().Error(), Provider: s.cfg.Name, Model: model, Err: ctx.Err()}
		case <-t.C:
		}
	}
	if err := ctx.Err(); err != nil {
		return Response{}, &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError",
			Message: err.Error(), Provider: s.cfg.Name, Model: model, Err: err}
	}

	if call <= s.sc.FailFirst {
		return Response{}, s.fail(retry.Class(cmp.Or(s.sc.FailClass, string(retry.ClassServer))), model)
	}
	if f.Auth > 0 && s.draw(record, 0, "auth") < f.Auth {
		key, _ := s.cfg.APIKey()
		if s.sc.ValidKey == "" || key != s.sc.ValidKey {
			return Response{}, s.fail(retry.ClassAuth, model)
		}
	}
	if f.ContextOverflow > 0 && s.draw(record, 0, "overflow") < f.ContextOverflow {
		return Response{}, s.fail(retry.ClassContextOverflow, model)
	}
	switch {
	case r < f.RateLimit:
		return Response{}, s.fail(retry.ClassRateLimit, model)
	case r < f.RateLimit+f.Server:
		return Response{}, s.fail(retry.ClassServer, model)
	case r < f.RateLimit+f.Server+f.Drop:
		if req.Stream && req.OnDelta != nil {
			req.OnDelta("partial answ") // the stream breaks mid-flight
		}
		return Response{}, s.fail(retry.ClassNetwork, model)
	}

	prompt := lastUser(req.Messages)
	var text string
	if n := len(s.sc.Replies); n > 0 {
		text = s.sc.Replies[min(call, n)-1]
	} else if s.sc.Reply == "" {
		text = simReplyPrefix + prompt // SimReplyDefault, without a template run per call
	} else {
		var sb strings.Builder
		if err := s.reply.Execute(&sb, map[string]any{"Prompt": prompt, "Record": record, "Call": call}); err != nil {
			return Response{}, &retry.Error{Class: retry.ClassProgramming, TypeName: "TemplateError", Message: err.Error(), Provider: s.cfg.Name, Model: model}
		}
		text = sb.String()
	}
	if req.Stream && req.OnDelta != nil {
		req.OnDelta(text)
	}
	in := 0
	for _, m := range req.Messages {
		in += len(m.Content)/4 + 1
	}
	return Response{Text: text, FinishReason: "stop", Model: model,
		Usage: Usage{InputTokens: in + len(req.System)/4, OutputTokens: len(text)/4 + 1}}, nil
}

func lastUser(msgs []Message) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			return msgs[i].Content
		}
	}
	return ""
}
