package dispatcher_test

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
	"github.com/jetpool/jetpool/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const simWorkflow = `
providers:
  sim: {kind: sim}
actions:
  - name: summarize
    provider: sim
    prompt: "Summarize {{ .text }}"
`

func TestReadJSONLAndCSV(t *testing.T) {
	t.Parallel()
	p := testenv.WriteFile(t, "in.jsonl", "{\"id\":\"a\",\"text\":\"x\"}\n\n{\"text\":\"no id\",\"n\":1.50}\n")
	r, err := dispatcher.Open(p, "", "")
	require.NoError(t, err)
	defer r.Close()
	rec, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, "a", rec.ID)
	require.Equal(t, 1, rec.Line)
	rec, err = r.Next()
	require.NoError(t, err)
	require.Equal(t, 3, rec.Line, "blank lines are skipped but counted")
	require.True(t, strings.HasPrefix(rec.ID, "r"), "no id field: a content hash")
	require.Equal(t, dispatcher.HashID([]byte(`{"text": "no id", "n": 1.50}`)), rec.ID, "the hash is stable and ignores white space")
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF)

	c := testenv.WriteFile(t, "in.csv", "id,text\n1,hello\n2,\"with, comma\"\n")
	r2, err := dispatcher.Open(c, "", "id")
	require.NoError(t, err)
	defer r2.Close()
	rec, err = r2.Next()
	require.NoError(t, err)
	require.Equal(t, "1", rec.ID)
	require.JSONEq(t, `{"id": "1", "text": "hello"}`, string(rec.Raw))
	rec, err = r2.Next()
	require.NoError(t, err)
	require.Equal(t, `"with, comma"`, string(rec.Fields["text"]))
	require.Equal(t, 3, rec.Line)
}

// Top-level fields come out undecoded and exact: nested values, escaped
// keys, the last of duplicate keys (as encoding/json decides).
func TestReadJSONLFields(t *testing.T) {
	t.Parallel()
	p := testenv.WriteFile(t, "in.jsonl", `{"id":"a","o":{"x":[1,{"y":"}"}]},"k\u00e9":true,"d":1,"d":2.5e3,"s":"q\"}"}`+"\n")
	r, err := dispatcher.Open(p, "", "")
	require.NoError(t, err)
	defer r.Close()
	rec, err := r.Next()
	require.NoError(t, err)
	got := map[string]string{}
	for k, v := range rec.Fields {
		got[k] = string(v)
	}
	require.Equal(t, map[string]string{"id": `"a"`, "o": `{"x":[1,{"y":"}"}]}`, "ké": "true", "d": "2.5e3", "s": `"q\"}"`}, got)
}

// Every bad input is refused with file:line: reason, and nothing is published.
func TestBadInputsPublishNothing(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	cases := []struct {
		name, file, content, idField, want string
	}{
		{"malformed JSONL line", "in.jsonl", "{\"id\":\"1\",\"text\":\"a\"}\n{\"id\":\"2\",\"text\":\n", "", "in.jsonl:2: malformed JSON"},
		{"not an object", "in.jsonl", "{\"id\":\"1\",\"text\":\"a\"}\n[1,2]\n", "", "in.jsonl:2: a record must be a JSON object, got an array"},
		{"ragged CSV row", "in.csv", "id,text\n1,a\n2,b,extra\n", "", "in.csv:3: ragged row: 3 fields, the header has 2"},
		{"empty file", "in.jsonl", "", "", "in.jsonl: empty file: no records"},
		{"empty CSV", "in.csv", "", "", "in.csv: empty file"},
		{"template names a missing field", "in.jsonl", "{\"id\":\"1\",\"text\":\"a\"}\n{\"id\":\"2\",\"body\":\"b\"}\n", "",
			"in.jsonl:2: action \"summarize\": prompt template uses field \"text\", which the record lacks (it has: body, id)"},
		{"missing id field", "in.jsonl", "{\"key\":\"1\",\"text\":\"a\"}\n", "key2", "in.jsonl:1: id field \"key2\" is missing"},
		{"empty id", "in.jsonl", "{\"id\":\"\",\"text\":\"a\"}\n", "", "in.jsonl:1: id field \"id\" is empty"},
		{"unknown format", "in.txt", "x", "", "unknown input format"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := testenv.WriteFile(t, tc.file, tc.content)
			d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
			_, err := d.Dispatch(context.Background(), wf, dispatcher.Options{Input: p, IDField: tc.idField, JobID: "bad"})
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// Nothing was published, and no job was created.
	n, err := b.Count(context.Background(), broker.StreamWork, "jetpool.work.>")
	require.NoError(t, err)
	require.Zero(t, n)
	_, _, err = b.GetJob(context.Background(), "bad")
	require.ErrorIs(t, err, broker.ErrJobNotFound)
}

func TestBadInputErrorListsEveryLine(t *testing.T) {
	t.Parallel()
	wf := testenv.Workflow(t, simWorkflow)
	var sb strings.Builder
	for range 30 {
		sb.WriteString("{oops\n")
	}
	p := testenv.WriteFile(t, "in.jsonl", sb.String())
	_, _, bad, err := dispatcher.Check(wf, dispatcher.Options{Input: p})
	require.NoError(t, err)
	require.Len(t, bad, 30)
	msg := (&dispatcher.BadInputError{Errs: bad}).Error()
	require.Contains(t, msg, "30 bad input lines, nothing published")
	require.Contains(t, msg, "in.jsonl:20: malformed JSON")
	require.Contains(t, msg, "… and 10 more")
}

func TestSkipBadDeadLettersBadInput(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	p := testenv.WriteFile(t, "in.jsonl", "{\"id\":\"1\",\"text\":\"a\"}\nnot json\n{\"id\":\"3\",\"text\":\"c\"}\n")
	res := testenv.Dispatch(t, b, wf, p, dispatcher.Options{SkipBad: true, JobID: "skip"})
	require.EqualValues(t, 2, res.Published)
	require.EqualValues(t, 1, res.BadLines)
	require.EqualValues(t, 3, res.Job.Total)
	n, err := b.Count(context.Background(), broker.StreamDLQ, broker.DLQFilter("skip", "summarize"))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	// The counting consumer's pending count follows the stream a moment
	// behind (the server updates it apart from the write).
	testenv.Eventually(t, 10*time.Second, func() bool {
		c, err := b.JobCounts(context.Background(), res.Job, true)
		require.NoError(t, err)
		return c.ByReason["bad_input"] == 1
	}, "the bad line counted as bad_input")
}

func TestDispatchTwicePublishesOnce(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.Records(t, 50)
	// Checked first, as `jetpool dispatch` does a job that exists: the way
	// a resumed dispatch goes (a new one's records carry no Nats-Msg-Id:
	// checking.go).
	first := checkedDispatch(t, b, wf, in, dispatcher.Options{})
	require.EqualValues(t, 50, first.Published)
	require.False(t, first.Existing)
	second := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	require.True(t, second.Existing, "same workflow and input: the same job id, already dispatched")
	require.Equal(t, first.Job.ID, second.Job.ID)
	// Even forced under another dispatch of the same job id, dedupe holds.
	j, _, err := b.GetJob(context.Background(), first.Job.ID)
	require.NoError(t, err)
	_, err = b.UpdateJobSpec(context.Background(), j.ID, func(j *broker.Job) bool { j.Dispatched = false; return true })
	require.NoError(t, err)
	third := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	require.Zero(t, third.Published)
	require.EqualValues(t, 50, third.Duplicates)
	n, err := b.Count(context.Background(), broker.StreamWork, broker.WorkFilter(first.Job.ID))
	require.NoError(t, err)
	require.EqualValues(t, 50, n)
}

func TestJobIDIsStableAndValid(t *testing.T) {
	t.Parallel()
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.Records(t, 3)
	id1, n, _, err := dispatcher.Check(wf, dispatcher.Options{Input: in})
	require.NoError(t, err)
	id2, _, _, err := dispatcher.Check(wf, dispatcher.Options{Input: in})
	require.NoError(t, err)
	require.Equal(t, id1, id2)
	require.EqualValues(t, 3, n)
	require.True(t, broker.ValidName(id1), id1)
	_, _, _, err = dispatcher.Check(wf, dispatcher.Options{Input: in, JobID: "bad id!"})
	require.Error(t, err)
	var le *dispatcher.LineError
	require.False(t, errors.As(err, &le))
}

// The publish pass trusts the validation pass (it reads each line only as
// far as its id): an input changed between the two is not published as if
// it had been checked, it is an error that says so; what was read is
// published, and the job is left to be dispatched again.
func TestInputChangedBetweenPasses(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.WriteFile(t, "in.jsonl", "{\"id\":\"1\",\"text\":\"a\"}\n{\"id\":\"2\",\"text\":\"b\"}\n")
	opts := dispatcher.Options{Input: in, MaxPayload: b.NC.MaxPayload()}
	c, err := dispatcher.CheckInput(wf, opts)
	require.NoError(t, err)
	c.Apply(&opts)
	require.NoError(t, os.WriteFile(in, []byte("{\"id\":\"1\",\"text\":\"a\"}\n{\"id\":\"2\",\"text\":\"B\"}\n"), 0o600))
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	_, err = d.Dispatch(context.Background(), wf, opts)
	require.ErrorContains(t, err, "in.jsonl changed while it was being dispatched")
	j, _, err := b.GetJob(context.Background(), c.JobID)
	require.NoError(t, err)
	require.False(t, j.Dispatched, "dispatched again, it resumes")
}

// Where every write is synced, a dispatch publishes its records in atomic
// batches (one fsync a batch): every record is published once, a dispatch
// resumed over records already stored falls back to one by one for the
// batches that hold them (each deduplicated), and the job runs.
func TestDispatchInAtomicBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testenv.Broker(t, testenv.Options{SyncInterval: "always"})
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.Records(t, 1200) // three batches
	first := checkedDispatch(t, b, wf, in, dispatcher.Options{JobID: "atomic"})
	require.EqualValues(t, 1200, first.Published)
	n, err := b.Count(ctx, broker.StreamWork, broker.WorkFilter("atomic"))
	require.NoError(t, err)
	require.EqualValues(t, 1200, n)

	_, err = b.UpdateJobSpec(ctx, "atomic", func(j *broker.Job) bool { j.Dispatched = false; return true })
	require.NoError(t, err)
	again := testenv.Dispatch(t, b, wf, in, dispatcher.Options{JobID: "atomic"})
	require.Zero(t, again.Published)
	require.EqualValues(t, 1200, again.Duplicates)
	n, err = b.Count(ctx, broker.StreamWork, broker.WorkFilter("atomic"))
	require.NoError(t, err)
	require.EqualValues(t, 1200, n, "each record once")

	testenv.Pool(t, b, worker.Config{Concurrency: 16})
	_, p := testenv.WaitFinished(t, b, "atomic", 60*time.Second)
	require.EqualValues(t, 1200, p.OK)
}

// A dispatch whose batch fails midway (its context is cancelled once the
// first batch is stored, so the second is sent but never committed: what a
// dispatcher killed mid-batch leaves) is resumed by dispatching again: the
// stored batch's records are duplicates, the rest are published, and every
// record is stored and run exactly once.
func TestDispatchAtomicBatchFailedMidwayResumes(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t, testenv.Options{SyncInterval: "always"})
	wf := testenv.Workflow(t, simWorkflow)
	in := testenv.Records(t, 1200) // batches of 500, 500 and 200
	ctx, cancel := context.WithCancel(context.Background())
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	opts := dispatcher.Options{Input: in, IDField: "id", JobID: "midway", MaxPayload: b.NC.MaxPayload(),
		Progress: func(int64) { cancel() }}
	c, err := dispatcher.CheckInput(wf, opts)
	require.NoError(t, err)
	c.Apply(&opts) // the careful way, as a job that exists goes
	_, err = d.Dispatch(ctx, wf, opts)
	require.ErrorIs(t, err, context.Canceled)
	count := func() uint64 {
		n, err := b.Count(context.Background(), broker.StreamWork, broker.WorkFilter("midway"))
		require.NoError(t, err)
		return n
	}
	require.EqualValues(t, broker.AtomicBatchMax, count(), "the first batch whole, nothing of the second")

	again := testenv.Dispatch(t, b, wf, in, dispatcher.Options{JobID: "midway"})
	require.EqualValues(t, 1200-broker.AtomicBatchMax, again.Published)
	require.EqualValues(t, broker.AtomicBatchMax, again.Duplicates)
	require.EqualValues(t, 1200, count(), "each record once")

	testenv.Pool(t, b, worker.Config{Concurrency: 16})
	_, p := testenv.WaitFinished(t, b, "midway", 60*time.Second)
	require.EqualValues(t, 1200, p.OK)
	require.Zero(t, p.Failed)
}

// checkedDispatch dispatches input the careful way: checked whole first
// (CheckInput), then published, each record with its Nats-Msg-Id.
func checkedDispatch(t *testing.T, b *broker.Broker, wf *workflow.Workflow, input string, o dispatcher.Options) *dispatcher.Result {
	t.Helper()
	o.Input, o.MaxPayload = input, b.NC.MaxPayload()
	if o.IDField == "" {
		o.IDField = "id"
	}
	c, err := dispatcher.CheckInput(wf, o)
	require.NoError(t, err)
	c.Apply(&o)
	d := &dispatcher.Dispatcher{B: b, Log: testenv.Logger(t)}
	res, err := d.Dispatch(context.Background(), wf, o)
	require.NoError(t, err)
	return res
}
