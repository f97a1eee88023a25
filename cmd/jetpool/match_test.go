package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider/providertest"
)

// countingServer is an OpenAI-wire endpoint that answers every call and
// counts them, by model and by the record text in the prompt (<<…>>).
type countingServer struct {
	*providertest.Server
	mu    sync.Mutex
	calls map[string]int
	n     int
}

func newCountingServer(t *testing.T) *countingServer {
	cs := &countingServer{calls: map[string]int{}}
	text := regexp.MustCompile(`<<(.*?)>>`)
	cs.Server = providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			_, _ = io.WriteString(w, providertest.OpenAIModels("first", "second"))
			return
		}
		var body struct {
			Model    string
			Messages []struct{ Content string }
		}
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		tx := ""
		if m := text.FindStringSubmatch(body.Messages[0].Content); m != nil {
			tx = m[1]
		}
		cs.mu.Lock()
		cs.calls[body.Model+"/"+tx]++
		cs.n++
		cs.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, providertest.OpenAIChat(body.Model, "answer to "+tx, 5, 2))
	}))
	return cs
}

func (cs *countingServer) total() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.n
}

// twoActions is a two-action workflow on the counting server.
func twoActions(url string) string {
	return fmt.Sprintf(`
providers:
  local: {kind: openai, base_url: %s, api_key_env: LOCAL_TEST_KEY}
defaults:
  provider: local
actions:
  - name: first
    model: first
    prompt: "First <<{{ .text }}>>"
  - name: second
    model: second
    prompt: "Second <<{{ .text }}>> after {{ .first }}"
`, url)
}

// writeTexts writes the records of ids (r<i>) whose text is "record i", with the
// text of those in edit replaced, to name in dir.
func writeTexts(t *testing.T, dir, name string, ids []int, edit map[int]string) string {
	t.Helper()
	var sb strings.Builder
	for _, i := range ids {
		tx := fmt.Sprintf("record %d", i)
		if e, ok := edit[i]; ok {
			tx = e
		}
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":%q}\n", i, tx)
	}
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(sb.String()), 0o600))
	return p
}

func span(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

var jobLine = regexp.MustCompile(`job (\S+): (\d+) records dispatched`)

// An edited input, the same command run again: only the new and changed
// records are called, under the job that ran the input before, which the
// run names; the results of records the input lost are kept. Varied over
// the number of records, changed, added and removed.
func TestEditedInputRunsUnderItsJob(t *testing.T) {
	for _, tc := range []struct{ n, changed, added, removed int }{
		{n: 60, changed: 3},
		{n: 200, changed: 5, added: 7},
		{n: 90, added: 4, removed: 9},
		{n: 40, changed: 10, removed: 5},
		{n: 30, changed: 1, added: 1, removed: 1},
	} {
		t.Run(fmt.Sprintf("%d records, %d changed, %d added, %d removed", tc.n, tc.changed, tc.added, tc.removed), func(t *testing.T) {
			dir := setEnv(t)
			t.Setenv("LOCAL_TEST_KEY", "sk-local")
			cs := newCountingServer(t)
			wf := filepath.Join(dir, "wf.yaml")
			require.NoError(t, os.WriteFile(wf, []byte(twoActions(cs.URL+"/v1")), 0o600))
			in := writeTexts(t, dir, "records.jsonl", span(1, tc.n), nil)
			out := filepath.Join(dir, "results.jsonl")

			code, stdout, stderr := jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress")
			require.Equal(t, 0, code, stdout+stderr)
			require.Equal(t, 2*tc.n, cs.total())
			m := jobLine.FindStringSubmatch(stderr)
			require.NotNil(t, m, stderr)
			job := m[1]

			// The same file, edited: changed records at the start, removed
			// ones at the end, added ones after.
			edit := map[int]string{}
			for i := 1; i <= tc.changed; i++ {
				edit[i] = fmt.Sprintf("record %d, fixed", i)
			}
			ids := append(span(1, tc.n-tc.removed), span(tc.n+1, tc.n+tc.added)...)
			writeTexts(t, dir, "records.jsonl", ids, edit)
			before := cs.total()
			code, stdout, stderr = jetpool(t, "run", wf, "--input", in, "--output", out, "--no-progress")
			require.Equal(t, 0, code, stdout+stderr)
			require.Equal(t, 2*(tc.changed+tc.added), cs.total()-before, "two actions for each new or changed record, nothing else: %s", stderr)
			require.Contains(t, stderr, "job "+job+" (created ")
			require.Contains(t, stderr, "runs this workflow and already has records of "+in)
			require.Contains(t, stderr, "--new-job starts a new job")
			require.Contains(t, stderr, fmt.Sprintf("job %s: the input changed: %d new and %d changed records dispatched, %d unchanged kept",
				job, tc.added, tc.changed, tc.n-tc.changed-tc.removed))
			if tc.removed > 0 {
				require.Contains(t, stderr, fmt.Sprintf("%s of the job not in %s keep their results", plural(int64(tc.removed), "record"), in))
			}
			results := readTyped(t, out)
			require.Len(t, results, tc.n+tc.added, "the job's records: the input's, and those it lost")
			for i := 1; i <= tc.changed; i++ {
				r := results[fmt.Sprintf("r%d", i)]
				require.Equal(t, fmt.Sprintf("answer to record %d, fixed", i), r.Output)
			}
			for id, r := range results {
				require.Equal(t, "ok", r.Status, id)
			}

			// Run again: nothing changed, nothing called.
			before = cs.total()
			code, stdout, stderr = jetpool(t, "run", wf, "--input", in, "--no-progress")
			require.Equal(t, 0, code, stdout+stderr)
			require.Equal(t, before, cs.total(), stderr)
		})
	}
}

// Back to an earlier input, a fresh job on request, and two jobs that
// match: refused with the command for each, and nothing called.
func TestEditedInputJobChoices(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("LOCAL_TEST_KEY", "sk-local")
	cs := newCountingServer(t)
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(twoActions(cs.URL+"/v1")), 0o600))
	v1 := writeTexts(t, dir, "v1.jsonl", span(1, 20), nil)
	v2 := writeTexts(t, dir, "v2.jsonl", span(1, 20), map[int]string{4: "four", 9: "nine"})

	code, stdout, stderr := jetpool(t, "run", wf, "--input", v1, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	job := jobLine.FindStringSubmatch(stderr)[1]
	code, stdout, stderr = jetpool(t, "run", wf, "--input", v2, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.Equal(t, 40+4, cs.total(), "another file, the same records: two changed")
	require.Contains(t, stderr, "job "+job+": the input changed: 0 new and 2 changed records dispatched, 18 unchanged kept")

	// v1 again: its own job (its id derives from v1), whose input is v2
	// now: the two records go back, paid for again.
	code, stdout, stderr = jetpool(t, "run", wf, "--input", v1, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.Equal(t, 44+4, cs.total(), stderr)
	require.Contains(t, stderr, "job "+job+": the input changed: 0 new and 2 changed records dispatched")

	// --new-job: every record paid again, in a job of its own.
	code, stdout, stderr = jetpool(t, "run", wf, "--input", v2, "--no-progress", "--new-job")
	require.Equal(t, 0, code, stdout+stderr)
	require.Equal(t, 48+40, cs.total())
	fresh := jobLine.FindStringSubmatch(stderr)[1]
	require.NotEqual(t, job, fresh)

	// An edit now matches two jobs: refused, each command given, nothing called.
	v3 := writeTexts(t, dir, "v3.jsonl", span(1, 21), nil)
	code, stdout, stderr = jetpool(t, "run", wf, "--input", v3, "--no-progress")
	require.Equal(t, exitUsage, code, stdout+stderr)
	require.Contains(t, stderr, "2 jobs run "+wf+" and have records of "+v3+": nothing was published")
	require.Contains(t, stderr, "jetpool run "+wf+" --input "+v3+" --job "+job)
	require.Contains(t, stderr, "jetpool run "+wf+" --input "+v3+" --job "+fresh)
	require.Contains(t, stderr, "jetpool run "+wf+" --input "+v3+" --new-job")
	require.Equal(t, 88, cs.total())

	// --job picks one: one new record.
	code, stdout, stderr = jetpool(t, "run", wf, "--input", v3, "--no-progress", "--job", fresh)
	require.Equal(t, 0, code, stdout+stderr)
	require.Equal(t, 88+2+2*2, cs.total(), "r21 new; r4 and r9 back to v1's text: %s", stderr)

	// --new-job and --job together: a usage error.
	code, _, stderr = jetpool(t, "run", wf, "--input", v3, "--no-progress", "--new-job", "--job", job)
	require.Equal(t, exitUsage, code, stderr)
	require.Contains(t, stderr, "--new-job and --job")
}

// dispatch, with no worker: an edit of the input dispatched again while
// the job still has records queued is refused, saying how to go on; the
// edit of a job that ran publishes only the new and changed records.
func TestDispatchEditedInput(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("LOCAL_TEST_KEY", "sk-local")
	cs := newCountingServer(t)
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(twoActions(cs.URL+"/v1")), 0o600))
	in := writeTexts(t, dir, "in.jsonl", span(1, 10), nil)
	code, stdout, stderr := jetpool(t, "dispatch", wf, "--input", in)
	require.Equal(t, 0, code, stdout+stderr)
	job := strings.TrimSpace(stdout)

	writeTexts(t, dir, "in.jsonl", span(1, 11), map[int]string{2: "two"})
	code, stdout, stderr = jetpool(t, "dispatch", wf, "--input", in)
	require.NotEqual(t, 0, code, stdout+stderr)
	require.Contains(t, stderr, "job "+job+" still has 10 records queued or in flight")
	require.Contains(t, stderr, "jetpool dispatch "+wf+" --input "+in+" --new-job")
	require.Zero(t, cs.total())

	// The input as dispatched: run resumes the job and works it. Then the
	// edit is dispatched into it.
	writeTexts(t, dir, "in.jsonl", span(1, 10), nil)
	code, stdout, stderr = jetpool(t, "run", wf, "--input", in, "--no-progress")
	require.Equal(t, 0, code, stdout+stderr)
	require.Equal(t, 20, cs.total())
	writeTexts(t, dir, "in.jsonl", span(1, 11), map[int]string{2: "two"})
	code, stdout, stderr = jetpool(t, "dispatch", wf, "--input", in)
	require.Equal(t, 0, code, stdout+stderr)
	require.Equal(t, job, strings.TrimSpace(stdout))
	require.Contains(t, stderr, "job "+job+": the input changed: 1 new and 1 changed records dispatched, 9 unchanged kept")
	code, stdout, _ = jetpool(t, "status", job, "--json")
	require.Equal(t, 0, code)
	var st struct {
		Queued int64 `json:"queued"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &st))
	require.EqualValues(t, 2, st.Queued, stdout)
}
