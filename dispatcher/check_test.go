package dispatcher_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

const pipelineWorkflow = `
providers:
  sim: {kind: sim}
defaults: {provider: sim}
actions:
  - name: classify
    prompt: "Classify {{ .text }}"
    expect: {schema: {type: object, properties: {sentiment: {type: string}}}}
  - name: summarise
    prompt: "Summarise {{ .text }} ({{ .clasify.sentiment }}) for {{ .audience }}"
`

// A reference to neither a record field nor an earlier action is refused
// at the prompt's line, before anything is published; a field some records
// lack refuses those lines, for whichever action reads it.
func TestPipelineReferencesAreChecked(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, pipelineWorkflow)
	in := testenv.WriteFile(t, "in.jsonl", "{\"id\":\"1\",\"text\":\"a\",\"audience\":\"kids\"}\n{\"id\":\"2\",\"text\":\"b\"}\n")
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	_, err := d.Dispatch(context.Background(), wf, dispatcher.Options{Input: in, JobID: "typo"})
	require.Error(t, err)
	errs := workflow.Errors(err)
	require.Len(t, errs, 1, "only the typo: %v", err)
	require.Equal(t, 10, errs[0].Line)
	require.Contains(t, err.Error(), `workflow.yaml:10: actions[1].prompt: reads .clasify.sentiment: no record field and no earlier action is called "clasify" (did you mean classify?)`)
	n, err := b.Count(context.Background(), broker.StreamWork, "jetpool.work.>")
	require.NoError(t, err)
	require.Zero(t, n, "nothing published")

	fixed := testenv.Workflow(t, strings.Replace(pipelineWorkflow, ".clasify.", ".classify.", 1))
	_, _, bad, err := dispatcher.Check(fixed, dispatcher.Options{Input: in})
	require.NoError(t, err)
	require.Len(t, bad, 1)
	require.Contains(t, bad[0].Error(), `in.jsonl:2: action "summarise": prompt template uses field "audience", which the record lacks (it has: id, text)`)
}

func TestDuplicateIDs(t *testing.T) {
	t.Parallel()
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.WriteFile(t, "in.jsonl", strings.Join([]string{
		`{"id":"a","text":"1"}`,
		`{"id":1,"text":"2"}`,
		`{"id":"e","text":"3"}`,
		`{"id":" e ","text":"4"}`,
		`{"id":"a","text":"5"}`,
		`{"id":"1","text":"6"}`,
	}, "\n")+"\n")
	c, err := dispatcher.CheckInput(wf, dispatcher.Options{Input: in})
	require.NoError(t, err)
	require.Empty(t, c.Bad)
	var got []string
	for _, e := range c.DupErrs {
		got = append(got, e.Error())
	}
	require.Equal(t, []string{
		in + `:5: id "a" already used at line 1`,
		in + `:6: id "1" already used at line 2 (there as 1, here as "1": ids are compared as text)`,
	}, got, `" e " and "e" are two ids`)
	require.EqualValues(t, 4, c.Records)
	msg := (&dispatcher.DuplicateIDsError{Errs: c.DupErrs}).Error()
	require.Contains(t, msg, "2 record ids used more than once, nothing published")
	require.Contains(t, msg, "--duplicates first")

	// Check refuses them with the bad lines, --skip-bad or not.
	_, _, bad, err := dispatcher.Check(wf, dispatcher.Options{Input: in, SkipBad: true})
	require.NoError(t, err)
	require.Len(t, bad, 2)

	// --duplicates first publishes the first record of each id.
	b := testenv.Broker(t)
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{Duplicates: dispatcher.DuplicatesFirst, JobID: "dups"})
	require.EqualValues(t, 4, res.Published)
	require.EqualValues(t, 2, res.Skipped)
	require.Zero(t, res.Duplicates, "no resume wording for duplicates in the input")
	require.EqualValues(t, 4, res.Job.Total)

	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	_, err = d.Dispatch(context.Background(), wf, dispatcher.Options{Input: in, JobID: "dups-refused"})
	var de *dispatcher.DuplicateIDsError
	require.ErrorAs(t, err, &de)
}

// BenchmarkCheckInput1M is the validation pass over 1M records with unique
// ids, and the peak RSS of the process after it (maxrss_MiB): the
// duplicate check holds an 8-byte hash per record, not the ids.
//
//	go test ./dispatcher -run '^$' -bench CheckInput1M -benchtime 1x
func BenchmarkCheckInput1M(b *testing.B) {
	const n = 1_000_000
	dir := b.TempDir()
	path := filepath.Join(dir, "in.jsonl")
	f, err := os.Create(path)
	require.NoError(b, err)
	pad := strings.Repeat("x", 200)
	for i := range n {
		fmt.Fprintf(f, "{\"id\":\"rec-%08d\",\"text\":\"%s\"}\n", i, pad)
	}
	require.NoError(b, f.Close())
	wf, err := workflow.Parse(filepath.Join(dir, "workflow.yaml"), []byte(simWorkflow))
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		c, err := dispatcher.CheckInput(wf, dispatcher.Options{Input: path})
		require.NoError(b, err)
		require.EqualValues(b, n, c.Records)
	}
	b.StopTimer()
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	b.ReportMetric(float64(ru.Maxrss)/1024, "maxrss_MiB")
}

// An input fix dispatches only what changed: an unchanged record keeps its
// result and is not called; a fixed bad line (one with an id, one without)
// runs, and the bad_input failures it leaves behind are removed, so the job
// still counts 3 records, all ok.
func TestRefreshRunsOnlyNewAndChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.WriteFile(t, "in.jsonl", "{\"id\":\"r1\",\"text\":\"a\"}\n{broken\n{\"id\":\"r3\",\"body\":\"c\"}\n")
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{SkipBad: true, JobID: "fix"})
	require.EqualValues(t, 2, res.BadLines)
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 4, NewProvider: counter.New})
	_, p := testenv.WaitFinished(t, b, "fix", 30*time.Second)
	require.EqualValues(t, 1, p.OK)
	require.EqualValues(t, 2, p.Failed)

	fixed := testenv.WriteFile(t, "fixed.jsonl", "{\"id\":\"r1\",\"text\":\"a\"}\n{\"id\":\"r2\",\"text\":\"b\"}\n{\"id\":\"r3\",\"text\":\"c\"}\n")
	c, err := dispatcher.CheckInput(wf, dispatcher.Options{Input: fixed, IDField: "id"})
	require.NoError(t, err)
	opts := dispatcher.Options{Input: fixed, IDField: "id"}
	c.Apply(&opts)
	j, _, err := b.GetJob(ctx, "fix")
	require.NoError(t, err)
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	r, err := d.Refresh(ctx, wf, j, opts)
	require.NoError(t, err)
	require.Equal(t, [4]int64{1, 1, 1, 1}, [4]int64{r.New, r.Changed, r.Unchanged, r.Fixed}, "r2 new, r3 changed, r1 kept, line 2 fixed")
	require.EqualValues(t, 3, r.Job.Total)
	job, p := testenv.WaitFinished(t, b, "fix", 30*time.Second)
	require.EqualValues(t, 3, p.OK)
	require.Zero(t, p.Failed, "the bad_input failures are gone")
	require.Equal(t, 1, counter.Calls("r1"), "unchanged: not called again")
	require.Equal(t, 1, counter.Calls("r2"))
	require.Equal(t, 1, counter.Calls("r3"))
	n, err := b.Count(ctx, broker.StreamDLQ, broker.DLQFilter("fix", ""))
	require.NoError(t, err)
	require.Zero(t, n, "their dead letters too")
	require.Equal(t, c.ContentHash, job.InputHash)

	// The same input again: nothing to do.
	r, err = d.Refresh(ctx, wf, job, opts)
	require.NoError(t, err)
	require.EqualValues(t, 3, r.Unchanged)
	require.Zero(t, r.New+r.Changed+r.Fixed)
}

// A result an earlier jetpool stored keeps the record's sum as 8 bytes of
// SHA-256: an unchanged record still reads as unchanged, and a changed one
// as changed, so an input fix after an upgrade pays for nothing twice.
func TestRefreshReadsLegacySums(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.WriteFile(t, "in.jsonl", "{\"id\":\"r1\",\"text\":\"a\"}\n{\"id\":\"r2\",\"text\":\"b\"}\n")
	testenv.Dispatch(t, b, wf, in, dispatcher.Options{JobID: "legacy"})
	counter := testenv.NewCounter()
	testenv.Pool(t, b, worker.Config{Concurrency: 2, NewProvider: counter.New})
	job, _ := testenv.WaitFinished(t, b, "legacy", 30*time.Second)
	for id, line := range map[string]string{"r1": `{"id":"r1","text":"a"}`, "r2": `{"id":"r2","text":"b"}`} {
		last, _, err := b.LastOutcome(ctx, "legacy", "summarize", id)
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(line))
		last.RecordSum = hex.EncodeToString(sum[:8])
		require.NoError(t, b.WriteResult(ctx, last))
	}
	fixed := testenv.WriteFile(t, "fixed.jsonl", "{\"id\":\"r1\",\"text\":\"a\"}\n{\"id\":\"r2\",\"text\":\"B\"}\n")
	opts := dispatcher.Options{Input: fixed}
	c, err := dispatcher.CheckInput(wf, opts)
	require.NoError(t, err)
	c.Apply(&opts)
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	r, err := d.Refresh(ctx, wf, job, opts)
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 1}, [2]int64{r.Unchanged, r.Changed}, "r1 kept, r2 changed")
	testenv.WaitFinished(t, b, "legacy", 30*time.Second)
	require.Equal(t, 1, counter.Calls("r1"), "unchanged: not called again")
	require.Equal(t, 2, counter.Calls("r2"))
}
