package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// bookSchema is the expectation of the tests below, as a YAML flow mapping.
const bookSchema = `{type: object, required: [title, author], properties: {title: {type: string}, author: {type: string}, year: {type: integer}}}`

// transcript records what each provider call was sent, copied at the time
// of the call (the session reuses its history's backing array).
type transcript struct {
	mu    sync.Mutex
	calls []provider.Request
}

func (tr *transcript) add(req provider.Request) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	req.Messages = append([]provider.Message(nil), req.Messages...)
	tr.calls = append(tr.calls, req)
}

func (tr *transcript) get() []provider.Request {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]provider.Request(nil), tr.calls...)
}

func msgs(kv ...string) []provider.Message {
	var out []provider.Message
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, provider.Message{Role: kv[i], Content: kv[i+1]})
	}
	return out
}

// expectJob runs the records of input through the workflow and returns
// the finished job, its progress and its results.
func expectJob(t *testing.T, b *broker.Broker, yaml string, records int, cfg worker.Config) (*broker.Job, broker.Progress, map[string]*broker.Result) {
	t.Helper()
	wf := testenv.Workflow(t, yaml)
	res := testenv.Dispatch(t, b, wf, testenv.Records(t, records), dispatcher.Options{})
	testenv.Pool(t, b, cfg)
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 30*time.Second)
	return job, p, testenv.Results(t, b, job)
}

const (
	correctionTail = "Reply again with only the corrected JSON value: no explanation and no code fences."
	noJSON         = "Sure! I read the record and it is a classic science-fiction novel."
	fencedNoAuthor = "Here you go:\n```json\n{\"title\": \"Dune\", \"year\": \"1965\"}\n```\nAnything else?"
	validTrailing  = `{"title": "Dune", "author": "Frank Herbert", "year": 1965} I hope this helps!`
)

// The sim, scripted to answer with prose, then a fenced object that fails
// the schema, then a valid object followed by prose: two repairs, each
// correction naming what was wrong; the result's output is the parsed
// value, which the next action's template reads field by field.
func TestRepairUntilValid(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	var tr transcript
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		if req.Model == "book" {
			tr.add(req)
		}
		return next()
	}
	replies, _ := json.Marshal([]string{noJSON, fencedNoAuthor, validTrailing})
	job, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: {replies: %s}}
  echo: {kind: sim, sim: {reply: "{{.Prompt}}"}}
actions:
  - name: extract
    provider: sim
    model: book
    prompt: "Title and author of {{ .text }}"
    expect:
      schema: %s
      repair: {max_attempts: 2}
    retry: {max_attempts: 3, backoff: 1ms}
  - name: cite
    provider: echo
    prompt: "{{ .extract.author }}, {{ .extract.title }} ({{ .extract.year }})"
`, replies, bookSchema), 1, worker.Config{NewProvider: counter.New})
	require.NotEqual(t, broker.JobFailed, job.Status)
	require.EqualValues(t, 1, p.OK)

	calls := tr.get()
	require.Len(t, calls, 3)
	prompt := "Title and author of record 1"
	noJSONFix := "Your previous reply contains no JSON value.\n" + correctionTail
	schemaFix := "Your previous reply does not match the required JSON Schema:\n" +
		"- at (root): missing property 'author'\n" +
		"- at /year: got string, want integer\n" + correctionTail
	require.Equal(t, msgs("user", prompt), calls[0].Messages)
	require.Equal(t, msgs("user", prompt, "assistant", noJSON, "user", noJSONFix), calls[1].Messages)
	require.Equal(t, msgs("user", prompt, "assistant", noJSON, "user", noJSONFix, "assistant", fencedNoAuthor, "user", schemaFix), calls[2].Messages)
	for _, c := range calls {
		require.True(t, c.JSON, "JSON mode requested")
		require.Equal(t, []any{"title", "author"}, c.Schema["required"], "the schema goes to the provider's structured-output mode")
	}

	r := results["r1"]
	require.Equal(t, broker.StatusOK, r.Status)
	require.Equal(t, "Frank Herbert, Dune (1965)", r.Output)
	require.Equal(t, map[string]any{"title": "Dune", "author": "Frank Herbert", "year": float64(1965)}, r.Outputs["extract"],
		"the action's output is the parsed JSON value, not the text")

	var first *broker.Result
	require.NoError(t, b.EachResult(context.Background(), job.ID, func(x *broker.Result) error {
		if x.Action == "extract" {
			first = x
		}
		return nil
	}))
	require.NotNil(t, first)
	rec := first.Recovery
	require.Equal(t, 3, rec.Attempts, "every call counts")
	require.Equal(t, 2, rec.Repairs, "of which two were repairs")
	require.Equal(t, 1, rec.Deliveries, "a schema violation is never redelivered")
	require.Equal(t, []string{"schema_violation"}, rec.Classes)
	require.Equal(t, []broker.Failure{
		{N: 1, Delivery: 1, Class: "schema_violation", Error: "SchemaViolationError: no JSON value in the output", Repair: true},
		{N: 2, Delivery: 1, Class: "schema_violation", Repair: true,
			Error: "SchemaViolationError: 2 schema errors: at (root): missing property 'author'; at /year: got string, want integer"},
	}, rec.Failures)
}

// A transport error during a repair is the retry layers' business: the
// session pops the failed (streamed, partial) assistant turn and retries,
// while the invalid output and its correction stay in the history.
func TestTransportErrorDuringRepair(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	var tr transcript
	var n atomic.Int32
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		tr.add(req)
		if n.Add(1) == 2 {
			// The first repair's stream breaks mid-flight.
			req.OnDelta(`{"title": "Du`)
			return provider.Response{}, &retry.Error{Class: retry.ClassNetwork, TypeName: "NetworkError"}
		}
		return next()
	}
	replies, _ := json.Marshal([]string{`{"title": 1965}`, validTrailing})
	_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, stream: true, sim: {replies: %s}}
actions:
  - name: extract
    provider: sim
    prompt: "Book: {{ .text }}"
    expect: {schema: %s, repair: {max_attempts: 1}}
    retry: {max_attempts: 2, backoff: 1ms}
`, replies, bookSchema), 1, worker.Config{NewProvider: counter.New})
	require.EqualValues(t, 1, p.OK)

	prompt := "Book: record 1"
	invalid := `{"title": 1965}`
	fix := "Your previous reply does not match the required JSON Schema:\n" +
		"- at (root): missing property 'author'\n" +
		"- at /title: got number, want string\n" + correctionTail
	calls := tr.get()
	require.Len(t, calls, 3)
	require.True(t, calls[0].Stream)
	require.Equal(t, msgs("user", prompt), calls[0].Messages, "call 1: the prompt")
	require.Equal(t, msgs("user", prompt, "assistant", invalid, "user", fix), calls[1].Messages, "call 2 (repair): invalid output and correction")
	require.Equal(t, msgs("user", prompt, "assistant", invalid, "user", fix), calls[2].Messages,
		"call 3 (the repair, retried): the broken stream's partial turn is gone, the repair's turns are kept")

	r := results["r1"]
	require.Equal(t, broker.StatusOK, r.Status)
	require.Equal(t, map[string]any{"title": "Dune", "author": "Frank Herbert", "year": float64(1965)}, r.Output)
	require.Equal(t, 3, r.Recovery.Attempts)
	require.Equal(t, 1, r.Recovery.Repairs)
	require.Equal(t, 1, r.Recovery.Deliveries)
	require.Equal(t, []string{"schema_violation", "network"}, r.Recovery.Classes)
	require.Len(t, r.Recovery.Failures, 2)
	require.True(t, r.Recovery.Failures[0].Repair)
	require.Equal(t, broker.Failure{N: 2, Delivery: 1, Class: "network", Error: "NetworkError"}, r.Recovery.Failures[1],
		"a transport failure is a retry, not a repair")
}

// End to end against a local server speaking OpenAI's Chat Completions: a
// reply cut off at max_tokens (finish_reason "length") is repaired with a
// correction that names the cause, and the schema goes out as
// response_format json_schema.
func TestOpenAITruncatedThenValid(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	truncated := `{"title": "Dune", "author": "Frank Her`
	var n atomic.Int32
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			body := strings.Replace(providertest.OpenAIChat("gpt-4o-mini", truncated, 20, 12), `"finish_reason":"stop"`, `"finish_reason":"length"`, 1)
			providertest.Reply{Status: 200, Body: body}.ServeHTTP(w, r)
			return
		}
		providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "```json\n"+`{"title": "Dune", "author": "Frank Herbert"}`+"\n```", 40, 15)}.ServeHTTP(w, r)
	}))
	_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  fake: {kind: openai, base_url: %s/v1, timeout: 5s}
actions:
  - name: extract
    provider: fake
    model: gpt-4o-mini
    params: {max_tokens: 12}
    prompt: "Book: {{ .text }}"
    expect: {schema: %s, repair: {max_attempts: 2}}
`, srv.URL, bookSchema), 1, worker.Config{})
	require.EqualValues(t, 1, p.OK)
	r := results["r1"]
	require.Equal(t, map[string]any{"title": "Dune", "author": "Frank Herbert"}, r.Output)
	require.Equal(t, 2, r.Recovery.Attempts)
	require.Equal(t, 1, r.Recovery.Repairs)
	require.Equal(t, "SchemaViolationError: output truncated at max_tokens (finish reason length)", r.Recovery.Failures[0].Error)
	require.Equal(t, broker.Usage{InputTokens: 60, OutputTokens: 27}, r.Usage, "the repair's tokens count too")

	reqs := srv.Requests()
	require.Len(t, reqs, 2)
	type wire struct {
		Messages       []provider.Message `json:"messages"`
		ResponseFormat struct {
			Type       string `json:"type"`
			JSONSchema struct {
				Schema map[string]any `json:"schema"`
			} `json:"json_schema"`
		} `json:"response_format"`
	}
	var first, second wire
	require.NoError(t, json.Unmarshal(reqs[0].Body, &first))
	require.NoError(t, json.Unmarshal(reqs[1].Body, &second))
	require.Equal(t, "/v1/chat/completions", reqs[1].Path)
	require.Equal(t, "json_schema", first.ResponseFormat.Type)
	require.Equal(t, []any{"title", "author"}, first.ResponseFormat.JSONSchema.Schema["required"])
	require.Equal(t, msgs("user", "Book: record 1"), first.Messages)
	require.Equal(t, msgs("user", "Book: record 1", "assistant", truncated, "user",
		"Your previous reply was cut off at the output token limit before the JSON value was complete. "+
			"Reply again with the complete JSON value only, keeping it short enough to fit: no explanation and no code fences."),
		second.Messages)
}

// Exhausted repair: class and reason schema_violation in the DLQ, the
// validation errors and the last output in the diagnostic; the retry
// layers never saw it (one delivery, 1 + max_attempts calls), and under
// return_last the job goes on.
func TestRepairExhaustedDeadLetter(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	counter := testenv.NewCounter()
	bad := "```json\n{\"title\": \"Dune\",\n \"year\": 1965}\n```"
	replies, _ := json.Marshal([]string{bad})
	job, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: {replies: %s}}
actions:
  - name: extract
    provider: sim
    prompt: "Book: {{ .text }}"
    expect: {schema: %s, repair: {max_attempts: 1, on_exhausted: return_last}}
    retry: {max_attempts: 3, backoff: 1ms, on_exhausted: raise, redeliver: {max_deliveries: 3, backoff: 10ms}}
`, replies, bookSchema), 2, worker.Config{NewProvider: counter.New})
	require.NotEqual(t, broker.JobFailed, job.Status, "the repair's on_exhausted decides, not the retry's")
	require.EqualValues(t, 2, p.Failed)
	require.EqualValues(t, 2, p.ByReason["schema_violation"])
	require.Equal(t, 2, counter.Calls("r1"), "one call and one repair; never retried, never redelivered")

	wantDiag := "failed permanently: SchemaViolationError: 1 schema error: at (root): missing property 'author' " +
		"(after 2 attempts, 1 delivery: [1] SchemaViolationError: 1 schema error: at (root): missing property 'author'; " +
		"[2] SchemaViolationError: 1 schema error: at (root): missing property 'author'); " +
		"last output: ```json {\"title\": \"Dune\", \"year\": 1965} ```"
	r := results["r1"]
	require.Equal(t, broker.StatusFailed, r.Status)
	require.Equal(t, "schema_violation", r.Reason)
	require.Equal(t, &broker.ResultError{Class: "schema_violation", Retryable: false, Message: wantDiag}, r.Error)
	require.Equal(t, 2, r.Recovery.Attempts)
	require.Equal(t, 1, r.Recovery.Repairs)
	require.Equal(t, 1, r.Recovery.Deliveries)

	es := dlq(t, b, job.ID)
	require.Len(t, es, 2)
	stream, err := b.JS.Stream(context.Background(), broker.StreamDLQ)
	require.NoError(t, err)
	for _, e := range es {
		raw, err := stream.GetMsg(context.Background(), e.Seq)
		require.NoError(t, err)
		h := raw.Header
		require.Equal(t, "schema_violation", h.Get("Jetpool-Reason"))
		require.Equal(t, "schema_violation", h.Get("Jetpool-Error-Class"))
		require.Equal(t, "2", h.Get("Jetpool-Attempts"))
		require.Equal(t, "1", h.Get("Jetpool-Deliveries"))
		if e.Record == "r1" {
			require.Equal(t, wantDiag, h.Get("Jetpool-Error"))
		}
	}
}

// on_exhausted: raise in the repair block fails the job when repairs run
// out, even though the retry block says return_last.
func TestRepairRaiseFailsTheJob(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	job, p, _ := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: {replies: ["not json"]}}
actions:
  - name: extract
    provider: sim
    prompt: "Book: {{ .text }}"
    expect: {schema: %s, repair: {max_attempts: 1, on_exhausted: raise}}
    retry: {max_attempts: 2, backoff: 1ms}
`, bookSchema), 5, worker.Config{Concurrency: 1})
	require.Equal(t, broker.JobFailed, job.Status)
	require.Contains(t, job.Reason, "failed permanently: SchemaViolationError: no JSON value in the output")
	require.EqualValues(t, 5, p.Done)
	require.EqualValues(t, 1, p.ByReason["schema_violation"])
	require.EqualValues(t, 4, p.ByReason["job_failed"])
}

// max_calls caps a record's calls across retries, deliveries and repairs,
// and says so.
func TestMaxCalls(t *testing.T) {
	t.Parallel()
	t.Run("across retries and deliveries", func(t *testing.T) {
		t.Parallel()
		b := testenv.Broker(t)
		counter := testenv.NewCounter()
		job, p, results := expectJob(t, b, `
providers:
  sim: {kind: sim, sim: {fail_first: 100, fail_class: server}}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
    max_calls: 3
    retry: {max_attempts: 2, backoff: 1ms, redeliver: {max_deliveries: 5, backoff: 10ms}}
`, 1, worker.Config{NewProvider: counter.New})
		require.EqualValues(t, 1, p.ByReason["max_calls"])
		require.Equal(t, 3, counter.Calls("r1"), "2 calls in delivery 1, then 1 left for delivery 2")
		r := results["r1"]
		require.Equal(t, "max_calls", r.Reason)
		require.Equal(t, "server", r.Error.Class)
		require.Equal(t, "stopped at max_calls 3: failed after 3 attempts (2 deliveries): [1] ServerError: 503 service unavailable; "+
			"[2] ServerError: 503 service unavailable; [3] ServerError: 503 service unavailable", r.Error.Message)
		require.Equal(t, 3, r.Recovery.Attempts)
		require.Equal(t, 2, r.Recovery.Deliveries)
		es := dlq(t, b, job.ID)
		require.Len(t, es, 1)
		require.Equal(t, retry.ReasonMaxCalls, es[0].Reason)
		require.Equal(t, retry.ClassServer, es[0].Class)
	})
	t.Run("across retries and repairs", func(t *testing.T) {
		t.Parallel()
		b := testenv.Broker(t)
		counter := testenv.NewCounter()
		var n atomic.Int32
		counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
			if n.Add(1) == 1 {
				return provider.Response{}, &retry.Error{Class: retry.ClassServer, Status: 503, Message: "503 overloaded"}
			}
			return next()
		}
		_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: {replies: ["{\"title\": \"Dune\"}"]}}
actions:
  - name: act
    provider: sim
    prompt: "do {{ .text }}"
    max_calls: 3
    expect: {schema: %s, repair: {max_attempts: 5}}
    retry: {max_attempts: 3, backoff: 1ms}
`, bookSchema), 1, worker.Config{NewProvider: counter.New})
		require.EqualValues(t, 1, p.ByReason["max_calls"])
		require.Equal(t, 3, counter.Calls("r1"), "a server error, the answer, one repair: 3 calls")
		r := results["r1"]
		require.Equal(t, "schema_violation", r.Error.Class)
		require.Equal(t, "stopped at max_calls 3: failed after 3 attempts (1 delivery): [1] ServerError: 503 overloaded; "+
			"[2] SchemaViolationError: 1 schema error: at (root): missing property 'author'; "+
			"[3] SchemaViolationError: 1 schema error: at (root): missing property 'author'; "+
			`last output: {"title": "Dune"}`, r.Error.Message)
		require.Equal(t, 1, r.Recovery.Repairs)
	})
}

// format: json without a schema asks only for parseable JSON, and does not
// ask for JSON mode unless the prompt mentions JSON (OpenAI's json_object
// mode refuses such prompts); format: text checks nothing.
func TestFormatOnly(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	var tr transcript
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		tr.add(req)
		return next()
	}
	_, p, results := expectJob(t, b, `
providers:
  sim: {kind: sim, sim: {reply: "Result: [1, 2]. Done."}}
  text: {kind: sim, sim: {reply: "plain {{.Prompt}}"}}
actions:
  - name: plain_json
    provider: sim
    prompt: "list for {{ .text }}"
    expect: {format: json}
  - name: asks_json
    provider: sim
    prompt: "JSON list for {{ .text }}"
    expect: {format: json}
  - name: words
    provider: text
    prompt: "words"
    expect: {format: text}
`, 1, worker.Config{NewProvider: counter.New})
	require.EqualValues(t, 1, p.OK)
	r := results["r1"]
	require.Equal(t, []any{float64(1), float64(2)}, r.Outputs["plain_json"])
	require.Equal(t, []any{float64(1), float64(2)}, r.Outputs["asks_json"])
	require.Equal(t, "plain words", r.Output)
	calls := tr.get()
	require.Len(t, calls, 3)
	require.False(t, calls[0].JSON, "no JSON mode for a prompt that never says JSON")
	require.True(t, calls[1].JSON)
	require.False(t, calls[2].JSON)
}

// A repair whose transport error outlasts the session is redelivered like
// any other: the next delivery starts the conversation afresh, and the
// record's attempts and repairs count both deliveries.
func TestRepairRedelivered(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	var tr transcript
	var n atomic.Int32
	counter := testenv.NewCounter()
	counter.Wrap = func(req provider.Request, next func() (provider.Response, error)) (provider.Response, error) {
		tr.add(req)
		if n.Add(1) == 2 {
			return provider.Response{}, &retry.Error{Class: retry.ClassServer, Status: 503, Message: "503 overloaded"}
		}
		return next()
	}
	replies, _ := json.Marshal([]string{`{"title": "Dune"}`, validTrailing})
	_, p, results := expectJob(t, b, fmt.Sprintf(`
providers:
  sim: {kind: sim, sim: {replies: %s}}
actions:
  - name: extract
    provider: sim
    prompt: "Book: {{ .text }}"
    expect: {schema: %s, repair: {max_attempts: 2}}
    retry: {max_attempts: 1, redeliver: {max_deliveries: 2, backoff: 10ms}}
`, replies, bookSchema), 1, worker.Config{NewProvider: counter.New})
	require.EqualValues(t, 1, p.OK)
	calls := tr.get()
	require.Len(t, calls, 3)
	require.Len(t, calls[1].Messages, 3, "delivery 1: the repair")
	require.Equal(t, msgs("user", "Book: record 1"), calls[2].Messages, "delivery 2 starts afresh")
	r := results["r1"]
	require.Equal(t, map[string]any{"title": "Dune", "author": "Frank Herbert", "year": float64(1965)}, r.Output)
	require.Equal(t, 3, r.Recovery.Attempts)
	require.Equal(t, 2, r.Recovery.Deliveries)
	require.Equal(t, 1, r.Recovery.Repairs)
	require.Equal(t, []string{"schema_violation", "server"}, r.Recovery.Classes)
}
