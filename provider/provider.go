package provider

import (
	"context"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// Kinds of provider (one adapter per wire protocol).
const (
	KindOpenAI    = "openai"
	KindAnthropic = "anthropic"
	KindGemini    = "gemini"
	KindSim       = "sim"
)

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"` // "user" | "assistant"
	Content string `json:"content"`
	// Parts are a user turn's images and documents, sent before its text
	// (parts.go).
	Parts []Part `json:"parts,omitempty"`
	// ToolCalls are the tools an assistant turn asked for. A user turn that
	// follows it answers each with a result saying it was not run: jetpool
	// runs no tools; the calls are the action's output.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Request is one model call.
type Request struct {
	Model    string
	System   string
	Messages []Message
	// Params are sampling parameters: temperature, max_tokens, top_p, stop, …
	Params map[string]any
	// JSON asks for JSON output where the provider has such a mode.
	JSON bool
	// Schema, when set with JSON, is the JSON Schema the output must satisfy
	// (used for structured-output modes that accept one).
	Schema map[string]any
	Stream bool
	// OnDelta, when set on a streaming call, receives text as it arrives.
	OnDelta func(text string)
	// RecordID lets the sim provider seed its faults per record; real adapters ignore it.
	RecordID string

	// Tools the model may call (parts.go), and ToolChoice: "" (the
	// provider's default), ToolChoiceAuto, ToolChoiceNone,
	// ToolChoiceRequired, or the name of one of Tools.
	Tools      []Tool
	ToolChoice string
	// CacheSystem and CacheTools mark the system prompt and the tool
	// definitions as the end of a cacheable prefix (Anthropic
	// cache_control; OpenAI and Gemini cache prefixes by themselves).
	// Part.Cache marks a part.
	CacheSystem, CacheTools bool
}

// Usage is the token count of one call. InputTokens counts every prompt
// token, cached or not, and OutputTokens every generated one, reasoning
// included (as OpenAI's prompt_tokens and completion_tokens do); the other
// fields are the parts of those that providers bill at other rates, 0 where
// a provider does not report them.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// CachedInputTokens of InputTokens were read from the provider's prompt
	// cache (OpenAI prompt_tokens_details.cached_tokens, Anthropic
	// cache_read_input_tokens, Gemini cachedContentTokenCount).
	CachedInputTokens int `json:"cached_input_tokens,omitempty"`
	// CacheWriteTokens of InputTokens were written to the cache (Anthropic
	// cache_creation_input_tokens, billed above the input rate).
	CacheWriteTokens int `json:"cache_write_tokens,omitempty"`
	// ReasoningTokens of OutputTokens were thinking (OpenAI
	// completion_tokens_details.reasoning_tokens, Gemini thoughtsTokenCount).
	ReasoningTokens int `json:"reasoning_tokens,omitempty"`
}

// Add adds u's counts to the sum.
func (s *Usage) Add(u Usage) {
	s.InputTokens += u.InputTokens
	s.OutputTokens += u.OutputTokens
	s.CachedInputTokens += u.CachedInputTokens
	s.CacheWriteTokens += u.CacheWriteTokens
	s.ReasoningTokens += u.ReasoningTokens
}

// Normalised finish reasons (Response.FinishReason).
const (
	FinishStop          = "stop"           // the model ended its answer (or hit a stop sequence)
	FinishLength        = "length"         // cut at max_tokens (or the context window): the answer is truncated
	FinishContentFilter = "content_filter" // stopped or refused by a safety filter
	FinishToolCalls     = "tool_calls"     // the model asked for a tool
	FinishOther         = "other"          // anything else the provider said; FinishReasonRaw has its word
)

// Response is a successful call.
type Response struct {
	Text string
	// ToolCalls are the tools the model asked for (FinishReason
	// FinishToolCalls).
	ToolCalls []ToolCall
	// Embedding is the vector of an embeddings answer of one input read
	// from a batch's results (Wire.EmbedResponseBody); online embeddings
	// come from Embedder.Embed.
	Embedding []float32
	// FinishReason is one of the Finish* constants, "" when the provider
	// gave none (some compatible servers); FinishReasonRaw is the
	// provider's own word ("max_tokens", "MAX_TOKENS", "refusal", …).
	FinishReason    string
	FinishReasonRaw string
	Usage           Usage
	Model           string
	// Latency is how long the call took, from sending the request to the
	// end of the answer (the whole stream).
	Latency time.Duration
	// RateLimit is what the response's rate-limit headers said.
	RateLimit retry.RateLimit
}

// Provider is one configured endpoint. Call returns a *retry.Error (with its
// Class set, and Provider and Model filled in) for every failure.
type Provider interface {
	Name() string
	Kind() string
	Call(ctx context.Context, req Request) (Response, error)
	// Preflight makes one cheap call that proves the key and model work.
	Preflight(ctx context.Context, model string) error
}

// Limits is a provider's shared budget, across every worker process.
type Limits struct {
	RPM         int `json:"rpm,omitempty" yaml:"rpm"`
	TPM         int `json:"tpm,omitempty" yaml:"tpm"`
	Concurrency int `json:"concurrency,omitempty" yaml:"concurrency"`
	// NoAdaptive (`adaptive: false`) turns off adaptive concurrency for a
	// provider without rpm, tpm or concurrency: its calls go at the pool's
	// concurrency from the start (a self-hosted endpoint of known capacity).
	// 429s still set the shared cooldown; the circuit breaker still runs.
	NoAdaptive bool `json:"no_adaptive,omitempty" yaml:"-"`
	// Breaker configures the provider's circuit breaker (`limits: {breaker:
	// …}`); its zero fields take the defaults of package ratelimit.
	Breaker Breaker `json:"breaker,omitzero" yaml:"-"`
}

// Breaker is a provider's circuit-breaker settings: the circuit opens when
// at least FailureRatio of at least MinCalls calls in Window failed (5xx,
// overload, connection failures), stays open for Cooldown, doubling after
// each failed probe up to CooldownMax. Zero fields take the defaults
// (package ratelimit says why they are what they are).
type Breaker struct {
	Off          bool          `json:"off,omitempty"` // `breaker: false`
	FailureRatio float64       `json:"failure_ratio,omitempty"`
	MinCalls     int           `json:"min_calls,omitempty"`
	Window       time.Duration `json:"window,omitempty"`
	Cooldown     time.Duration `json:"cooldown,omitempty"`
	CooldownMax  time.Duration `json:"cooldown_max,omitempty"`
}

// Defaults of Breaker.
const (
	BreakerFailureRatioDefault = 0.5
	BreakerMinCallsDefault     = 20
	BreakerWindowDefault       = 30 * time.Second
	BreakerCooldownDefault     = 15 * time.Second
	BreakerCooldownMaxDefault  = 5 * time.Minute
)

// WithDefaults returns b with its zero fields set to the defaults, and
// CooldownMax at least Cooldown.
func (b Breaker) WithDefaults() Breaker {
	if !(b.FailureRatio > 0 && b.FailureRatio <= 1) {
		b.FailureRatio = BreakerFailureRatioDefault
	}
	if b.MinCalls <= 0 {
		b.MinCalls = BreakerMinCallsDefault
	}
	if b.Window <= 0 {
		b.Window = BreakerWindowDefault
	}
	if b.Cooldown <= 0 {
		b.Cooldown = BreakerCooldownDefault
	}
	if b.CooldownMax <= 0 {
		b.CooldownMax = BreakerCooldownMaxDefault
	}
	b.CooldownMax = max(b.CooldownMax, b.Cooldown)
	return b
}

// Budgeted reports whether an rpm, tpm or concurrency budget is set.
func (l Limits) Budgeted() bool { return l.RPM > 0 || l.TPM > 0 || l.Concurrency > 0 }

// Config is a provider entry of a workflow.
type Config struct {
	Name       string            `json:"name"`
	Kind       string            `json:"kind"`
	BaseURL    string            `json:"base_url,omitempty"`
	APIKeyEnv  string            `json:"api_key_env,omitempty"`
	APIKeyFile string            `json:"api_key_file,omitempty"`
	Timeout    time.Duration     `json:"timeout,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Stream     bool              `json:"stream,omitempty"`
	Limits     Limits            `json:"limits,omitzero"`
	Sim        *SimConfig        `json:"sim,omitempty"`
	// StreamIdleTimeout is how long a streamed answer may go without content
	// before the call is cut as a network error (StreamIdle: half of
	// Timeout when 0; provider/idle.go).
	StreamIdleTimeout time.Duration `json:"stream_idle_timeout,omitempty"`
	// MaxRetryAfter caps every wait the provider asks for (Retry-After,
	// retry-after-ms, rate-limit resets, Gemini's RetryInfo):
	// MaxRetryAfterDefault when 0.
	MaxRetryAfter time.Duration `json:"max_retry_after,omitempty"`
	// Deployments, when set, are where the provider's calls go, spread
	// across them (deployments.go); none: BaseURL with the key.
	Deployments []Deployment `json:"deployments,omitempty"`
	// Of is, in the configuration of a deployment (Config.Deployment),
	// the name of its provider: limiters, metrics and the dashboard
	// label the deployment with it. Not part of a workflow.
	Of string `json:"-"`
}

// TimeoutDefault is the per-request timeout when a provider sets none.
const TimeoutDefault = 120 * time.Second

// MaxRetryAfterDefault is the longest wait a provider may ask for before it
// is capped (and logged): a hostile or broken Retry-After (a year, a date in
// 2100) must not stop a provider for every job. Ten minutes is longer than
// any reset a real provider sends for its per-minute and per-day buckets'
// retries (OpenAI, Anthropic and Groq reset within a minute; a daily quota
// that is spent is better dead-lettered and replayed than waited out).
const MaxRetryAfterDefault = 10 * time.Minute

// RetryAfterCap is c's MaxRetryAfter, or its default.
func (c Config) RetryAfterCap() time.Duration {
	if c.MaxRetryAfter > 0 {
		return c.MaxRetryAfter
	}
	return MaxRetryAfterDefault
}
