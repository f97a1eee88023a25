package worker_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// overflowRecord is one record of the tests below: its id, and text of
// chars characters (of c, "x" when empty).
type overflowRecord struct {
	id    string
	chars int
	c     string
}

// overflowInput writes the records as JSONL, each {"id", "text"} plus
// extra fields.
func overflowInput(t *testing.T, recs []overflowRecord, extra string) string {
	t.Helper()
	var sb strings.Builder
	for _, r := range recs {
		text, _ := json.Marshal(strings.Repeat(cmpOr(r.c, "x"), r.chars))
		fmt.Fprintf(&sb, `{"id":%q,"text":%s%s}`+"\n", r.id, text, extra)
	}
	return testenv.WriteFile(t, "records.jsonl", sb.String())
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// windowEntry starts cw, a fake endpoint that refuses any prompt over its
// window with its dialect's real overflow error, and returns the provider
// entry of the matching kind that points at it.
func windowEntry(t *testing.T, cw *providertest.ContextWindow) string {
	kind := provider.KindOpenAI
	switch cw.Dialect {
	case providertest.DialectAnthropic:
		kind = provider.KindAnthropic
	case providertest.DialectGemini:
		kind = provider.KindGemini
	}
	srv := providertest.NewServer(t, cw)
	return fmt.Sprintf("{kind: %s, base_url: %q}", kind, providertest.Config(kind, srv).BaseURL)
}

// summarize is the action of the tests below, after its name and provider,
// with the given overflow: block and extra lines.
func summarize(overflow, extra string) string {
	return fmt.Sprintf(`    model: small
    prompt: "Summarize: {{ .text }}"
    params: {max_tokens: 100}
    overflow: %s
%s`, overflow, extra)
}

// runOverflow runs the records of input through the action (its lines
// after its name and provider) on cw.
func runOverflow(t *testing.T, cw *providertest.ContextWindow, action, input string, cfg worker.Config) (*broker.Job, broker.Progress, map[string]*broker.Result, *broker.Broker) {
	t.Helper()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  fake: %s
actions:
  - name: summarize
    provider: fake
%s`, windowEntry(t, cw), action))
	res := testenv.Dispatch(t, b, wf, input, dispatcher.Options{})
	testenv.Pool(t, b, cfg)
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	return job, p, testenv.Results(t, b, job), b
}

// overflowOne runs one record r1 of chars characters (and the extra
// fields) through the action on cw and returns its result.
func overflowOne(t *testing.T, cw *providertest.ContextWindow, action string, chars int, extra string) (*broker.Result, broker.Progress, *broker.Broker) {
	t.Helper()
	_, p, results, b := runOverflow(t, cw, action, overflowInput(t, []overflowRecord{{"r1", chars, ""}}, extra), worker.Config{})
	return results["r1"], p, b
}

// sizes are the records of the compaction tests: 2k–40k characters, and
// one of two-byte characters (20,000 bytes).
var sizes = []overflowRecord{{"r2k", 2000, ""}, {"r5k", 5000, ""}, {"r8k", 8000, ""}, {"r13k", 13000, ""}, {"r16k", 16000, ""},
	{"r24k", 24000, ""}, {"r32k", 32000, ""}, {"r40k", 40000, ""}, {"accents", 10000, "é"}}

// Against each server's real overflow error, with a window of 3,000 tokens
// (12,000 bytes): every record of 2k–40k characters ends ok, with at most
// two extra calls, and the story of each cut. Ollama names no sizes: its
// records are halved.
func TestOverflowCompactsEveryDialect(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{providertest.DialectOpenAI, providertest.DialectVLLM, providertest.DialectAnthropic,
		providertest.DialectGemini, providertest.DialectLlamaCpp, providertest.DialectOllama} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			cw := &providertest.ContextWindow{Dialect: dialect, Window: 3000}
			job, p, results, _ := runOverflow(t, cw, summarize("{truncate: text}", ""), overflowInput(t, sizes, ""), worker.Config{})
			require.NotEqual(t, broker.JobFailed, job.Status)
			require.EqualValues(t, len(sizes), p.OK, "every record ends ok")
			calls, refused := cw.Calls()
			extra := 0
			for _, rec := range sizes {
				r := results[rec.id]
				require.Equal(t, broker.StatusOK, r.Status, rec.id)
				require.Equal(t, "fits", r.Output)
				n := r.Recovery.Attempts
				require.LessOrEqual(t, n-1, 2, "%s: at most two extra calls: %+v", rec.id, r.Recovery)
				extra += n - 1
				if rec.chars*len(cmpOr(rec.c, "x")) <= 10000 {
					require.Equal(t, 1, n, "%s fits: one call", rec.id)
					require.Empty(t, r.Recovery.Compacted)
					continue
				}
				require.NotEmpty(t, r.Recovery.Compacted, rec.id)
				first := r.Recovery.Compacted[0]
				require.Equal(t, "text", first.Field)
				require.Equal(t, rec.chars, first.From)
				require.Less(t, first.To, first.From)
				want := fmt.Sprintf("text %s → %s chars", retry.Thousands(first.From), retry.Thousands(first.To))
				require.True(t, strings.HasPrefix(first.Note, want), "%s: %q", rec.id, first.Note)
				for _, c := range r.Recovery.Compacted {
					if c.After > 0 {
						require.Contains(t, r.Recovery.Failures[c.After-1].Error, "; then "+c.Note, "the attempt that overflowed says what followed")
					} else {
						require.Contains(t, c.Note, "before the first call (estimated ")
					}
				}
			}
			require.Equal(t, len(sizes)+extra, calls, "every call is counted in the records' recovery")
			require.Equal(t, extra, refused, "each extra call follows a refused one")
		})
	}
}

// A record too long for the action's model moves to the fallback (same
// provider); one too long for the fallback too is then cut, on it.
func TestOverflowFallbackModel(t *testing.T) {
	t.Parallel()
	cw := &providertest.ContextWindow{Dialect: providertest.DialectOpenAI, Windows: map[string]int{"small": 3000, "big": 12000}}
	recs := append(append([]overflowRecord(nil), sizes...), overflowRecord{"r60k", 60000, ""})
	_, p, results, _ := runOverflow(t, cw, summarize("{truncate: text, fallback_model: big}", ""), overflowInput(t, recs, ""), worker.Config{})
	require.EqualValues(t, len(recs), p.OK)
	for _, rec := range recs {
		r := results[rec.id]
		require.Equal(t, broker.StatusOK, r.Status, rec.id)
		require.LessOrEqual(t, r.Recovery.Attempts-1, 2, rec.id)
		bytes := rec.chars * len(cmpOr(rec.c, "x"))
		switch {
		case bytes <= 10000:
			require.Equal(t, "small", r.Model, rec.id)
			require.Empty(t, r.Recovery.Compacted, rec.id)
		case bytes <= 40000:
			require.Equal(t, "big", r.Model, "%s: moved, not cut", rec.id)
			require.Len(t, r.Recovery.Compacted, 1, rec.id)
			require.Equal(t, "fake/big", r.Recovery.Compacted[0].Model)
			require.True(t, strings.HasPrefix(r.Recovery.Compacted[0].Note, "moved to fake/big"), r.Recovery.Compacted[0].Note)
			require.Zero(t, r.Recovery.Compacted[0].Field)
		default:
			require.Equal(t, "big", r.Model, rec.id)
			require.Len(t, r.Recovery.Compacted, 2, "%s: moved, then cut: %+v", rec.id, r.Recovery.Compacted)
			require.Equal(t, "fake/big", r.Recovery.Compacted[0].Model)
			require.Equal(t, "text", r.Recovery.Compacted[1].Field)
			require.Less(t, r.Recovery.Compacted[1].To, 48000, "cut to the fallback's window")
		}
	}
}

// Records that no round can fit are dead-lettered as context_overflow,
// saying what was tried; a max_calls cap stops a round as it stops a repair.
func TestOverflowThatCannotFit(t *testing.T) {
	t.Parallel()
	t.Run("the rest of the prompt alone is over", func(t *testing.T) {
		t.Parallel()
		cw := &providertest.ContextWindow{Dialect: providertest.DialectAnthropic, Window: 3000}
		r, p, b := overflowOne(t, cw, summarize("{truncate: text}", "    system: "+strings.Repeat("rule ", 3000)), 5000, "")
		require.EqualValues(t, 1, p.ByReason["context_overflow"])
		require.Equal(t, 1, r.Recovery.Attempts, "no round could help: no second call")
		require.Contains(t, r.Error.Message, "failed permanently: ContextOverflowError: prompt is too long: 5003 tokens > 3000 maximum")
		require.Contains(t, r.Error.Message, "; overflow: text cannot be shortened enough: the prompt is over (5,003 tokens > 3,000) even without its 5,000 chars")
		e := dlqOf(t, b, r.Job)
		require.Equal(t, retry.ReasonContextOverflow, e.Reason)
		require.Equal(t, r.Error.Message, e.Error)
	})
	t.Run("rounds spent", func(t *testing.T) {
		t.Parallel()
		cw := &providertest.ContextWindow{Dialect: providertest.DialectOllama, Window: 3000}
		r, p, _ := overflowOne(t, cw, summarize("{truncate: text, keep: tail}", ""), 200000, "")
		require.EqualValues(t, 1, p.ByReason["context_overflow"])
		require.Equal(t, 3, r.Recovery.Attempts, "the call and two rounds")
		require.Contains(t, r.Error.Message, "; overflow: tried text 200,000 → 100,000 chars, then text 100,000 → 50,000 chars; "+
			"still too long (the provider named no sizes) after 2 rounds (max_rounds 2)")
		require.Equal(t, []string{"context_overflow"}, r.Recovery.Classes)
	})
	t.Run("the fallback is too small too", func(t *testing.T) {
		t.Parallel()
		cw := &providertest.ContextWindow{Dialect: providertest.DialectOpenAI, Windows: map[string]int{"small": 1000, "big": 2000}}
		r, _, _ := overflowOne(t, cw, summarize("{fallback_model: big}", ""), 20000, "")
		require.Equal(t, string(retry.ReasonContextOverflow), r.Reason)
		require.Equal(t, 2, r.Recovery.Attempts)
		require.Equal(t, "big", r.Model)
		require.Contains(t, r.Error.Message, "; overflow: tried moved to fake/big; the fallback fake/big is too small too (5,003 tokens > 2,000), "+
			"and no field may be shortened (overflow.truncate)")
	})
	t.Run("a field that is not text", func(t *testing.T) {
		t.Parallel()
		cw := &providertest.ContextWindow{Dialect: providertest.DialectGemini, Window: 3000}
		r, _, _ := overflowOne(t, cw, "    model: small\n    prompt: \"{{ .n }} {{ .text }}\"\n    overflow: {truncate: n}\n", 20000, `,"n":42`)
		require.Equal(t, string(retry.ReasonContextOverflow), r.Reason)
		require.Contains(t, r.Error.Message, "; overflow: n is a JSON number, not text: it cannot be shortened")
	})
	t.Run("max_calls", func(t *testing.T) {
		t.Parallel()
		cw := &providertest.ContextWindow{Dialect: providertest.DialectOpenAI, Window: 3000}
		r, p, _ := overflowOne(t, cw, summarize("{truncate: text}", "    max_calls: 1"), 20000, "")
		require.EqualValues(t, 1, p.ByReason["max_calls"])
		require.Equal(t, 1, r.Recovery.Attempts)
		require.True(t, strings.HasPrefix(r.Error.Message, "stopped at max_calls 1: "), r.Error.Message)
	})
}

// Once an overflow has named the window, a later record known not to fit
// is cut before it is sent: one refused call for the whole job.
func TestOverflowEstimatedBeforeTheCall(t *testing.T) {
	t.Parallel()
	cw := &providertest.ContextWindow{Dialect: providertest.DialectGemini, Window: 3000}
	recs := []overflowRecord{{"r1", 40000, ""}, {"r2", 20000, ""}, {"r3", 4000, ""}, {"r4", 32000, ""}, {"r5", 13000, ""}, {"r6", 15000, ""}}
	_, p, results, _ := runOverflow(t, cw, summarize("{truncate: text, keep: middle}", ""), overflowInput(t, recs, ""), worker.Config{Concurrency: 1})
	require.EqualValues(t, len(recs), p.OK)
	calls, refused := cw.Calls()
	require.Equal(t, 2, refused, "the first overflow, and r5's, whose estimate is within the slack")
	require.Equal(t, len(recs)+2, calls)
	require.Equal(t, 2, results["r1"].Recovery.Attempts)
	r5 := results["r5"]
	require.Equal(t, 2, r5.Recovery.Attempts, "about 3,250 tokens: within 10 % of the window, so sent, and cut by the provider's numbers")
	require.Equal(t, 1, r5.Recovery.Compacted[0].After)
	for _, id := range []string{"r2", "r4", "r6"} {
		r := results[id]
		require.Equal(t, 1, r.Recovery.Attempts, id)
		require.Len(t, r.Recovery.Compacted, 1, id)
		c := r.Recovery.Compacted[0]
		require.Zero(t, c.After, "no call overflowed")
		require.Contains(t, c.Note, "before the first call (estimated ")
	}
	require.Empty(t, results["r3"].Recovery.Compacted)
}

// dlqOf is the one dead letter of the job.
func dlqOf(t *testing.T, b *broker.Broker, job string) *deadletter.Entry {
	t.Helper()
	es := dlq(t, b, job)
	require.Len(t, es, 1)
	return es[0]
}

// A price file's context windows (max_input_tokens) feed the estimate
// before any call: a prompt far over the action model's window moves to
// the fallback without a refused call, billed at the fallback's price from
// the same file; one the estimate cannot tell is sent, and the provider's
// numbers decide.
func TestOverflowKnownWindowBeforeAnyCall(t *testing.T) {
	t.Parallel()
	cw := &providertest.ContextWindow{Dialect: providertest.DialectOpenAI, Windows: map[string]int{"small": 3000, "big": 120000}}
	prices := testenv.WriteFile(t, "prices.json", `{
  "fake/small": {"input_cost_per_token": 1e-07, "output_cost_per_token": 4e-07, "litellm_provider": "fake", "max_input_tokens": 3000, "mode": "chat"},
  "fake/big": {"input_cost_per_token": 2e-06, "output_cost_per_token": 8e-06, "litellm_provider": "fake", "max_input_tokens": 120000, "mode": "chat"}
}`)
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, fmt.Sprintf(`
prices: %q
providers:
  fake: %s
actions:
  - name: summarize
    provider: fake
%s`, prices, windowEntry(t, cw), summarize("{truncate: text, fallback_model: big}", "")))
	require.Equal(t, 3000, wf.Actions[0].ContextWindow)
	require.Equal(t, 120000, wf.Actions[0].Overflow.FallbackContextWindow)
	// r1: 40,000 chars is at least 6,667 tokens (6 chars a token at most):
	// over 3,000 by far. r2: 10,000 chars fit. r3: 16,000 chars may be
	// 2,667 tokens, so it is sent; at 4 chars a token it is 4,000.
	recs := []overflowRecord{{"r1", 40000, ""}, {"r2", 10000, ""}, {"r3", 16000, ""}}
	res := testenv.Dispatch(t, b, wf, overflowInput(t, recs, ""), dispatcher.Options{})
	testenv.Pool(t, b, worker.Config{Concurrency: 1})
	job, p := testenv.WaitFinished(t, b, res.Job.ID, 60*time.Second)
	results := testenv.Results(t, b, job)
	require.EqualValues(t, len(recs), p.OK)
	calls, refused := cw.Calls()
	require.Equal(t, 1, refused, "r3's: the estimate sends what may fit")
	require.Equal(t, 4, calls)

	r1 := results["r1"]
	require.Equal(t, "big", r1.Model)
	require.Equal(t, 1, r1.Recovery.Attempts, "moved before its first call")
	require.Len(t, r1.Recovery.Compacted, 1)
	require.Zero(t, r1.Recovery.Compacted[0].After)
	require.Equal(t, "fake/big", r1.Recovery.Compacted[0].Model)
	require.Contains(t, r1.Recovery.Compacted[0].Note, "moved to fake/big before the first call (estimated ")
	require.InDelta(t, float64(r1.Usage.InputTokens)*2e-6+float64(r1.Usage.OutputTokens)*8e-6, *r1.Cost, 1e-12, "billed at the fallback's price")

	require.Equal(t, "small", results["r2"].Model)
	require.Empty(t, results["r2"].Recovery.Compacted)
	require.InDelta(t, float64(results["r2"].Usage.InputTokens)*1e-7+float64(results["r2"].Usage.OutputTokens)*4e-7, *results["r2"].Cost, 1e-12)

	r3 := results["r3"]
	require.Equal(t, "big", r3.Model)
	require.Equal(t, 2, r3.Recovery.Attempts)
	require.Equal(t, 1, r3.Recovery.Compacted[0].After)
}
