package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider/providertest"
)

// pipelineServer is a local OpenAI-wire server for a two-action pipeline
// (classify, then summarise), counting the calls it gets by model and
// record text. Model "broken" is refused as unknown (a permanent 400);
// classify answers each record's first call with a 503 when the record's
// text holds "flaky", and its first answer with JSON that fails the schema
// when it holds "sloppy" (a repair).
type pipelineServer struct {
	*providertest.Server
	mu    sync.Mutex
	calls map[string]int // "model/text"
}

func newPipelineServer(t *testing.T) *pipelineServer {
	ps := &pipelineServer{calls: map[string]int{}}
	ps.Server = providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, providertest.OpenAIModels("classifier", "summariser", "broken"))
			return
		}
		var body struct {
			Model    string
			Messages []struct{ Content string }
		}
		raw, _ := io.ReadAll(r.Body)
		require.NoError(t, json.Unmarshal(raw, &body))
		text := regexp.MustCompile(`<<(.*?)>>`).FindStringSubmatch(body.Messages[0].Content)[1]
		ps.mu.Lock()
		ps.calls[body.Model+"/"+text]++
		n := ps.calls[body.Model+"/"+text]
		ps.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case body.Model == "broken":
			w.WriteHeader(400)
			_, _ = io.WriteString(w, providertest.OpenAIError("The model `broken` does not exist", "invalid_request_error", "model_not_found"))
		case body.Model == "classifier" && strings.Contains(text, "flaky") && n == 1:
			w.WriteHeader(503)
			_, _ = io.WriteString(w, providertest.OpenAIError("The server is overloaded", "server_error", ""))
		case body.Model == "classifier" && strings.Contains(text, "sloppy") && n == 1:
			_, _ = io.WriteString(w, providertest.OpenAIChat(body.Model, `{"mood": "?"}`, 7, 2))
		case body.Model == "classifier":
			_, _ = io.WriteString(w, providertest.OpenAIChat(body.Model, `{"sentiment": "pos"}`, 7, 2))
		default:
			_, _ = io.WriteString(w, providertest.OpenAIChat(body.Model, "summary of "+text, 11, 5))
		}
	}))
	return ps
}

func (ps *pipelineServer) count(model, text string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.calls[model+"/"+text]
}

func (ps *pipelineServer) total() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, c := range ps.calls {
		n += c
	}
	return n
}

// pipelineYAML is the pipeline, with summarise on model and the reference
// to classify's output spelt ref.
func pipelineYAML(url, model, ref string) string {
	return fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s, api_key_env: LOCAL_TEST_KEY}
defaults:
  provider: local
  retry: {max_attempts: 3, backoff: 10ms}
actions:
  - name: classify
    model: classifier
    prompt: "Classify <<{{ .text }}>>"
    expect:
      schema: {type: object, required: [sentiment], properties: {sentiment: {type: string}}}
      repair: {max_attempts: 1}
  - name: summarise
    model: %s
    prompt: "Summarise <<{{ .text }}>> as {{ %s }}"
`, url, model, ref)
}

// readTyped reads a results file as broker.Result lines.
func readTyped(t *testing.T, path string) map[string]broker.Result {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]broker.Result{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var r broker.Result
		require.NoError(t, json.Unmarshal([]byte(line), &r))
		out[r.ID] = r
	}
	return out
}

// sums adds up what the results say: calls, calls beyond the first of
// each record's action, tokens, ok records that took extra calls.
func sums(t *testing.T, results map[string]broker.Result) (calls, extra, in, out, recovered int) {
	for _, r := range results {
		byAction := map[string]int{}
		for _, a := range r.Actions {
			calls += a.Calls
			in += a.Usage.InputTokens
			out += a.Usage.OutputTokens
			byAction[a.Action] += a.Calls
		}
		own := 0
		for _, n := range byAction {
			own += max(n-1, 0)
		}
		extra += own
		if r.Status == broker.StatusOK && own > 0 {
			recovered++
		}
		require.Equal(t, r.Usage, r.Totals.Usage, "usage is the record's")
	}
	return
}

var summaryRE = regexp.MustCompile(`calls: (\d+) \((\d+) extra: retries, repairs, replays\), attempts: \d+, records recovered: (\d+);[^\n]*\n  tokens: (\d+) in, (\d+) out`)

// requireSummaryAddsUp checks the summary's figures against the sum over
// the results.
func requireSummaryAddsUp(t *testing.T, stdout string, results map[string]broker.Result) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(stdout)
	require.NotNil(t, m, stdout)
	calls, extra, in, out, recovered := sums(t, results)
	for i, want := range []int{calls, extra, recovered, in, out} {
		got, _ := strconv.Atoi(m[i+1])
		require.Equal(t, want, got, "summary figure %d of %q", i, m[0])
	}
}

// Break action 2 through its endpoint, fix it, `retry --workflow`: every
// record ends ok, action 1 paid once per record, and the summary's calls,
// extra calls, recovered records and tokens are the sums over the results
// (retries, a repair and a replay included). Then an input fix re-runs only
// the new and the changed record.
func TestFixAndReplayPipeline(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("LOCAL_TEST_KEY", "sk-local")
	ps := newPipelineServer(t)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	texts := []string{"calm", "flaky one", "sloppy one", "plain", "quiet"}
	var sb strings.Builder
	for i, tx := range texts {
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":%q}\n", i, tx)
	}
	in := write("in.jsonl", sb.String())
	out := filepath.Join(dir, "results.jsonl")

	// The typo costs nothing: refused at its line, 0 calls.
	typo := write("typo.yaml", pipelineYAML(ps.URL, "summariser", ".clasify.sentiment"))
	code, stdout, stderr := jetpool(t, "run", typo, "--input", in, "--no-progress")
	require.Equal(t, exitUsage, code, stdout+stderr)
	require.Contains(t, stderr, `typo.yaml:16: actions[1].prompt: reads .clasify.sentiment: no record field and no earlier action is called "clasify" (did you mean classify?)`)
	require.Zero(t, ps.total(), "no call made")

	// Action 2 broken at its endpoint: every record fails there, exit 4.
	broken := write("broken.yaml", pipelineYAML(ps.URL, "broken", ".classify.sentiment"))
	code, stdout, stderr = jetpool(t, "run", broken, "--input", in, "--output", out, "--no-progress", "--job", "pipe")
	require.Equal(t, exitFailedRecords, code, stdout+stderr)
	require.Contains(t, stdout, "5 records, 0 succeeded, 5 failed")
	first := readTyped(t, out)
	for _, r := range first {
		require.Equal(t, "summarise", r.Action)
		require.Equal(t, "permanent", r.Reason)
		require.Len(t, r.Actions, 2)
	}
	requireSummaryAddsUp(t, stdout, first)
	calls, _, _, _, _ := sums(t, first)
	require.Equal(t, ps.total(), calls, "the results count every call the server got")

	// run with the fixed workflow on the old job is refused with the command to use.
	fixed := write("fixed.yaml", pipelineYAML(ps.URL, "summariser", ".classify.sentiment"))
	code, _, stderr = jetpool(t, "run", fixed, "--input", in, "--no-progress", "--job", "pipe")
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "jetpool retry --job pipe --workflow "+fixed)

	// Fix and replay: all ok, action 1 paid once per record.
	code, stdout, stderr = jetpool(t, "retry", "--workflow", fixed, "--output", out, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.Contains(t, stderr, "revision 2 of its workflow is "+fixed)
	require.Contains(t, stdout, "5 records, 5 succeeded, 0 failed")
	for _, tx := range texts {
		want := 1
		if strings.Contains(tx, "flaky") || strings.Contains(tx, "sloppy") {
			want = 2 // the 503's retry, the repair: in the first run only
		}
		require.Equal(t, want, ps.count("classifier", tx), tx)
		require.Equal(t, 1, ps.count("broken", tx), tx)
		require.Equal(t, 1, ps.count("summariser", tx), tx)
	}
	final := readTyped(t, out)
	for id, r := range final {
		require.Equal(t, broker.StatusOK, r.Status, id)
		require.Equal(t, 2, r.Revision, id)
		require.Len(t, r.Actions, 3, "classify, the failed summarise, the replayed one: %s", id)
		require.Equal(t, []int{1, 1, 2}, []int{r.Actions[0].Revision, r.Actions[1].Revision, r.Actions[2].Revision})
		require.Equal(t, broker.StatusFailed, r.Actions[1].Status)
	}
	requireSummaryAddsUp(t, stdout, final)
	calls, extra, in2, out2, recovered := sums(t, final)
	require.Equal(t, ps.total(), calls)
	require.Equal(t, 5+2, extra, "each replayed summarise, the 503 and the repair")
	require.Equal(t, 5, recovered)
	require.Equal(t, 5*7+5*11+7, in2, "tokens of every answer, the repaired one's included")
	require.Equal(t, 5*2+5*5+2, out2)

	// An input fix: one record changed, one new; only they run.
	texts2 := append(append([]string(nil), texts...), "brand new")
	texts2[3] = "plain, fixed"
	sb.Reset()
	for i, tx := range texts2 {
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":%q}\n", i, tx)
	}
	in2file := write("in2.jsonl", sb.String())
	before := ps.total()
	code, stdout, stderr = jetpool(t, "run", fixed, "--input", in2file, "--output", out, "--no-progress", "--job", "pipe")
	require.Equal(t, 0, code, stdout+stderr)
	require.Contains(t, stderr, "the input changed: 1 new and 1 changed records dispatched, 4 unchanged kept")
	require.Contains(t, stdout, "6 records, 6 succeeded, 0 failed")
	require.Equal(t, before+4, ps.total(), "two actions for each of the two records")
	require.Equal(t, 1, ps.count("classifier", "plain, fixed"))
	require.Equal(t, 1, ps.count("summariser", "brand new"))
	requireSummaryAddsUp(t, stdout, readTyped(t, out))

	code, stdout, _ = jetpool(t, "status", "pipe", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, `"revision": 2`)
}
