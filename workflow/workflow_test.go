package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// mustParse parses a workflow written in a test; a leading newline is dropped so
// that the first line of the literal is line 1.
func mustParse(t *testing.T, src string) *Workflow {
	t.Helper()
	w, err := Parse("workflow.yaml", []byte(strings.TrimPrefix(src, "\n")))
	require.NoError(t, err)
	return w
}

// parseErrs parses a workflow that must fail and returns its errors as text.
func parseErrs(t *testing.T, src string) []string {
	t.Helper()
	_, err := Parse("workflow.yaml", []byte(strings.TrimPrefix(src, "\n")))
	require.Error(t, err)
	var out []string
	for _, e := range Errors(err) {
		out = append(out, e.Error())
	}
	require.NotEmpty(t, out, "every error is a *workflow.Error: %v", err)
	return out
}

func TestParseEveryField(t *testing.T) {
	t.Parallel()
	w, err := Load("testdata/full.yaml")
	require.NoError(t, err)

	require.Equal(t, "full", w.Name)
	require.Equal(t, 25.50, w.MaxCost)
	require.Equal(t, []string{"id", "text"}, w.Carry)
	require.Equal(t, "testdata/full.yaml", w.File)
	require.Len(t, w.Actions, 3)

	// Providers: the three in use, presets layered under entries; "unused" left out.
	require.Equal(t, map[string]provider.Config{
		"groq": {Name: "groq", Kind: provider.KindOpenAI, BaseURL: "https://api.groq.com/openai/v1", APIKeyEnv: "GROQ_API_KEY",
			Timeout: 30 * time.Second, Headers: map[string]string{"X-Team": "research"}, Stream: true,
			Limits: provider.Limits{RPM: 600, TPM: 100000, Concurrency: 8}},
		"local": {Name: "local", Kind: provider.KindOpenAI, BaseURL: "http://127.0.0.1:8000/v1", APIKeyFile: "/run/secrets/local-key",
			Limits: provider.Limits{NoAdaptive: true}},
		"mysim": {Name: "mysim", Kind: provider.KindSim, Sim: &provider.SimConfig{Latency: 50 * time.Millisecond, Seed: 7,
			Faults: provider.SimFaults{RateLimit: 0.1, Server: 0.05}}},
	}, w.Providers)

	a, i := w.Action("extract_metadata")
	require.Equal(t, 0, i)
	require.Equal(t, "extract_metadata", a.Name)
	require.Equal(t, 0, a.Index)
	require.Equal(t, 38, a.Line)
	require.Equal(t, "groq", a.Provider)
	require.Equal(t, "llama-3.1-8b-instant", a.Model)
	require.Equal(t, "Answer in JSON.", a.System)
	require.Equal(t, "Extract title and author from: {{ .text }}", a.Prompt)
	require.Equal(t, map[string]any{"temperature": 0.2, "max_tokens": 200.0, "top_p": 0.9}, a.Params, "params merge over defaults")
	require.False(t, a.Stream, "the action's stream: false beats the provider's stream: true")
	require.True(t, a.JSON)
	require.Equal(t, retry.Policy{Enabled: true, MaxAttempts: 5, Backoff: 2 * time.Second, MaxBackoff: 30 * time.Second,
		Budget: 20 * time.Second, OnExhausted: retry.Raise, MaxDeliveries: 3, RedeliverBackoff: 1500 * time.Millisecond, MaxWait: retry.MaxWaitDefault}, a.Retry)
	require.Equal(t, &Expect{
		Format: FormatJSON,
		Schema: map[string]any{"type": "object", "required": []any{"title", "author"}, "properties": map[string]any{
			"title": map[string]any{"type": "string"}, "author": map[string]any{"type": "string"},
			"year": map[string]any{"type": "integer", "minimum": 0.0}}},
		SchemaFile: "schemas/metadata.json", SchemaLine: 48, RepairAttempts: 2, RepairOnExhausted: retry.ReturnLast,
	}, a.Expect)
	require.Equal(t, 10, a.MaxCalls)
	require.Equal(t, OnTruncatedGrow, a.OnTruncated)
	require.Equal(t, OnFilteredFail, a.OnFiltered, "on_filtered from defaults")
	require.Equal(t, &pricing.Price{InputPerMTok: 0.05, OutputPerMTok: 0.08, Source: "workflow"}, a.Price, "the provider entry's price")
	require.Equal(t, ModeOnline, a.Mode)
	require.Zero(t, a.Batch)
	require.Empty(t, a.Fallback)

	a, i = w.Action("summarize")
	require.Equal(t, 1, i)
	require.Equal(t, "local", a.Provider)
	require.Equal(t, "gpt-4o-mini", a.Model, "model from defaults")
	require.Equal(t, "You are terse.", a.System, "system from defaults")
	require.Equal(t, map[string]any{"temperature": 0.0, "top_p": 0.9, "max_tokens": 1000.0}, a.Params)
	require.Equal(t, retry.Policy{}, a.Retry, "retry: false")
	require.Equal(t, &Expect{Format: FormatJSON, Schema: map[string]any{"type": "object", "required": []any{"summary"}},
		SchemaLine: 65, RepairOnExhausted: retry.ReturnLast}, a.Expect, "a schema alone implies json")
	require.Equal(t, 20, a.MaxCalls, "max_calls from defaults")
	require.Equal(t, OnTruncatedOK, a.OnTruncated)
	require.Equal(t, OnFilteredOK, a.OnFiltered)
	require.Equal(t, &pricing.Price{Source: "workflow"}, a.Price, "a free local model: the action's own price")
	require.Equal(t, &Overflow{Truncate: "text", Keep: KeepTail, FallbackModel: "llama-3.3-70b-versatile", FallbackProvider: "groq",
		FallbackPrice: &pricing.Price{InputPerMTok: 0.05, OutputPerMTok: 0.08, Source: "workflow"}, FallbackContextWindow: 128_000, MaxRounds: 3}, a.Overflow,
		"the fallback is billed at its provider's price, not the action's; its window is the built-in table's")

	a, _ = w.Action("classify")
	require.Equal(t, "mysim", a.Provider)
	require.Equal(t, retry.Policy{}, a.Retry, "enabled: false")
	require.Nil(t, a.Expect)
	require.Equal(t, ModeBatch, a.Mode)
	require.Equal(t, BatchConfig{MaxRecords: 500, MaxWait: time.Minute, Poll: 10 * time.Second}, a.Batch)
	require.Equal(t, ModeOnline, a.Fallback)
	require.Nil(t, a.Overflow, "off by default")

	a, i = w.Action("nope")
	require.Nil(t, a)
	require.Equal(t, -1, i)
}

func TestDefaultsInheritance(t *testing.T) {
	t.Parallel()

	t.Run("RetryOffWithoutABlock", func(t *testing.T) {
		t.Parallel()
		w := mustParse(t, `
defaults: {provider: openai, model: m}
actions:
  - {name: a, prompt: hi}
`)
		require.Equal(t, retry.Policy{}, w.Actions[0].Retry)
		require.Equal(t, 1, w.Actions[0].Retry.Attempts())
		require.Equal(t, 1, w.Actions[0].Retry.Deliveries())
	})

	t.Run("DefaultsBlockAndOptOuts", func(t *testing.T) {
		t.Parallel()
		w := mustParse(t, `
defaults:
  provider: openai
  model: m
  retry: {max_attempts: 4, on_exhausted: raise}
actions:
  - {name: inherits, prompt: hi}
  - {name: own, prompt: hi, retry: {backoff: 1s}}
  - {name: off_bool, prompt: hi, retry: false}
  - {name: off_enabled, prompt: hi, retry: {enabled: false}}
  - {name: off_raise, prompt: hi, retry: {enabled: false, on_exhausted: raise}}
  - {name: on_bool, prompt: hi, retry: true}
`)
		inherited := retry.Policy{Enabled: true, MaxAttempts: 4, OnExhausted: retry.Raise}.WithDefaults()
		require.Equal(t, inherited, w.Actions[0].Retry)
		require.Equal(t, 4, inherited.MaxAttempts)
		require.Equal(t, retry.BackoffDefault, inherited.Backoff)
		require.Equal(t, retry.MaxDeliveriesDefault, inherited.MaxDeliveries)

		// An own block replaces the defaults' block whole: no max_attempts 4, no raise.
		own := w.Actions[1].Retry
		require.True(t, own.Enabled)
		require.Equal(t, retry.MaxAttemptsDefault, own.MaxAttempts)
		require.Equal(t, time.Second, own.Backoff)
		require.Equal(t, retry.ReturnLast, own.OnExhausted)

		require.Equal(t, retry.Policy{}, w.Actions[2].Retry)
		require.Equal(t, retry.Policy{}, w.Actions[3].Retry)
		require.Equal(t, retry.Policy{OnExhausted: retry.Raise}, w.Actions[4].Retry)
		require.Equal(t, retry.Policy{Enabled: true}.WithDefaults(), w.Actions[5].Retry)
	})

	t.Run("OtherFields", func(t *testing.T) {
		t.Parallel()
		w := mustParse(t, `
providers:
  s: {kind: sim, stream: true}
defaults:
  provider: s
  model: base
  system: sys
  params: {temperature: 0}
  stream: false
  json: true
  expect: {format: json}
  max_calls: 7
  mode: batch
  batch: {max_records: 10}
  fallback: online
actions:
  - {name: a, prompt: hi}
  - name: b
    prompt: hi
    model: other
    system: ""
    params: {temperature: 1}
    json: false
    expect: {schema: {type: object}}
    max_calls: 3
    mode: online
`)
		a := w.Actions[0]
		require.Equal(t, "s", a.Provider)
		require.Equal(t, "base", a.Model)
		require.Equal(t, "sys", a.System)
		require.Equal(t, map[string]any{"temperature": 0.0}, a.Params)
		require.False(t, a.Stream, "defaults' stream beats the provider's")
		require.True(t, a.JSON)
		require.Equal(t, &Expect{Format: FormatJSON, RepairOnExhausted: retry.ReturnLast}, a.Expect)
		require.Equal(t, 7, a.MaxCalls)
		require.Equal(t, ModeBatch, a.Mode)
		require.Equal(t, BatchConfig{MaxRecords: 10, MaxWait: BatchMaxWaitDefault, Poll: BatchPollDefault}, a.Batch)
		require.Equal(t, ModeOnline, a.Fallback)

		b := w.Actions[1]
		require.Equal(t, "other", b.Model)
		require.Empty(t, b.System)
		require.Equal(t, map[string]any{"temperature": 1.0}, b.Params)
		require.False(t, b.JSON)
		require.Equal(t, map[string]any{"type": "object"}, b.Expect.Schema)
		require.Equal(t, 3, b.MaxCalls)
		require.Equal(t, ModeOnline, b.Mode)
		require.Zero(t, b.Batch, "inherited batch settings are unused online")
		require.Empty(t, b.Fallback)

		// Each action owns its Expect and Params.
		require.NotSame(t, w.Actions[0].Expect, mustParse(t, "defaults: {provider: sim, expect: {format: json}}\nactions: [{name: a, prompt: x}, {name: b, prompt: y}]").Actions[1].Expect)
	})

	t.Run("ProviderStream", func(t *testing.T) {
		t.Parallel()
		w := mustParse(t, `
providers:
  s: {kind: sim, stream: true}
actions:
  - {name: a, provider: s, prompt: hi}
`)
		require.True(t, w.Actions[0].Stream)
	})
}

func TestPresets(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
providers:
  groq: {api_key_env: MY_GROQ_KEY}
actions:
  - {name: a, provider: anthropic, model: claude, prompt: hi}
  - {name: b, provider: groq, model: llama, prompt: hi}
  - {name: c, provider: sim, prompt: hi}
`)
	anthropic, _ := provider.Preset("anthropic")
	require.Equal(t, anthropic, w.Providers["anthropic"], "a preset used by name")
	require.Equal(t, provider.Config{Name: "groq", Kind: provider.KindOpenAI, BaseURL: "https://api.groq.com/openai/v1",
		APIKeyEnv: "MY_GROQ_KEY"}, w.Providers["groq"], "an entry named like a preset inherits it")
	require.Equal(t, provider.Config{Name: "sim", Kind: provider.KindSim}, w.Providers["sim"])
	require.Empty(t, w.Actions[2].Model, "kind sim needs no model")
	require.Len(t, w.Providers, 3)
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/*.yaml")
	require.NoError(t, err)
	require.Len(t, files, 3)
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			w, err := Load(file)
			require.NoError(t, err)
			data, err := w.Encode()
			require.NoError(t, err)
			require.NotContains(t, string(data), "defaults", "the encoded form is resolved")

			got, err := Decode(data)
			require.NoError(t, err)
			require.Equal(t, comparable(w), comparable(got))

			again, err := got.Encode()
			require.NoError(t, err)
			require.Equal(t, string(data), string(again))

			// Decoded actions render: their templates were compiled.
			for _, a := range got.Actions {
				require.NotNil(t, a.prompt)
			}
		})
	}
}

// comparable strips the compiled templates, which differ by pointer.
func comparable(w *Workflow) Workflow {
	c := *w
	c.Actions = nil
	for _, a := range w.Actions {
		ac := *a
		ac.prompt, ac.parts = nil, nil
		c.Actions = append(c.Actions, &ac)
	}
	return c
}

func TestDecodeRevalidates(t *testing.T) {
	t.Parallel()
	w := mustParse(t, "actions: [{name: a, provider: sim, prompt: hi, retry: {max_attempts: 2}}]")
	w.Actions[0].Retry.MaxAttempts = 12
	data, err := w.Encode()
	require.NoError(t, err)
	_, err = Decode(data)
	require.Error(t, err)
	errs := Errors(err)
	require.Len(t, errs, 1)
	require.Equal(t, "workflow.yaml (encoded)", errs[0].File)
	require.Equal(t, "actions[0].retry.max_attempts", errs[0].Field)
	require.Equal(t, "12 is out of range 1-10", errs[0].Msg)

	_, err = Decode([]byte("{not json"))
	require.Error(t, err)
	require.NotEmpty(t, Errors(err))
}

func TestRender(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
actions:
  - name: extract
    provider: sim
    prompt: "Title: {{ .meta.title }}; text: {{ .text }}; tags: {{ json .tags }}"
`)
	a := w.Actions[0]
	out, err := a.Render(map[string]any{"text": "hello", "meta": map[string]any{"title": "T"}, "tags": []any{"x", 1}})
	require.NoError(t, err)
	require.Equal(t, `Title: T; text: hello; tags: ["x",1]`, out)

	t.Run("MissingTopLevelField", func(t *testing.T) {
		t.Parallel()
		_, err := a.Render(map[string]any{"meta": map[string]any{"title": "T"}, "tags": nil})
		require.ErrorIs(t, err, ErrMissingField)
		var re *retry.Error
		require.ErrorAs(t, err, &re)
		require.Equal(t, retry.ClassProgramming, re.Class)
		require.Equal(t, `TemplateError: action extract: prompt reads field "text", which the record does not have (it has meta, tags)`, err.Error())
	})

	t.Run("MissingNestedField", func(t *testing.T) {
		t.Parallel()
		_, err := a.Render(map[string]any{"text": "x", "meta": map[string]any{}, "tags": nil})
		require.ErrorIs(t, err, ErrMissingField)
		require.Equal(t, `TemplateError: action extract: prompt reads .meta.title: no field "title"`, err.Error())
	})

	t.Run("HandBuiltAction", func(t *testing.T) {
		t.Parallel()
		a := &Action{Name: "x", Prompt: "hi {{ .name }}"}
		out, err := a.Render(map[string]any{"name": "bob"})
		require.NoError(t, err)
		require.Equal(t, "hi bob", out)
		require.Equal(t, []string{"name"}, a.Fields())
	})
}

func TestFields(t *testing.T) {
	t.Parallel()
	for prompt, want := range map[string][]string{
		"no fields":               nil,
		"{{ .text }} {{ .text }}": {"text"},
		"{{ .b.c.d }} {{ .a }}":   {"a", "b"},
		"{{ $.x.y }}":             {"x"},
		"{{ range .items }}{{ .name }}{{ $.top }}{{ else }}{{ .empty }}{{ end }}":            {"empty", "items", "top"},
		"{{ with .meta }}{{ .title }}{{ end }}":                                              {"meta"},
		"{{ if .ok }}{{ .yes }}{{ else }}{{ .no }}{{ end }}":                                 {"no", "ok", "yes"},
		`{{ index . "extract-title" }}`:                                                      {"extract-title"},
		"{{ printf \"%s\" (.a).b }}":                                                         {"a"},
		"{{ $v := .first }}{{ $v.second }}":                                                  {"first"},
		`{{ define "t" }}{{ .inner }}{{ end }}{{ template "t" . }}{{ template "t" .other }}`: {"inner", "other"},
		"{{ json .obj | printf \"%s\" }}":                                                    {"obj"},
	} {
		a := &Action{Name: "a", Prompt: prompt}
		require.Equal(t, want, a.Fields(), prompt)
	}
}

func TestDescribe(t *testing.T) {
	t.Parallel()
	w, err := Load("testdata/quickstart.yaml")
	require.NoError(t, err)
	var b bytes.Buffer
	w.Describe(&b)
	require.Equal(t, `workflow quickstart: 2 actions
  file: testdata/quickstart.yaml
  provider sim: kind sim, no limits: adaptive concurrency
    breaker: opens when 50 % of at least 20 calls in 30s fail (5xx, overload, connection); open 15s, doubling up to 5m0s
    Retry-After: honoured up to 10m0s (max_retry_after)

action 1/2 extract_metadata (line 13)
  provider:   sim/(provider default) (sim)
  mode:       online
  retry:      session: 5 attempts, backoff 2s doubling up to 1m0s, budget 30s
              exec: 3 deliveries, redeliver backoff 1.5s doubling
              on_exhausted: raise
  worst case: 45 calls (5 attempts × 3 deliveries × 3 rounds (repairs, max_tokens doublings)), a hard bound of every layer
              120 calls if processes die mid-call (the calls of up to 5 deliveries lost with them: docs/durability.md)
              at most 55m24s waiting between calls (max_wait 30m0s for the provider included), 2h25m24s with every call at its timeout
  expect:     json, inline schema
  repair:     up to 2 calls, then return_last
  reads:      text

action 2/2 noisy_endpoint (line 21)
  provider:   sim/(provider default) (sim)
  mode:       online
  retry:      off (1 call, 1 delivery)
  worst case: 1 call (1 attempt × 1 delivery), a hard bound of every layer
              6 calls if processes die mid-call (the calls of up to 5 deliveries lost with them: docs/durability.md)
              at most 30m0s waiting between calls (max_wait 30m0s for the provider included), 32m0s with every call at its timeout
  reads:      extract_metadata
`, b.String())
}

func TestSchemaCheckHook(t *testing.T) { // not parallel: it sets a package variable
	var seen []map[string]any
	prev := SchemaCheck // the real check (schema.go); put it back for the tests that follow
	SchemaCheck = func(s map[string]any) error {
		seen = append(seen, s)
		if s["type"] == "bogus" {
			return errors.New(`type: "bogus" is not a JSON Schema type`)
		}
		return nil
	}
	t.Cleanup(func() { SchemaCheck = prev })

	require.Equal(t, []string{`workflow.yaml:5: actions[1].expect.schema: type: "bogus" is not a JSON Schema type`}, parseErrs(t, `
defaults: {provider: sim}
actions:
  - {name: a, prompt: x, expect: {schema: {type: object}}}
  - name: b
    expect: {schema: {type: bogus}}
    prompt: x
`))
	require.Len(t, seen, 2)
}

func TestLoadMissingFile(t *testing.T) {
	t.Parallel()
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestBadWorkflows(t *testing.T) {
	t.Parallel()
	presets := strings.Join(provider.PresetNames(), ", ")
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"UnknownField", `
actions:
  - name: a
    provider: sim
    prompt: hi
    retries: 3
`, []string{"workflow.yaml:5: actions[0].retries: unknown field (did you mean retry?)"}},
		{"AdaptiveNotBoolean", `
providers:
  local: {kind: openai, base_url: "http://127.0.0.1:1/v1", limits: {adaptive: sometimes}}
actions:
  - {name: a, provider: local, model: m, prompt: hi}
`, []string{`workflow.yaml:2: providers.local.limits.adaptive: want true or false, got "sometimes"`}},
		{"AdaptiveWithBudget", `
providers:
  local: {kind: openai, base_url: "http://127.0.0.1:1/v1", limits: {rpm: 60, adaptive: false}}
actions:
  - {name: a, provider: local, model: m, prompt: hi}
`, []string{`workflow.yaml:2: providers.local.limits.adaptive: only without rpm, tpm and concurrency (a budget already turns adaptive concurrency off)`}},
		{"UnknownTopLevelField", `
action: []
`, []string{
			"workflow.yaml:1: action: unknown field (did you mean actions?)",
			"workflow.yaml:1: actions: missing; a workflow needs at least one action",
		}},
		{"MaxAttemptsOutOfRange", `
defaults: {provider: sim}
actions:
  - name: a
    prompt: hi
  - name: b
    prompt: hi
    retry:
      max_attempts: 12
`, []string{"workflow.yaml:8: actions[1].retry.max_attempts: 12 is out of range 1-10"}},
		{"BadDuration", `
defaults:
  provider: sim
  retry: {backoff: 2 seconds}
actions: [{name: a, prompt: hi}]
`, []string{`workflow.yaml:3: defaults.retry.backoff: bad duration "2 seconds" (want e.g. 500ms, 2s, 1m30s)`}},
		{"NumberForDuration", `
actions: [{name: a, provider: sim, prompt: hi, batch: {poll: 30}, mode: batch}]
`, []string{`workflow.yaml:1: actions[0].batch.poll: want a duration such as 500ms, 2s or 1m30s, got "30"`}},
		{"MaxBackoffBelowBackoff", `
actions:
  - name: a
    provider: sim
    prompt: hi
    retry: {backoff: 10s, max_backoff: 5s}
`, []string{"workflow.yaml:5: actions[0].retry.max_backoff: 5s is shorter than backoff 10s"}},
		{"UnknownProvider", `
actions:
  - {name: a, provider: grok, model: m, prompt: hi}
`, []string{`workflow.yaml:2: actions[0].provider: unknown provider "grok" (not under providers: and not a preset: ` + presets + `)`}},
		{"UnknownKind", `
providers:
  bedrock: {kind: bedrock}
actions:
  - {name: a, provider: bedrock, prompt: hi}
`, []string{`workflow.yaml:2: providers.bedrock.kind: unknown kind "bedrock" (want openai, anthropic, gemini or sim)`}},
		{"MissingKind", `
providers:
  mine: {base_url: "https://example.com/v1"}
actions:
  - {name: a, provider: mine, prompt: hi}
`, []string{`workflow.yaml:2: providers.mine.kind: missing; want openai, anthropic, gemini or sim (or name the entry after a preset: ` + presets + `)`}},
		{"BadOnExhausted", `
actions:
  - name: a
    provider: sim
    prompt: hi
    retry: {on_exhausted: fail}
`, []string{`workflow.yaml:5: actions[0].retry.on_exhausted: bad value "fail" (want return_last or raise)`}},
		{"DuplicateActionName", `
defaults: {provider: sim}
actions:
  - name: a
    prompt: hi
  - name: a
    prompt: again
`, []string{`workflow.yaml:5: actions[1].name: duplicate action name "a" (first at line 3)`}},
		{"BadActionName", `
actions: [{name: Extract Title, provider: sim, prompt: hi}]
`, []string{`workflow.yaml:1: actions[0].name: bad name "Extract Title" (want lowercase letters, digits, _ and -)`}},
		{"MissingPrompt", `
defaults: {provider: sim}
actions:
  - name: a
`, []string{"workflow.yaml:3: actions[0].prompt: missing; every action needs a prompt"}},
		{"EmptyPrompt", `
actions:
  - name: a
    provider: sim
    prompt: "  "
`, []string{"workflow.yaml:4: actions[0].prompt: empty; every action needs a prompt"}},
		{"BadTemplate", `
actions:
  - name: a
    provider: sim
    prompt: "Summarize {{ .text"
`, []string{"workflow.yaml:4: actions[0].prompt: bad template: unclosed action"}},
		{"BadTemplateInBlock", `
actions:
  - name: a
    provider: sim
    prompt: |
      Summarize:
      {{ upper .text }}
`, []string{`workflow.yaml:6: actions[0].prompt: bad template: function "upper" not defined`}},
		{"MalformedYAML", `
actions:
  - name: a
   provider: sim
`, []string{"workflow.yaml:1: malformed YAML: did not find expected '-' indicator"}}, // the line yaml.v3 reports
		{"MalformedYAMLColon", `
actions:
  - name: a
    prompt: Note: this is wrong: twice
`, []string{"workflow.yaml:3: malformed YAML: mapping values are not allowed in this context"}},
		{"Tabs", "actions:\n\t- name: a\n", []string{"workflow.yaml:2: malformed YAML: found character that cannot start any token"}},
		{"EmptyFile", ``, []string{"workflow.yaml:1: the workflow is empty; it needs at least an actions: list"}},
		{"OnlyComments", `
# nothing here yet
`, []string{"workflow.yaml:1: the workflow is empty; it needs at least an actions: list"}},
		{"NoActions", `
name: x
actions: []
`, []string{"workflow.yaml:2: actions: empty; a workflow needs at least one action"}},
		{"NotAMapping", `
- name: a
`, []string{"workflow.yaml:1: want a mapping, got a list"}},
		{"TwoDocuments", `
actions: [{name: a, provider: sim, prompt: hi}]
---
actions: []
`, []string{"workflow.yaml:3: a workflow is one YAML document; another starts here"}},
		{"MissingModel", `
defaults: {provider: openai}
actions:
  - name: a
    prompt: hi
`, []string{"workflow.yaml:3: actions[0].model: missing; provider openai (kind openai) needs a model, here or under defaults"}},
		{"MissingProvider", `
actions:
  - name: a
    prompt: hi
`, []string{"workflow.yaml:2: actions[0].provider: missing; set provider here or under defaults"}},
		{"DuplicateField", `
actions:
  - name: a
    provider: sim
    prompt: hi
    prompt: again
`, []string{"workflow.yaml:5: actions[0].prompt: duplicate field (first at line 4)"}},
		{"SimBlockOnOtherKind", `
providers:
  x: {kind: openai, sim: {seed: 1}}
actions: [{name: a, provider: x, model: m, prompt: hi}]
`, []string{"workflow.yaml:2: providers.x.sim: only for kind sim (this provider is kind openai)"}},
		{"SimUnknownField", `
providers:
  s:
    kind: sim
    sim:
      faults: {rate_limt: 0.5}
actions: [{name: a, provider: s, prompt: hi}]
`, []string{"workflow.yaml:5: providers.s.sim.faults.rate_limt: unknown field (did you mean rate_limit?)"}},
		{"SimBadValue", `
providers:
  s:
    kind: sim
    sim:
      latency: fast
actions: [{name: a, provider: s, prompt: hi}]
`, []string{"workflow.yaml:5: providers.s.sim: cannot unmarshal !!str `fast` into time.Duration"}},
		{"SimValidate", `
providers:
  s:
    kind: sim
    sim: {faults: {server: 2}}
actions: [{name: a, provider: s, prompt: hi}]
`, []string{"workflow.yaml:4: providers.s.sim: faults.server: 2 is out of range 0-1"}},
		{"CredentialHeader", `
providers:
  groq: {headers: {Authorization: Bearer xyz}}
actions: [{name: a, provider: groq, model: m, prompt: hi}]
`, []string{"workflow.yaml:2: providers.groq.headers.Authorization: credentials may not be set as headers (headers are stored with the job); use api_key_env or api_key_file"}},
		{"KeyInsteadOfEnvName", `
providers:
  groq: {api_key_env: "gsk-abc123-secret"}
actions: [{name: a, provider: groq, model: m, prompt: hi}]
`, []string{"workflow.yaml:2: providers.groq.api_key_env: not an environment variable name (write the name of the variable that holds the key, such as GROQ_API_KEY, never the key)"}},
		{"BatchSettingsOnline", `
actions:
  - name: a
    provider: sim
    prompt: hi
    batch: {max_records: 10}
    fallback: online
`, []string{
			"workflow.yaml:5: actions[0].batch: only used with mode: batch (this action's mode is online)",
			"workflow.yaml:6: actions[0].fallback: only used with mode: batch (this action's mode is online)",
		}},
		{"BadMode", `
actions: [{name: a, provider: sim, prompt: hi, mode: offline}]
`, []string{`workflow.yaml:1: actions[0].mode: bad value "offline" (want online or batch)`}},
		{"ExpectNeedsFormatOrSchema", `
actions:
  - name: a
    provider: sim
    prompt: hi
    expect: {repair: {max_attempts: 1}}
`, []string{"workflow.yaml:5: actions[0].expect: set format or schema"}},
		{"TextWithSchema", `
actions:
  - name: a
    provider: sim
    prompt: hi
    expect: {format: text, schema: {type: object}}
`, []string{"workflow.yaml:5: actions[0].expect.format: text cannot have a schema (a schema implies json)"}},
		{"SchemaFileMissing", `
actions:
  - name: a
    provider: sim
    prompt: hi
    expect: {schema: schemas/nope.json}
`, []string{"workflow.yaml:5: actions[0].expect.schema: cannot read schema file: open schemas/nope.json: no such file or directory"}},
		{"RepairOutOfRange", `
actions:
  - name: a
    provider: sim
    prompt: hi
    expect: {format: json, repair: {max_attempts: 11}}
`, []string{"workflow.yaml:5: actions[0].expect.repair.max_attempts: 11 is out of range 0-10"}},
		{"BadModelNotAlsoMissing", `
actions: [{name: a, provider: openai, model: [gpt], prompt: hi}]
`, []string{"workflow.yaml:1: actions[0].model: want a string, got a list"}},
		{"MaxCallsZero", `
actions: [{name: a, provider: sim, prompt: hi, max_calls: 0}]
`, []string{"workflow.yaml:1: actions[0].max_calls: 0 is less than 1"}},
		{"WrongTypes", `
actions:
  - name: a
    provider: sim
    prompt: hi
    stream: yes please
    params: [temperature]
    retry: 3
`, []string{
			`workflow.yaml:5: actions[0].stream: want true or false, got "yes please"`,
			`workflow.yaml:6: actions[0].params: want a mapping of parameter names to values, got a list`,
			`workflow.yaml:7: actions[0].retry: want a mapping, or false to turn retry off, got "3"`,
		}},
		{"EveryProblemAtOnceSortedByLine", `
providers:
  x: {kind: nope}
defaults: {provider: sim, retry: {max_attempts: 0}}
actions:
  - name: a
    prompt: "{{ .x"
  - name: a
    prompt: hi
    retry: {redeliver: {max_deliveries: 21}}
`, []string{
			`workflow.yaml:2: providers.x.kind: unknown kind "nope" (want openai, anthropic, gemini or sim)`,
			`workflow.yaml:3: defaults.retry.max_attempts: 0 is out of range 1-10`,
			`workflow.yaml:6: actions[0].prompt: bad template: unclosed action`,
			`workflow.yaml:7: actions[1].name: duplicate action name "a" (first at line 5)`,
			`workflow.yaml:9: actions[1].retry.redeliver.max_deliveries: 21 is out of range 1-20`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, parseErrs(t, tc.src))
		})
	}
}

func TestErrorRendering(t *testing.T) {
	t.Parallel()
	require.Equal(t, "workflow.yaml:14: actions[1].retry.max_attempts: 12 is out of range 1-10",
		(&Error{File: "workflow.yaml", Line: 14, Field: "actions[1].retry.max_attempts", Msg: "12 is out of range 1-10"}).Error())
	require.Equal(t, "w.yaml: oops", (&Error{File: "w.yaml", Msg: "oops"}).Error())
	require.Equal(t, "w.yaml:3: oops", (&Error{File: "w.yaml", Line: 3, Msg: "oops"}).Error())

	_, err := Parse("dir/w.yaml", []byte("actions: [{name: a, provider: x, prompt: hi}]"))
	var we *Error
	require.ErrorAs(t, err, &we)
	require.Equal(t, "dir/w.yaml", we.File)
	require.Equal(t, 1, we.Line)
}

func TestAnchorsAndMergeKeys(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
x-common: &common
  provider: sim
  retry: {max_attempts: 2}
actions:
  - <<: *common
    name: a
    prompt: hi
  - <<: *common
    name: b
    prompt: hi
    retry: false
`)
	require.Equal(t, 2, w.Actions[0].Retry.MaxAttempts)
	require.Equal(t, "sim", w.Actions[1].Provider)
	require.Equal(t, retry.Policy{}, w.Actions[1].Retry, "a key written in the mapping wins over a merged one")
}

func TestSchemaFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "s.yaml"), []byte("type: object\nrequired: [a]\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "list.json"), []byte(`["not", "a", "mapping"]`), 0o600))
	src := `
actions:
  - {name: a, provider: sim, prompt: hi, expect: {schema: s.yaml}}
  - {name: b, provider: sim, prompt: hi, expect: {schema: list.json}}
  - {name: c, provider: sim, prompt: hi, params: {x: .nan}}
`
	file := filepath.Join(dir, "workflow.yaml")
	_, err := Parse(file, []byte(strings.TrimPrefix(src, "\n")))
	var got []string
	for _, e := range Errors(err) {
		got = append(got, e.Error())
	}
	require.Equal(t, []string{
		file + `:3: actions[1].expect.schema: schema file ` + filepath.Join(dir, "list.json") + ` holds a list, not a mapping`,
		file + `:4: actions[2].params: .nan has no JSON form`,
	}, got)

	w, err := Parse(file, []byte("actions: [{name: a, provider: sim, prompt: hi, expect: {schema: s.yaml}}]"))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"type": "object", "required": []any{"a"}}, w.Actions[0].Expect.Schema)
	require.Equal(t, "s.yaml", w.Actions[0].Expect.SchemaFile)
}

// A prompt of text and top-level fields is put together without
// text/template when its fields are strings, and what it writes is what the
// template writes; any other value, a missing field or one past
// MaxPromptBytes goes through the template as before.
func TestRenderPlainPrompt(t *testing.T) {
	t.Parallel()
	plain := &Action{Name: "p", Prompt: "Summarize {{ .text }} by {{.author}}:\n{{- .text -}} <end>"}
	cp, err := plain.compiled()
	require.NoError(t, err)
	require.Len(t, cp.plain, 7, "text and top-level fields only")
	for _, prompt := range []string{`{{ .a.b }}`, `{{ .a | printf "%q" }}`, `{{ if .a }}x{{ end }}`, `{{ $x := .a }}{{ $x }}`, `{{ json .a }}`, `{{ . }}`} {
		cp, err := (&Action{Name: "n", Prompt: prompt}).compiled()
		require.NoError(t, err)
		require.Nil(t, cp.plain, prompt)
	}
	viaTemplate := func(data map[string]any) (string, error) {
		cp, err := plain.compiled()
		require.NoError(t, err)
		cp.plain = nil
		return (&Action{Name: "p", Prompt: plain.Prompt, prompt: cp}).Render(data)
	}
	for _, data := range []map[string]any{
		{"text": "hello", "author": "Ann"},
		{"text": "<é & \"q\">", "author": ""},
		{"text": json.Number("12.50"), "author": "n"},
		{"text": nil, "author": true},
		{"text": map[string]any{"k": 1}, "author": []any{1, "x"}},
	} {
		want, werr := viaTemplate(data)
		got, gerr := plain.Render(data)
		require.Equal(t, werr, gerr)
		require.Equal(t, want, got)
	}
	_, err = plain.Render(map[string]any{"text": "x"})
	require.ErrorIs(t, err, ErrMissingField)
	_, err = plain.Render(map[string]any{"text": strings.Repeat("y", MaxPromptBytes), "author": "a"})
	require.ErrorIs(t, err, ErrPromptTooLarge)
}
