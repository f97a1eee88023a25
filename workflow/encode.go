package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// The encoded form is the workflow's own vocabulary, resolved: no defaults:
// block (every action spells out what it inherited), schemas inlined, only
// the providers in use, durations as Go duration strings. Decode reads it
// with the YAML parser (JSON is YAML), so it passes through exactly the
// checks a workflow file does, plus a few keys only it may carry: version,
// file, actions[].line, expect.schema_file and expect.schema_line.

// FormatVersion is the version of the encoded form that Encode writes and
// the newest Decode reads. Raise it whenever Encode writes something an
// older Decode would read differently or refuse: a worker then says it
// cannot serve the job (ErrNewerFormat) instead of misreading it. An
// encoded workflow without a version is version 1. Version 2 added
// actions[].overflow and an action's kind, input, images,
// documents, tools, tool_choice, cache and embed. Version 3
// added a price's long_context tier, actions[].context_window,
// overflow.context_window and a provider's stream_idle_timeout. Version 4
// added actions[].fallbacks.
const FormatVersion = 4

// ErrNewerFormat is returned (wrapped, naming both versions) by Decode for
// a workflow encoded by a newer jetpool than this one.
var ErrNewerFormat = errors.New("workflow encoded by a newer jetpool")

type wireWorkflow struct {
	Version   int                     `json:"version"`
	Name      string                  `json:"name,omitempty"`
	File      string                  `json:"file,omitempty"`
	Providers map[string]wireProvider `json:"providers,omitempty"`
	Actions   []wireAction            `json:"actions"`
	MaxCost   float64                 `json:"max_cost,omitempty"`
	Carry     []string                `json:"carry,omitempty"`
}

type wireProvider struct {
	Kind       string            `json:"kind"`
	BaseURL    string            `json:"base_url,omitempty"`
	APIKeyEnv  string            `json:"api_key_env,omitempty"`
	APIKeyFile string            `json:"api_key_file,omitempty"`
	Timeout    string            `json:"timeout,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Stream     bool              `json:"stream,omitempty"`
	// StreamIdleTimeout is stream_idle_timeout.
	StreamIdleTimeout string      `json:"stream_idle_timeout,omitempty"`
	Limits            *wireLimits `json:"limits,omitempty"`
	Sim               any         `json:"sim,omitempty"`
	// MaxRetryAfter is max_retry_after.
	MaxRetryAfter string           `json:"max_retry_after,omitempty"`
	Deployments   []wireDeployment `json:"deployments,omitempty"`
}

type wireAction struct {
	Name     string         `json:"name"`
	Line     int            `json:"line,omitempty"`
	Provider string         `json:"provider"`
	Model    string         `json:"model,omitempty"`
	System   string         `json:"system,omitempty"`
	Prompt   string         `json:"prompt,omitempty"` // an embed action's is its input
	Params   map[string]any `json:"params,omitempty"`
	Stream   bool           `json:"stream"`
	JSON     bool           `json:"json"`
	Retry    any            `json:"retry"` // false, or a wireRetry
	Expect   *wireExpect    `json:"expect,omitempty"`
	MaxCalls int            `json:"max_calls,omitempty"`
	Mode     string         `json:"mode"`
	Batch    *wireBatch     `json:"batch,omitempty"`
	Fallback string         `json:"fallback,omitempty"`
	// The action's price, resolved where the job was dispatched: every
	// worker bills the job alike, whatever its own built-in table says.
	Price *pricing.Price `json:"price,omitempty"`
	// ContextWindow is the model's, resolved where the job was dispatched.
	ContextWindow int            `json:"context_window,omitempty"`
	OnTruncated   string         `json:"on_truncated,omitempty"`
	OnFiltered    string         `json:"on_filtered,omitempty"`
	Overflow      *wireOverflow  `json:"overflow,omitempty"`
	Fallbacks     []wireFallback `json:"fallbacks,omitempty"`

	Kind       string          `json:"kind,omitempty"`
	Input      string          `json:"input,omitempty"`
	Images     []string        `json:"images,omitempty"`
	Documents  []string        `json:"documents,omitempty"`
	Tools      []provider.Tool `json:"tools,omitempty"`
	ToolChoice string          `json:"tool_choice,omitempty"`
	Cache      []string        `json:"cache,omitempty"`
	Embed      *wireEmbed      `json:"embed,omitempty"`
}

type wireEmbed struct {
	BatchSize int    `json:"batch_size"`
	MaxWait   string `json:"max_wait"`
	Format    string `json:"format"`
}

type wireRetry struct {
	Enabled     bool           `json:"enabled"`
	MaxAttempts int            `json:"max_attempts,omitempty"`
	Backoff     string         `json:"backoff,omitempty"`
	MaxBackoff  string         `json:"max_backoff,omitempty"`
	Budget      string         `json:"budget,omitempty"`
	OnExhausted string         `json:"on_exhausted,omitempty"`
	Redeliver   *wireRedeliver `json:"redeliver,omitempty"`
	MaxWait     string         `json:"max_wait,omitempty"`
}

type wireRedeliver struct {
	MaxDeliveries int    `json:"max_deliveries,omitempty"`
	Backoff       string `json:"backoff,omitempty"`
}

type wireExpect struct {
	Format     string         `json:"format"`
	Schema     map[string]any `json:"schema,omitempty"`
	SchemaFile string         `json:"schema_file,omitempty"`
	SchemaLine int            `json:"schema_line,omitempty"`
	Repair     wireRepair     `json:"repair"`
}

type wireRepair struct {
	MaxAttempts int    `json:"max_attempts"`
	OnExhausted string `json:"on_exhausted,omitempty"`
}

type wireBatch struct {
	MaxRecords int    `json:"max_records,omitempty"`
	MaxWait    string `json:"max_wait,omitempty"`
	Poll       string `json:"poll,omitempty"`
}

func dur(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// wireLimits is provider.Limits as a workflow file spells it.
type wireLimits struct {
	RPM         int   `json:"rpm,omitempty"`
	TPM         int   `json:"tpm,omitempty"`
	Concurrency int   `json:"concurrency,omitempty"`
	Adaptive    *bool `json:"adaptive,omitempty"`
	Breaker     any   `json:"breaker,omitempty"` // false, or a wireBreaker
}

// wireBreaker is provider.Breaker as a workflow file spells it.
type wireBreaker struct {
	FailureRatio float64 `json:"failure_ratio,omitempty"`
	MinCalls     int     `json:"min_calls,omitempty"`
	Window       string  `json:"window,omitempty"`
	Cooldown     string  `json:"cooldown,omitempty"`
	CooldownMax  string  `json:"cooldown_max,omitempty"`
}

// encodeLimits is the limits: block of l, nil when it has nothing.
func encodeLimits(l provider.Limits) *wireLimits {
	if l == (provider.Limits{}) {
		return nil
	}
	wl := &wireLimits{RPM: l.RPM, TPM: l.TPM, Concurrency: l.Concurrency}
	if l.NoAdaptive {
		off := false
		wl.Adaptive = &off
	}
	switch b := l.Breaker; {
	case b.Off:
		wl.Breaker = false
	case b != (provider.Breaker{}):
		wl.Breaker = wireBreaker{FailureRatio: b.FailureRatio, MinCalls: b.MinCalls, Window: dur(b.Window),
			Cooldown: dur(b.Cooldown), CooldownMax: dur(b.CooldownMax)}
	}
	return wl
}

// Encode renders the workflow as self-contained JSON for the jobs bucket:
// defaults applied, schema files inlined. Decode reads it back.
func (w *Workflow) Encode() ([]byte, error) {
	ww := wireWorkflow{Version: FormatVersion, Name: w.Name, File: w.File, Providers: map[string]wireProvider{}, MaxCost: w.MaxCost, Carry: w.Carry}
	for name, c := range w.Providers {
		wp := wireProvider{Kind: c.Kind, BaseURL: c.BaseURL, APIKeyEnv: c.APIKeyEnv, APIKeyFile: c.APIKeyFile,
			Timeout: dur(c.Timeout), Headers: c.Headers, Stream: c.Stream, Limits: encodeLimits(c.Limits),
			Deployments:   encodeDeployments(c.Deployments),
			MaxRetryAfter: dur(c.MaxRetryAfter), StreamIdleTimeout: dur(c.StreamIdleTimeout)}
		if c.Sim != nil {
			sim, err := yamlValue(reflect.ValueOf(c.Sim))
			if err != nil {
				return nil, fmt.Errorf("encode workflow: provider %s: sim: %w", name, err)
			}
			wp.Sim = sim
		}
		ww.Providers[name] = wp
	}
	for _, a := range w.Actions {
		wa := wireAction{Name: a.Name, Line: a.Line, Provider: a.Provider, Model: a.Model, System: a.System,
			Prompt: a.Prompt, Params: a.Params, Stream: a.Stream, JSON: a.JSON, Retry: wirePolicy(a.Retry),
			MaxCalls: a.MaxCalls, Mode: a.Mode, Fallback: a.Fallback,
			Price: a.Price, ContextWindow: a.ContextWindow, OnTruncated: a.OnTruncated, OnFiltered: a.OnFiltered, Overflow: encodeOverflow(a.Overflow),
			Fallbacks: encodeFallbacks(a.Fallbacks)}
		if e := a.Expect; e != nil {
			wa.Expect = &wireExpect{Format: e.Format, Schema: e.Schema, SchemaFile: e.SchemaFile, SchemaLine: e.SchemaLine,
				Repair: wireRepair{MaxAttempts: e.RepairAttempts, OnExhausted: string(e.RepairOnExhausted)}}
		}
		if a.Mode == ModeBatch {
			wa.Batch = &wireBatch{MaxRecords: a.Batch.MaxRecords, MaxWait: dur(a.Batch.MaxWait), Poll: dur(a.Batch.Poll)}
		}
		wa.Images, wa.Documents, wa.Tools, wa.ToolChoice, wa.Cache = a.Images, a.Documents, a.Tools, a.ToolChoice, a.Cache
		if a.IsEmbed() {
			wa.Kind, wa.Input, wa.Prompt = a.Kind, a.Prompt, ""
			wa.Embed = &wireEmbed{BatchSize: a.Embed.BatchSize, MaxWait: dur(a.Embed.MaxWait), Format: a.Embed.Format}
		}
		ww.Actions = append(ww.Actions, wa)
	}
	// Indented, so that an error found by Decode has a useful line.
	b, err := json.MarshalIndent(ww, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode workflow: %w", err)
	}
	return b, nil
}

func wirePolicy(p retry.Policy) any {
	wait := ""
	if p.MaxWait != 0 && p.MaxWait != retry.MaxWaitDefault {
		wait = dur(p.MaxWait)
	}
	if !p.Enabled {
		if (p.OnExhausted == "" || p.OnExhausted == retry.OnExhaustedDefault) && wait == "" {
			return false
		}
		return wireRetry{OnExhausted: string(p.OnExhausted), MaxWait: wait}
	}
	wr := wireRetry{Enabled: true, MaxAttempts: p.MaxAttempts, Backoff: dur(p.Backoff), MaxBackoff: dur(p.MaxBackoff),
		Budget: dur(p.Budget), OnExhausted: string(p.OnExhausted), MaxWait: wait}
	if p.MaxDeliveries != 0 || p.RedeliverBackoff != 0 {
		wr.Redeliver = &wireRedeliver{MaxDeliveries: p.MaxDeliveries, Backoff: dur(p.RedeliverBackoff)}
	}
	return wr
}

// Decode reads a workflow written by Encode, validating it again and
// compiling its templates. Errors name the file the workflow came from.
func Decode(data []byte) (*Workflow, error) {
	var head struct {
		Version int    `json:"version"`
		File    string `json:"file"`
	}
	label := "encoded workflow"
	if json.Unmarshal(data, &head) == nil && head.File != "" {
		label = head.File + " (encoded)"
	}
	if head.Version > FormatVersion {
		return nil, fmt.Errorf("%s: format version %d, but this jetpool reads up to version %d (upgrade it): %w",
			label, head.Version, FormatVersion, ErrNewerFormat)
	}
	p := &parser{file: label, encoded: true}
	return p.parse(data)
}

var durationType = reflect.TypeFor[time.Duration]()

// yamlValue renders v as JSON values under its yaml names, leaving out zero
// fields, so that decoding the result with yaml.v3 gives v back: encoding/json
// would write durations as integers, which yaml.v3 refuses.
func yamlValue(v reflect.Value) (any, error) {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String(), nil
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil, nil
		}
		return yamlValue(v.Elem())
	case reflect.Struct:
		m := map[string]any{}
		t := v.Type()
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("yaml")
			if !sf.IsExported() || tag == "-" || v.Field(i).IsZero() {
				continue
			}
			x, err := yamlValue(v.Field(i))
			if err != nil {
				return nil, err
			}
			name, opts, _ := strings.Cut(tag, ",")
			if strings.Contains(opts, "inline") {
				sub, ok := x.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("inline field %s is not a struct", sf.Name)
				}
				for k, v := range sub {
					m[k] = v
				}
				continue
			}
			if name == "" {
				name = strings.ToLower(sf.Name)
			}
			m[name] = x
		}
		return m, nil
	}
	var n yaml.Node
	if err := n.Encode(v.Interface()); err != nil {
		return nil, err
	}
	return toJSON(&n)
}
