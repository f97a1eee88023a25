package workflow

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

const multimodalWorkflow = `
providers:
  claude: {kind: anthropic, api_key_env: ANTHROPIC_API_KEY}
defaults:
  cache: [system]
actions:
  - name: look
    provider: claude
    model: claude-sonnet-4-5
    system: You read invoices.
    prompt: "Read {{ .id }}"
    images: ["{{ .scan }}", "https://example.com/logo.png"]
    documents: "{{ .pdf }}"
    cache: [system, tools, documents]
    tools:
      - name: record_invoice
        description: Record an invoice's fields.
        parameters:
          type: object
          properties: {total: {type: number}, vendor: {type: string}}
          required: [total]
      - type: function
        function: {name: flag, parameters: {type: object}}
    tool_choice: record_invoice
  - name: vectors
    kind: embed
    provider: openai
    model: text-embedding-3-small
    input: "{{ (index .look.tool_calls 0).arguments.vendor }} {{ .id }}"
    params: {dimensions: 256}
    embed: {batch_size: 500, max_wait: 50ms, format: base64}
    retry: {max_attempts: 3}
`

func TestParseMultimodal(t *testing.T) {
	t.Parallel()
	w := mustParse(t, multimodalWorkflow)
	look, vec := w.Actions[0], w.Actions[1]
	require.Equal(t, KindChat, look.Kind)
	require.Equal(t, []string{"{{ .scan }}", "https://example.com/logo.png"}, look.Images)
	require.Equal(t, []string{"{{ .pdf }}"}, look.Documents)
	require.Equal(t, []string{CacheSystem, CacheTools, CacheDocuments}, look.Cache)
	require.Equal(t, "record_invoice", look.ToolChoice)
	require.Equal(t, []provider.Tool{
		{Name: "record_invoice", Description: "Record an invoice's fields.", Parameters: map[string]any{"type": "object",
			"properties": map[string]any{"total": map[string]any{"type": "number"}, "vendor": map[string]any{"type": "string"}},
			"required":   []any{"total"}}},
		{Name: "flag", Parameters: map[string]any{"type": "object"}},
	}, look.Tools)
	require.Equal(t, []string{"id", "pdf", "scan"}, look.Fields(), "the parts' fields are the action's too")

	require.True(t, vec.IsEmbed())
	require.Equal(t, EmbedConfig{BatchSize: 500, MaxWait: 50 * time.Millisecond, Format: EmbedFormatBase64}, vec.Embed)
	require.Equal(t, "{{ (index .look.tool_calls 0).arguments.vendor }} {{ .id }}", vec.Prompt, "the input is the action's template")
	require.Empty(t, vec.Cache, "an embed action caches nothing, whatever the defaults say")
	require.NoError(t, w.CheckRefs(map[string]bool{"id": true, "scan": true, "pdf": true}))

	out, err := vec.Render(map[string]any{"id": "r1", "look": map[string]any{"tool_calls": []any{map[string]any{"arguments": map[string]any{"vendor": "ACME"}}}}})
	require.NoError(t, err)
	require.Equal(t, "ACME r1", out)

	parts, err := look.RenderParts(map[string]any{"id": "r1", "scan": "scans/r1.png", "pdf": ""})
	require.NoError(t, err)
	require.Equal(t, []RenderedPart{
		{Type: provider.PartImage, Field: "images[0]", Value: "scans/r1.png"},
		{Type: provider.PartImage, Field: "images[1]", Value: "https://example.com/logo.png"},
	}, parts, "an entry that renders empty adds nothing")
	_, err = look.RenderParts(map[string]any{"id": "r1", "scan": "x"})
	require.ErrorContains(t, err, `action look: documents[0] reads field "pdf", which the record does not have`)
	require.Equal(t, retry.ClassProgramming, retry.AsError(err).Class)
	require.True(t, w.RecordParts(0))

	var buf bytes.Buffer
	w.Describe(&buf)
	for _, line := range []string{
		"parts:      2 images, 1 document (URLs, data: URLs, or files the dispatcher reads into the record)",
		"tools:      record_invoice, flag, tool_choice record_invoice; output {text, tool_calls}",
		"cache:      system, tools, documents",
		"embed:      input embedded, up to 500 records a request (the first waits up to 50ms), vectors as base64",
	} {
		require.Contains(t, buf.String(), line)
	}
}

func TestMultimodalRoundTrip(t *testing.T) {
	t.Parallel()
	w := mustParse(t, multimodalWorkflow)
	data, err := w.Encode()
	require.NoError(t, err)
	got, err := Decode(data)
	require.NoError(t, err)
	require.Equal(t, comparable(w), comparable(got))
	again, err := got.Encode()
	require.NoError(t, err)
	require.Equal(t, string(data), string(again))
	parts, err := got.Actions[0].RenderParts(map[string]any{"scan": "a.png", "pdf": "b.pdf"})
	require.NoError(t, err)
	require.Len(t, parts, 3, "decoded parts are compiled")
}

func TestStructuredDescribed(t *testing.T) {
	t.Parallel()
	for kind, want := range map[string]string{
		"openai":    "structured: json_schema, strict",
		"anthropic": "structured: a forced tool whose input is the answer",
		"gemini":    "structured: responseJsonSchema",
	} {
		model := map[string]string{"openai": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-flash"}[kind]
		w := mustParse(t, `
actions:
  - name: a
    provider: `+kind+`
    model: `+model+`
    prompt: hi
    expect:
      schema: {type: object, additionalProperties: false, required: [t], properties: {t: {type: string}}}
`)
		var buf bytes.Buffer
		w.Describe(&buf)
		require.Contains(t, buf.String(), want, kind)
	}
}

func TestToolsOutputRefs(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
actions:
  - {name: pick, provider: sim, prompt: "{{ .text }}", tools: [{name: t}]}
  - {name: use, provider: sim, prompt: "{{ .pick.text }} {{ .pick.tool_calls }} {{ .pick.tools_calls }}"}
  - {name: vec, kind: embed, provider: sim, input: "{{ .text }}"}
  - {name: after, provider: sim, prompt: "{{ .vec.x }}"}
`)
	err := w.CheckRefs(map[string]bool{"text": true})
	require.Error(t, err)
	var msgs []string
	for _, e := range Errors(err) {
		msgs = append(msgs, e.Error())
	}
	require.Equal(t, []string{
		`workflow.yaml:3: actions[1].prompt: reads .pick.tools_calls: the output of action pick (it has tools) is {text, tool_calls}, with no field "tools_calls" (did you mean tool_calls?)`,
		`workflow.yaml:5: actions[3].prompt: reads .vec.x: the output of action vec is a vector (kind embed), which has no field "x"`,
	}, msgs)
}

func TestMultimodalRefsChecked(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
actions:
  - name: a
    provider: sim
    prompt: hi
    images:
      - "{{ .photo }}"
`)
	err := w.CheckRefs(map[string]bool{"text": true})
	require.EqualError(t, err, `workflow.yaml:6: actions[0].images[0]: reads .photo: no record field and no earlier action is called "photo" (fields: text)`)
	require.Equal(t, []string{"photo"}, w.RecordFields(0))
}

func TestPartSource(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]string{
		"https://example.com/a.png": SourceURL, "http://127.0.0.1/a.png": SourceURL, "data:image/png;base64,AA": SourceData,
		"scans/a.png": SourceFile, "/abs/a.pdf": SourceFile, `C:\scans\a.png`: SourceFile,
	} {
		got, err := PartSource(v)
		require.NoError(t, err, v)
		require.Equal(t, want, got, v)
	}
	_, err := PartSource("s3://bucket/a.png")
	require.EqualError(t, err, "a s3:// URL: want an http(s) URL, a data: URL or a file path")
}

func TestToolParametersFromFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "args.json"), []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`), 0o600))
	src := "actions:\n  - {name: a, provider: sim, prompt: hi, tools: [{name: search, parameters: args.json}]}\n"
	w, err := Parse(filepath.Join(dir, "workflow.yaml"), []byte(src))
	require.NoError(t, err)
	require.Equal(t, map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}, w.Actions[0].Tools[0].Parameters)
}

func TestBadMultimodal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{"EmbedOnAnthropic", `
actions:
  - {name: v, kind: embed, provider: anthropic, model: claude-sonnet-4-5, input: "{{ .text }}"}
`, []string{"workflow.yaml:2: actions[0].kind: provider anthropic (kind anthropic) has no embeddings API: use one of kind openai (or an OpenAI-compatible endpoint), gemini or sim"}},
		{"EmbedWithChatFields", `
actions:
  - name: v
    kind: embed
    provider: sim
    prompt: "{{ .text }}"
    system: hi
    input: "{{ .text }}"
    expect: {format: json}
`, []string{
			"workflow.yaml:5: actions[0].prompt: not used by an embed action (it embeds its input:)",
			"workflow.yaml:6: actions[0].system: not used by an embed action (it embeds its input:)",
			"workflow.yaml:8: actions[0].expect: not used by an embed action (it embeds its input:)",
		}},
		{"EmbedWithoutInput", `
actions:
  - {name: v, kind: embed, provider: sim}
`, []string{"workflow.yaml:2: actions[0].input: missing; an embed action needs the text to embed (a template)"}},
		{"EmbedBatchTooBig", `
actions:
  - {name: v, kind: embed, provider: gemini, model: gemini-embedding-001, input: x, embed: {batch_size: 500}}
`, []string{"workflow.yaml:2: actions[0].embed.batch_size: 500 is more than provider gemini (kind gemini) takes in one request (100)"}},
		{"EmbedBatchModeOnGemini", `
actions:
  - {name: v, kind: embed, provider: gemini, model: gemini-embedding-001, input: x, mode: batch}
`, []string{"workflow.yaml:2: actions[0].mode: an embed action runs in batch mode only on kind openai (OpenAI Batch); provider gemini is kind gemini"}},
		{"InputOnChat", `
actions:
  - {name: a, provider: sim, prompt: hi, input: x, embed: {format: float}}
`, []string{"workflow.yaml:2: actions[0].input: only for kind: embed (a chat action reads prompt:)", "workflow.yaml:2: actions[0].embed: only for kind: embed"}},
		{"ToolChoiceUnknown", `
actions:
  - name: a
    provider: sim
    prompt: hi
    tools: [{name: search}, {name: fetch}]
    tool_choice: serch
`, []string{`workflow.yaml:6: actions[0].tool_choice: "serch" is none of auto, none, required and the tools (search, fetch) (did you mean search?)`}},
		{"ToolChoiceWithoutTools", `
actions:
  - {name: a, provider: sim, prompt: hi, tool_choice: auto}
`, []string{"workflow.yaml:2: actions[0].tool_choice: needs tools:"}},
		{"BadTools", `
actions:
  - name: a
    provider: sim
    prompt: hi
    tools:
      - {name: "bad name"}
      - {name: jetpool_x}
      - {description: nameless}
      - {name: ok, parameters: {type: 12}}
      - {name: ok}
`, []string{
			`workflow.yaml:6: actions[0].tools[0].name: bad tool name "bad name" (want 1-64 letters, digits, _ and -)`,
			"workflow.yaml:7: actions[0].tools[1].name: tool names starting with jetpool_ are jetpool's own",
			"workflow.yaml:8: actions[0].tools[2].name: missing; every tool needs a name",
			"workflow.yaml:9: actions[0].tools[3].parameters: not a valid JSON Schema: at /type: got number, want array; at /type: value must be one of 'array', 'boolean', 'integer', 'null', 'number', 'object', 'string'",
			"workflow.yaml:10: actions[0].tools[4].name: duplicate tool \"ok\" (first at line 9)",
		}},
		{"ParamsTools", `
actions:
  - name: a
    provider: sim
    prompt: hi
    params:
      tools: [{type: function}]
`, []string{"workflow.yaml:6: actions[0].params.tools: write tools as the action's tools: and tool_choice: fields, whose answers keep their tool calls (output.tool_calls)"}},
		{"CacheWhatItLacks", `
actions:
  - {name: a, provider: sim, prompt: hi, cache: [tools, everything]}
`, []string{
			`workflow.yaml:2: actions[0].cache[1]: bad value "everything" (want system, tools, images or documents)`,
		}},
		{"CacheNothing", `
actions:
  - {name: a, provider: sim, prompt: hi, cache: [images]}
`, []string{"workflow.yaml:2: actions[0].cache: images: this action has none to cache"}},
		{"BadParts", `
actions:
  - name: a
    provider: sim
    prompt: hi
    images: ["{{ .x ", {url: y}, ""]
`, []string{
			"workflow.yaml:5: actions[0].images[0]: bad template: unclosed action",
			"workflow.yaml:5: actions[0].images[1]: want a template (a URL, a data: URL or a file path), got a mapping",
			"workflow.yaml:5: actions[0].images[2]: empty; want a template (a URL, a data: URL or a file path)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, parseErrs(t, tc.src))
		})
	}
}

func TestMultimodalDocExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(workflowDoc)
	require.NoError(t, err)
	for _, s := range []string{"### images and documents", "### tools", "### prompt caching", "### embed"} {
		require.True(t, strings.Contains(string(doc), s), s)
	}
}
