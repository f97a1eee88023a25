package worker_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

// allResults is every stored result of a job, by action then record.
func allResults(t *testing.T, b *broker.Broker, job string) map[string]map[string]*broker.Result {
	t.Helper()
	out := map[string]map[string]*broker.Result{}
	require.NoError(t, b.EachResult(context.Background(), job, func(r *broker.Result) error {
		if out[r.Action] == nil {
			out[r.Action] = map[string]*broker.Result{}
		}
		out[r.Action][r.ID] = r
		return nil
	}))
	return out
}

// A tools action's calls are its output ({text, tool_calls}), checked by
// expect: and read by a later action's template.
func TestToolCallsFeedALaterAction(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, results := expectJob(t, b, `
providers:
  sim: {kind: sim}
  echo: {kind: sim, sim: {reply: "filed: {{.Prompt}}"}}
actions:
  - name: pick
    provider: sim
    prompt: "{{ .text }}"
    tools:
      - name: file_record
        description: File the record under a title.
        parameters: {type: object, properties: {title: {type: string}}, required: [title]}
    tool_choice: file_record
    expect:
      schema:
        type: object
        required: [tool_calls]
        properties: {tool_calls: {type: array, minItems: 1, items: {required: [name, arguments]}}}
  - name: use
    provider: echo
    prompt: "{{ (index .pick.tool_calls 0).arguments.title }}"
`, 5, worker.Config{Concurrency: 4})
	require.EqualValues(t, 5, p.OK)
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("r%d", i)
		require.Equal(t, fmt.Sprintf("filed: record %d", i), results[id].Output)
	}
	pick := allResults(t, b, job.ID)["pick"]["r1"]
	require.Equal(t, "tool_calls", pick.FinishReason)
	// The sim numbers a tool call by the process's call count: which of
	// the records ran first is not fixed.
	calls, _ := pick.Output.(map[string]any)["tool_calls"].([]any)
	require.Len(t, calls, 1)
	id, _ := calls[0].(map[string]any)["id"].(string)
	require.Regexp(t, `^call_sim_[1-5]$`, id)
	require.Equal(t, map[string]any{"text": "", "tool_calls": []any{map[string]any{"id": id, "name": "file_record",
		"arguments": map[string]any{"title": "record 1"}}}}, pick.Output)
}

// A tool call whose arguments fail the expectation is repaired: the
// conversation answers the call ("not run") and then corrects it, in
// OpenAI's wire format, and the second call's arguments are the output.
func TestToolCallRepaired(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	var n atomic.Int32
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		args := `{"name":"Dune"}`
		if n.Add(1) > 1 {
			args = `{"title":"Dune","year":1965}`
		}
		providertest.Reply{Status: 200, Body: providertest.OpenAIToolCalls("gpt-4o-mini",
			[]providertest.ToolCall{{ID: fmt.Sprintf("call_%d", n.Load()), Name: "record_book", Args: args}}, 30, 10)}.ServeHTTP(w, r)
	}))
	_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  fake: {kind: openai, base_url: %s/v1, timeout: 5s}
actions:
  - name: extract
    provider: fake
    model: gpt-4o-mini
    prompt: "Book: {{ .text }}"
    tools: [{name: record_book, parameters: {type: object, properties: {title: {type: string}, year: {type: integer}}}}]
    tool_choice: required
    expect:
      schema: {type: object, properties: {tool_calls: {type: array, items: {properties: {arguments: {required: [title]}}}}}}
      repair: {max_attempts: 1}
`, srv.URL), 1, worker.Config{})
	require.EqualValues(t, 1, p.OK)
	r := results["r1"]
	require.Equal(t, 1, r.Recovery.Repairs)
	out := r.Output.(map[string]any)
	call := out["tool_calls"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"title": "Dune", "year": 1965.0}, call["arguments"])

	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	var first, second map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &first))
	require.NoError(t, json.Unmarshal(reqs[1].Body, &second))
	require.Equal(t, "required", first["tool_choice"])
	require.NotContains(t, first, "response_format", "with tools the schema is the output's, not the text's")
	msgs := second["messages"].([]any)
	require.Len(t, msgs, 4)
	require.Equal(t, "assistant", msgs[1].(map[string]any)["role"])
	require.NotEmpty(t, msgs[1].(map[string]any)["tool_calls"])
	require.Equal(t, map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "not run: jetpool does not run tools; see the next message"}, msgs[2])
	require.Contains(t, msgs[3].(map[string]any)["content"], "/tool_calls/0/arguments: missing property 'title'")
}

var onePNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

// An image file named by the record is read by the dispatcher and reaches
// the provider as base64 data (Anthropic's image block), with the cache
// marks asked for; the cached tokens are reported and priced at the
// cached rate.
func TestImageFileToAnthropicWithCache(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	srv := providertest.NewServer(t, providertest.Reply{Status: 200, Body: strings.Replace(providertest.AnthropicMessage("claude-sonnet-4-5", "a cat", 100, 10),
		`"cache_creation_input_tokens":0,"cache_read_input_tokens":0`, `"cache_creation_input_tokens":0,"cache_read_input_tokens":900`, 1)})
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  claude: {kind: anthropic, base_url: %s/v1, timeout: 5s}
actions:
  - name: look
    provider: claude
    model: claude-sonnet-4-5
    system: You describe photos.
    prompt: "What is in {{ .id }}?"
    images: ["{{ .photo }}"]
    cache: [system, images]
    price: {input_per_mtok: 3, cached_input_per_mtok: 0.3, output_per_mtok: 15}
`, srv.URL))
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cat.png"), onePNG, 0o600))
	in := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(in, []byte(`{"id":"r1","photo":"cat.png"}`+"\n"), 0o600))
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 2})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	r := testenv.Results(t, b, job)["r1"]
	require.Equal(t, "a cat", r.Output)
	require.Equal(t, broker.Usage{InputTokens: 1000, OutputTokens: 10, CachedInputTokens: 900}, r.Usage)
	require.InDelta(t, (100*3+900*0.3+10*15)/1e6, *r.Cost, 1e-12, "cached tokens at the cached rate")

	var body map[string]any
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &body))
	require.Equal(t, []any{map[string]any{"type": "text", "text": "You describe photos.", "cache_control": map[string]any{"type": "ephemeral"}}}, body["system"])
	content := body["messages"].([]any)[0].(map[string]any)["content"].([]any)
	require.Equal(t, map[string]any{"type": "image", "cache_control": map[string]any{"type": "ephemeral"},
		"source": map[string]any{"type": "base64", "media_type": "image/png", "data": base64.StdEncoding.EncodeToString(onePNG)}}, content[0])
	require.Equal(t, map[string]any{"type": "text", "text": "What is in r1?"}, content[1])
}

// A path the dispatcher did not read (it renders from an earlier action's
// output) is bad input at the worker, which reads no local files.
func TestImagePathFromAnOutputIsBadInput(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	_, p, results := expectJob(t, b, `
providers:
  sim: {kind: sim, sim: {reply: "/etc/passwd"}}
actions:
  - {name: first, provider: sim, prompt: "{{ .text }}"}
  - {name: look, provider: sim, prompt: "look", images: ["{{ .first }}"]}
`, 1, worker.Config{})
	require.EqualValues(t, 1, p.Failed)
	r := results["r1"]
	require.Equal(t, "bad_input", r.Reason)
	require.Contains(t, r.Error.Message, "action look: images[0]: the file /etc/passwd is not in the record")
}

const embedYAML = `
providers:
  sim: {kind: sim, sim: {latency: 30ms, dimensions: 16%s}}
actions:
  - name: vec
    kind: embed
    provider: sim
    input: "{{ .text }}"
    embed: {batch_size: 8, max_wait: 100ms%s}
%s`

// Records' inputs share requests (batch_size), each record gets its own
// vector, result and share of the tokens.
func TestEmbedBatchesRecords(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	counter := testenv.NewCounter()
	const n = 40
	job, p, results := expectJob(t, b, fmt.Sprintf(embedYAML, "", "", ""), n, worker.Config{Concurrency: 16, NewProvider: counter.New})
	require.EqualValues(t, n, p.OK)
	require.LessOrEqual(t, counter.Total(), n/2, "requests carry several records (%d requests for %d records)", counter.Total(), n)
	require.GreaterOrEqual(t, counter.Total(), n/8)
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("r%d", i)
		r := results[id]
		require.Equal(t, broker.StatusOK, r.Status, id)
		v, ok := r.Output.([]any)
		require.True(t, ok, "a vector: %T", r.Output)
		require.Len(t, v, 16)
		require.Equal(t, 1, counter.Calls(id), "one request carried it")
		require.Equal(t, 1, r.Recovery.Attempts)
		require.Positive(t, r.Usage.InputTokens)
	}
	require.Equal(t, results["r1"].Output, results["r1"].Output)
	require.NotEqual(t, results["r1"].Output, results["r2"].Output)
	_ = job
}

// A request that fails transiently fails an attempt of each of its
// records, which retry on their own budgets; base64 vectors decode to the
// sim's unit vectors.
func TestEmbedRetriesEachRecord(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	const n = 12
	_, p, results := expectJob(t, b, fmt.Sprintf(embedYAML, ", fail_first: 1, fail_class: server", ", format: base64",
		"    retry: {max_attempts: 5, backoff: 20ms}\n"), n, worker.Config{Concurrency: 16})
	require.EqualValues(t, n, p.OK)
	for i := 1; i <= n; i++ {
		r := results[fmt.Sprintf("r%d", i)]
		require.GreaterOrEqual(t, r.Recovery.Attempts, 2)
		require.Equal(t, []string{"server"}, r.Recovery.Classes)
		s, ok := r.Output.(string)
		require.True(t, ok)
		raw, err := base64.StdEncoding.DecodeString(s)
		require.NoError(t, err)
		require.Len(t, raw, 16*4)
		var norm float64
		for j := 0; j < 16; j++ {
			f := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*j:]))
			norm += float64(f) * float64(f)
		}
		require.InDelta(t, 1, norm, 1e-4)
	}
}

// One input the provider refuses (too long) fails its whole request; sent
// again one by one, only that record is dead-lettered, the others get
// their vectors (against a local server in OpenAI's /embeddings format).
func TestEmbedPoisonInputDeadLettersOnlyItsRecord(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Input []string `json:"input"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		var vecs [][]float32
		for _, in := range req.Input {
			if strings.Contains(in, "record 3") {
				providertest.Reply{Status: 400, Body: providertest.OpenAIError("This model's maximum context length is 8192 tokens, however you requested 9001 tokens (9001 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.", "invalid_request_error", "")}.ServeHTTP(w, r)
				return
			}
			vecs = append(vecs, []float32{float32(len(in)), 1})
		}
		providertest.Reply{Status: 200, Body: providertest.OpenAIEmbeddings("text-embedding-3-small", vecs, 4*len(vecs))}.ServeHTTP(w, r)
	}))
	const n = 6
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  fake: {kind: openai, base_url: %s/v1, timeout: 5s}
actions:
  - name: vec
    kind: embed
    provider: fake
    model: text-embedding-3-small
    input: "{{ .text }}"
    embed: {batch_size: %d, max_wait: 2s}
    retry: {max_attempts: 3}
`, srv.URL, n))
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 8})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, n-1, p.OK)
	require.EqualValues(t, 1, p.Failed)
	results := testenv.Results(t, b, job)
	bad := results["r3"]
	require.Equal(t, "context_overflow", bad.Reason)
	require.Contains(t, bad.Error.Message, "maximum context length")
	dl := dlqByRecord(t, b)
	require.Len(t, dl, 1)
	require.Equal(t, "context_overflow", string(dl["r3"].Reason))
	for _, id := range []string{"r1", "r2", "r4", "r5", "r6"} {
		r := results[id]
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, []any{float64(len("record 1")), float64(1)}, r.Output, id)
		require.Equal(t, 2, r.Recovery.Attempts, "%s: the shared request, then its own", id)
		require.Equal(t, 4, r.Usage.InputTokens, id)
	}
	require.Len(t, srv.Requests(), 1+n, "one shared request, then one per input")
}

// mode: batch with an embed action: one line per record to OpenAI Batch's
// /v1/embeddings, the vectors mapped back by custom_id.
func TestEmbedOpenAIBatch(t *testing.T) {
	t.Parallel()
	srv := batchtest.New(t, provider.KindOpenAI)
	_, results := runBatchYAML(t, srv, 5, fmt.Sprintf(`
providers:
  fake: {kind: openai, base_url: %q}
actions:
  - name: vec
    kind: embed
    provider: fake
    model: text-embedding-3-small
    input: "{{ .text }}"
    params: {dimensions: 3}
    mode: batch
    batch: {max_records: 10, max_wait: 1s, poll: 5ms}
`, srv.URL+"/v1"))
	require.Len(t, results, 5)
	for i := 1; i <= 5; i++ {
		r := results[fmt.Sprintf("r%d", i)]
		require.Equal(t, broker.StatusOK, r.Status)
		require.Equal(t, []any{float64(len(fmt.Sprintf("record %d", i))), 0.5, -0.25}, r.Output)
		require.Equal(t, 5, r.Usage.InputTokens)
	}
	for _, req := range srv.Requests() {
		require.Equal(t, "text-embedding-3-small", req.Body["model"])
		require.Equal(t, 3.0, req.Body["dimensions"])
		require.Len(t, req.Body["input"], 1)
	}
	require.Zero(t, srv.Online())
}

// Each example (examples/images, tools, structured, cache,
// embed) parses and runs to completion on the sim, every record ok.
func TestExamplesRun(t *testing.T) {
	t.Parallel()
	checks := map[string]func(t *testing.T, results map[string]*broker.Result){
		"images": func(t *testing.T, rs map[string]*broker.Result) {
			require.Equal(t, "1 image(s), 1 document(s): Describe item item-1's photo in one line, and what its report says.", rs["item-1"].Output)
			require.True(t, strings.HasPrefix(rs["item-2"].Output.(string), "1 image(s), 0 document(s)"), "an empty entry adds nothing")
		},
		"tools": func(t *testing.T, rs map[string]*broker.Result) {
			require.Equal(t, "routed to the billing: I was charged twice this month queue", rs["t-1"].Output)
			require.Contains(t, rs["t-1"].Outputs["triage"], "tool_calls")
		},
		"structured": func(t *testing.T, rs map[string]*broker.Result) {
			out := rs["b-1"].Output.(map[string]any)
			require.Equal(t, 1800.0, out["year"])
			require.Contains(t, out["title"], "Dune")
		},
		"cache": func(t *testing.T, rs map[string]*broker.Result) {
			writes, reads := 0, 0
			for _, r := range rs {
				if r.Usage.CacheWriteTokens > 0 {
					writes++
				}
				if r.Usage.CachedInputTokens > 0 {
					reads++
				}
			}
			require.Equal(t, 1, writes, "the first call writes the cache")
			require.Equal(t, len(rs)-1, reads, "the others read it")
		},
		"embed": func(t *testing.T, rs map[string]*broker.Result) {
			require.Len(t, rs["doc-001"].Output, 8)
		},
	}
	for name, check := range checks {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join("..", "examples", name)
			wf, err := workflow.Load(filepath.Join(dir, "workflow.yaml"))
			require.NoError(t, err)
			b := testenv.Broker(t)
			d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
			res, err := d.Dispatch(context.Background(), wf, dispatcher.Options{Input: filepath.Join(dir, "records.jsonl"), IDField: "id"})
			require.NoError(t, err)
			testenv.Pool(t, b, worker.Config{Concurrency: 8})
			job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
			require.EqualValues(t, job.Total, p.OK, "every record ok")
			check(t, testenv.Results(t, b, job))
		})
	}
}
