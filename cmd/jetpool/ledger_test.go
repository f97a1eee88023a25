package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ui"
)

// billRates is the fake providers' own price table (providertest.Biller):
// the workflows below give jetpool the same numbers in price: blocks,
// which jetpool's pricing turns into money its own way.
var billRates = map[string]providertest.Rates{
	"bill-oa": {Input: 40, Output: 160, CachedInput: 10},
	"bill-an": {Input: 30, Output: 150, CachedInput: 3, CacheWrite: 37.5},
	"bill-ge": {Input: 12.5, Output: 100, CachedInput: 3.125},
}

// billProviders are the three wire formats on one billing server, priced
// as billRates says.
func billProviders(url string) string {
	return fmt.Sprintf(`providers:
  oa: {kind: openai, base_url: %[1]s/v1, api_key_env: BILL_KEY, price: {input_per_mtok: 40, output_per_mtok: 160, cached_input_per_mtok: 10}}
  an: {kind: anthropic, base_url: %[1]s/v1, api_key_env: BILL_KEY, price: {input_per_mtok: 30, output_per_mtok: 150, cached_input_per_mtok: 3, cache_write_per_mtok: 37.5}}
  ge: {kind: gemini, base_url: %[1]s/v1beta, api_key_env: BILL_KEY, price: {input_per_mtok: 12.5, output_per_mtok: 100, cached_input_per_mtok: 3.125}}
`, url)
}

// billRecords writes n records r1…rn whose texts vary in length.
func billRecords(t *testing.T, dir string, n int) string {
	t.Helper()
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "{\"id\":\"r%d\",\"text\":%q}\n", i, strings.Repeat("words ", i%7+1))
	}
	p := filepath.Join(dir, fmt.Sprintf("records-%d.jsonl", n))
	require.NoError(t, os.WriteFile(p, []byte(sb.String()), 0o600))
	return p
}

// costLineRE is the summary's cost line.
var costLineRE = regexp.MustCompile(`(?m)^  cost: \$(\d+\.\d+)(.*)$`)

// figures are the money figures jetpool shows for a job.
type figures struct {
	summary   float64            // the run's (or retry's) summary
	precision float64            // the summary's: half its last digit
	status    float64            // jetpool status --json
	dashboard float64            // the dashboard's API
	results   float64            // the results file's total_cost, summed
	byRecord  map[string]float64 // the results file's total_cost
}

// moneyFigures reads every figure of job after a command printed stdout
// and wrote out.
func moneyFigures(t *testing.T, job, stdout, out string) figures {
	t.Helper()
	f := figures{byRecord: map[string]float64{}}
	m := costLineRE.FindStringSubmatch(stdout)
	require.NotNil(t, m, "no cost line in the summary:\n%s", stdout)
	f.summary, _ = strconv.ParseFloat(m[1], 64)
	f.precision = 0.00005
	if f.summary >= 1 {
		f.precision = 0.005
	}
	require.NotContains(t, m[2], "no result holds", "every call is in a result: %s", m[0])
	require.NotContains(t, m[2], "unknown price", m[0])
	for _, r := range readResults(t, out) {
		c, _ := r["total_cost"].(float64)
		f.byRecord[r["id"].(string)] = c
		f.results += c
	}
	code, js, stderr := jetpool(t, "status", job, "--json")
	require.Equal(t, 0, code, stderr)
	var st struct {
		Cost float64 `json:"cost"`
	}
	require.NoError(t, json.Unmarshal([]byte(js), &st), js)
	f.status = st.Cost
	f.dashboard = dashboardCost(t, job)
	return f
}

// dashboardCost is the job's cost as the dashboard's API gives it.
func dashboardCost(t *testing.T, job string) float64 {
	t.Helper()
	cfg, err := broker.LoadConfig()
	require.NoError(t, err)
	b, err := broker.Connect(context.Background(), cfg, cfg.Logger())
	require.NoError(t, err)
	defer b.Close()
	h, err := ui.New(ui.Config{B: b, ReadOnly: true})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/jobs/" + job)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	var v struct {
		Status struct {
			Cost float64 `json:"cost"`
		} `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &v), string(body))
	return v.Status.Cost
}

// requireTheBill holds every figure of f to the provider's bill: the
// job's total within a hundredth of a cent (the summary within its
// printed precision), and each record's total_cost to its own bill.
func requireTheBill(t *testing.T, bill *providertest.Biller, f figures) {
	t.Helper()
	want := bill.Total()
	require.Empty(t, bill.Unknown(), "every model billed is in the bill's table")
	require.Greater(t, want, 0.0)
	require.InDelta(t, want, f.results, 1e-9, "the results file's total_cost, summed")
	require.InDelta(t, want, f.status, 0.0001, "jetpool status --json")
	require.InDelta(t, want, f.dashboard, 0.0001, "the dashboard's API")
	require.InDelta(t, want, f.summary, f.precision, "the summary")
	for rec, c := range bill.ByRecord() {
		require.InDelta(t, c, f.byRecord[rec], 1e-9, "record %s: its total_cost is its bill", rec)
	}
	for rec, c := range f.byRecord {
		if c != 0 {
			require.Contains(t, bill.ByRecord(), rec, "record %s was billed", rec)
		}
	}
}

// ledgerCase is one run against the billing server.
type ledgerCase struct {
	name     string
	records  int
	workflow func(url string) string
	script   func(c providertest.BillCall) providertest.BillAnswer
	cache    bool // the server caches system prompts seen before (OpenAI, Gemini)
	exit     int
	// after, when set, runs more commands on the job (a replay) and
	// returns the last one's stdout.
	after func(t *testing.T, dir, wf, out string) string
}

// Every figure jetpool shows of a job's cost is the provider's bill,
// across the faults that make calls fail, be repaired, cut, retried,
// redelivered and replayed, in every wire format, streamed or not, with
// cached input, cache writes and reasoning tokens.
func TestLedgerMatchesTheBill(t *testing.T) {
	for _, tc := range []ledgerCase{
		{
			name: "openai streamed: 5xx, 429, drops", records: 12, exit: 0,
			workflow: func(url string) string {
				return billProviders(url) + `defaults:
  provider: oa
  model: bill-oa
  stream: true
  params: {max_tokens: 40}
  retry: {max_attempts: 3, backoff: 10ms}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
`
			},
			script: func(c providertest.BillCall) providertest.BillAnswer {
				switch {
				case c.Key == "r1:a" && c.N == 1, c.Key == "r5:a" && c.N <= 2:
					return providertest.BillAnswer{Status: 503}
				case c.Key == "r2:a" && c.N == 1:
					return providertest.BillAnswer{Status: 429, RetryAfter: "0"}
				case c.Key == "r3:a" && c.N == 1, c.Key == "r7:a" && c.N == 2:
					return providertest.BillAnswer{Drop: true}
				}
				return providertest.BillAnswer{}
			},
		},
		{
			name: "anthropic streamed: repairs, a cut answer grown, cache writes and reads", records: 10, exit: 0,
			workflow: func(url string) string {
				return billProviders(url) + `defaults:
  provider: an
  model: bill-an
  stream: true
  system: "You answer in JSON, briefly, always the same way."
  cache: [system]
  params: {max_tokens: 30}
  retry: {max_attempts: 2, backoff: 10ms}
actions:
  - name: a
    prompt: "[[{{ .id }}:a]] {{ .text }}"
    on_truncated: grow
    expect:
      schema: {type: object, required: [answer]}
      repair: {max_attempts: 2}
`
			},
			script: func(c providertest.BillCall) providertest.BillAnswer {
				switch {
				case c.Key == "r1:a" && c.N == 1, c.Key == "r4:a" && c.N <= 2:
					return providertest.BillAnswer{Text: "no json here, sorry"}
				case c.Key == "r2:a" && c.N == 1:
					return providertest.BillAnswer{Text: `{"answer": "` + strings.Repeat("long ", 40) + `"}`}
				}
				return providertest.BillAnswer{}
			},
		},
		{
			name: "gemini pipeline: reasoning, cached prefix, a cut answer that fails", records: 9, exit: exitFailedRecords, cache: true,
			workflow: func(url string) string {
				return billProviders(url) + `defaults:
  provider: ge
  model: bill-ge
  system: "A system prompt the provider caches after its first call."
  params: {max_tokens: 60}
  retry: {max_attempts: 2, backoff: 10ms}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
  - {name: b, stream: true, prompt: "[[{{ .id }}:b]] {{ .a }}"}
`
			},
			script: func(c providertest.BillCall) providertest.BillAnswer {
				switch {
				case c.Key == "r3:b":
					return providertest.BillAnswer{Finish: "length", Reasoning: 7}
				case strings.HasSuffix(c.Key, ":a"):
					return providertest.BillAnswer{Reasoning: 11}
				case c.Key == "r6:b" && c.N == 1:
					return providertest.BillAnswer{Status: 503}
				}
				return providertest.BillAnswer{}
			},
		},
		{
			name: "a delivery's answered calls carried to the next delivery", records: 6, exit: 0,
			workflow: func(url string) string {
				return billProviders(url) + `defaults:
  provider: oa
  model: bill-oa
  params: {max_tokens: 40}
  retry: {max_attempts: 2, backoff: 10ms, redeliver: {max_deliveries: 3, backoff: 10ms}}
actions:
  - name: a
    prompt: "[[{{ .id }}:a]] {{ .text }} in json"
    expect:
      schema: {type: object, required: [answer]}
      repair: {max_attempts: 3}
`
			},
			// r2's first answer fails its schema (billed), then its repair
			// meets two 503s: the session gives up, the record is
			// redelivered, and its next delivery's answer is good.
			script: func(c providertest.BillCall) providertest.BillAnswer {
				switch {
				case c.Key == "r2:a" && c.N == 1:
					return providertest.BillAnswer{Text: `{"nope": 1}`}
				case c.Key == "r2:a" && c.N <= 3:
					return providertest.BillAnswer{Status: 503}
				}
				return providertest.BillAnswer{}
			},
		},
		{
			name: "replays: retry, then retry --workflow", records: 8, exit: exitFailedRecords,
			workflow: func(url string) string {
				return billProviders(url) + `defaults:
  provider: oa
  model: bill-oa
  params: {max_tokens: 8}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
  - {name: b, prompt: "[[{{ .id }}:b]] {{ .a }}", on_truncated: fail}
`
			},
			// b's answers to even records are cut at max_tokens 8: failed,
			// billed; the first replay (same workflow) is cut again and
			// billed again; the second, under a workflow with room,
			// succeeds.
			script: func(c providertest.BillCall) providertest.BillAnswer {
				if n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(c.Key, "r"), ":b")); n%2 == 0 && strings.HasSuffix(c.Key, ":b") {
					return providertest.BillAnswer{Text: "a long answer of " + c.Key + strings.Repeat(", and more", 5)}
				}
				return providertest.BillAnswer{}
			},
			after: func(t *testing.T, dir, wf, out string) string {
				code, stdout, stderr := jetpool(t, "retry", "--job", "ledger", "--output", out, "--no-progress")
				require.Equal(t, exitFailedRecords, code, stdout+stderr)
				before := costLineRE.FindStringSubmatch(stdout)
				fixed := filepath.Join(dir, "fixed.yaml")
				raw, err := os.ReadFile(wf)
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(fixed, []byte(strings.Replace(string(raw), "max_tokens: 8", "max_tokens: 50", 1)), 0o600))
				code, stdout, stderr = jetpool(t, "retry", "--job", "ledger", "--workflow", fixed, "--output", out, "--no-progress")
				require.Equal(t, 0, code, stdout+stderr)
				after := costLineRE.FindStringSubmatch(stdout)
				b0, _ := strconv.ParseFloat(before[1], 64)
				b1, _ := strconv.ParseFloat(after[1], 64)
				require.Greater(t, b1, b0, "a replay adds to the cost, never takes from it")
				return stdout
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := setEnv(t)
			t.Setenv("BILL_KEY", "sk-bill")
			bill := providertest.NewBiller(billRates)
			srv := providertest.NewBillingServer(t, bill)
			srv.Script, srv.CachePrefix = tc.script, tc.cache
			wf := filepath.Join(dir, "wf.yaml")
			require.NoError(t, os.WriteFile(wf, []byte(tc.workflow(srv.URL)), 0o600))
			out := filepath.Join(dir, "results.jsonl")
			code, stdout, stderr := jetpool(t, "run", wf, "--input", billRecords(t, dir, tc.records), "--output", out,
				"--no-progress", "--no-preflight", "--job", "ledger")
			require.Equal(t, tc.exit, code, stdout+stderr)
			if tc.after != nil {
				stdout = tc.after(t, dir, wf, out)
			}
			requireTheBill(t, bill, moneyFigures(t, "ledger", stdout, out))
			t.Logf("%d calls, %d billed, $%.6f: %s", srv.Calls(), len(bill.Lines()), bill.Total(), costLineRE.FindString(stdout))
		})
	}
}

// Batch mode, OpenAI's and Anthropic's: every answer billed at half the
// online rates, and an answer that fails its schema repaired online (billed
// at the online rates), all of it in the record's total_cost and in every
// figure of the job.
func TestLedgerMatchesTheBatchBill(t *testing.T) {
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic} {
		t.Run(kind, func(t *testing.T) {
			dir := setEnv(t)
			t.Setenv("BILL_KEY", "sk-bill")
			bill := providertest.NewBiller(billRates)
			srv := batchtest.New(t, kind)
			srv.Bill = bill
			srv.Answer = func(id string, n int, _ map[string]any) batchtest.Answer {
				if id == "r3" && n == 1 {
					return batchtest.OK("not json at all")
				}
				return batchtest.OK(`{"answer": "batch answer of ` + id + `"}`)
			}
			srv.OnlineReply = func(string) string { return `{"answer": "repaired online"}` }
			model, price := "bill-oa", "{input_per_mtok: 40, output_per_mtok: 160}"
			if kind == provider.KindAnthropic {
				model, price = "bill-an", "{input_per_mtok: 30, output_per_mtok: 150}"
			}
			wf := filepath.Join(dir, "wf.yaml")
			require.NoError(t, os.WriteFile(wf, []byte(fmt.Sprintf(`providers:
  fake: {kind: %s, base_url: %s/v1, api_key_env: BILL_KEY, price: %s}
defaults: {provider: fake, model: %s, params: {max_tokens: 50}}
actions:
  - name: a
    prompt: "[[{{ .id }}:a]] {{ .text }} as json"
    mode: batch
    batch: {max_records: 4, max_wait: 20ms, poll: 5ms}
    expect:
      schema: {type: object, required: [answer]}
      repair: {max_attempts: 1}
`, kind, srv.URL, price, model)), 0o600))
			out := filepath.Join(dir, "results.jsonl")
			code, stdout, stderr := jetpool(t, "run", wf, "--input", billRecords(t, dir, 10), "--output", out,
				"--no-progress", "--no-preflight", "--job", "ledger")
			require.Equal(t, 0, code, stdout+stderr)
			var online int
			for _, l := range bill.Lines() {
				if !l.Batch {
					online++
				}
			}
			require.Equal(t, 1, online, "r3's repair went online")
			require.Len(t, bill.Lines(), 11)
			requireTheBill(t, bill, moneyFigures(t, "ledger", stdout, out))
		})
	}
}

// longContextPrice is the price: block fields that give a price a
// long-context tier: above tokens of input, the whole call at in and out
// dollars per million tokens.
func longContextPrice(above int, in, out float64) string {
	return fmt.Sprintf("long_context: {above_tokens: %d, input_per_mtok: %g, output_per_mtok: %g}", above, in, out)
}

// A call whose prompt is past the long-context threshold is billed at the
// tier's rates on all its tokens (Gemini 2.5 Pro, Claude Sonnet above
// 200k): jetpool's cost is the bill on both sides of it.
func TestLedgerLongContextTier(t *testing.T) {
	tier := longContextPrice(2000, 80, 320)
	dir := setEnv(t)
	t.Setenv("BILL_KEY", "sk-bill")
	bill := providertest.NewBiller(map[string]providertest.Rates{
		"bill-long": {Input: 40, Output: 160, LongAbove: 2000, LongInput: 80, LongOutput: 320}})
	srv := providertest.NewBillingServer(t, bill)
	srv.Script = func(c providertest.BillCall) providertest.BillAnswer {
		if n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(c.Key, "r"), ":a")); n%2 == 0 {
			return providertest.BillAnswer{PadInput: 2500} // counted past the threshold, as a long document is
		}
		return providertest.BillAnswer{}
	}
	wf := filepath.Join(dir, "wf.yaml")
	require.NoError(t, os.WriteFile(wf, []byte(fmt.Sprintf(`providers:
  long: {kind: openai, base_url: %s/v1, api_key_env: BILL_KEY, price: {input_per_mtok: 40, output_per_mtok: 160, %s}}
defaults: {provider: long, model: bill-long, params: {max_tokens: 40}}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
`, srv.URL, tier)), 0o600))
	out := filepath.Join(dir, "results.jsonl")
	code, stdout, stderr := jetpool(t, "run", wf, "--input", billRecords(t, dir, 8), "--output", out, "--no-progress", "--no-preflight", "--job", "ledger")
	require.Equal(t, 0, code, stdout+stderr)
	requireTheBill(t, bill, moneyFigures(t, "ledger", stdout, out))
}
