package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/ui"
	"github.com/jetpool/jetpool/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// keyedWorkflow fails every record with "invalid api key" (the sim's auth
// fault) until the key file holds the valid key: the quickstart's story.
const keyedWorkflow = `
providers:
  sim:
    kind: sim
    api_key_file: %s
    limits: {rpm: 6000, concurrency: 8}
    sim: {valid_key: sk-fixed, faults: {auth: 1}}
actions:
  - name: answer
    provider: sim
    prompt: "answer {{ .text }}"
`

// testBundle is a dashboard over a real embedded JetStream holding one
// job whose records all failed with "invalid api key", plus one dead
// letter of another job (class server).
type testBundle struct {
	b       *broker.Broker
	job     *broker.Job
	keyFile string
	srv     *httptest.Server
	c       *client

	trust *provider.Trust // the pools' (the workflow's key file bound to the sim)

	mu       sync.Mutex
	replayed []string // jobs the Replayed hook was told
}

const records = 4

func setup(t *testing.T, cfg ui.Config) *testBundle {
	t.Helper()
	tb := &testBundle{b: testenv.Broker(t), keyFile: filepath.Join(t.TempDir(), "key")}
	require.NoError(t, os.WriteFile(tb.keyFile, []byte("sk-wrong"), 0o600))
	wf := testenv.Workflow(t, fmt.Sprintf(keyedWorkflow, tb.keyFile))
	res := testenv.Dispatch(t, tb.b, wf, testenv.Records(t, records), dispatcher.Options{JobID: "keyed"})
	// The workflow's key file is bound to the sim here, as a worker's
	// operator would bind it (JETPOOL_KEY_HOSTS).
	tb.trust = provider.DefaultTrust().Allowing(wf.Providers)
	pool := testenv.Pool(t, tb.b, worker.Config{Concurrency: 4, Trust: tb.trust})
	job, p := testenv.WaitFinished(t, tb.b, res.Job.ID, 30*time.Second)
	require.EqualValues(t, records, p.Failed)
	require.NoError(t, pool.Stop(context.Background()))
	tb.job = job
	require.NoError(t, deadletter.Publish(context.Background(), tb.b, &deadletter.Entry{Job: "other", Record: "x1", Action: "answer",
		Reason: retry.ReasonExhausted, Class: retry.ClassServer, Error: "failed after 3 attempts (1 delivery): [1] ServerError: 503",
		Attempts: 3, Deliveries: 1, Data: []byte(`{"id":"x1","record":{"text":"x"}}`)}))

	cfg.B = tb.b
	cfg.Log = testenv.Logger(t)
	if cfg.Replayed == nil {
		cfg.Replayed = func(jobs []string) string {
			tb.mu.Lock()
			defer tb.mu.Unlock()
			tb.replayed = append(tb.replayed, jobs...)
			return "noted"
		}
	}
	h, err := ui.New(cfg)
	require.NoError(t, err)
	tb.srv = httptest.NewServer(h)
	t.Cleanup(tb.srv.Close)
	tb.c = newClient(t, tb.srv.URL)
	return tb
}

// client is a browser-like client: a cookie jar, JSON in and out.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
}

func newClient(t *testing.T, base string) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: base, hc: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

func (c *client) do(req *http.Request, out any) *http.Response {
	c.t.Helper()
	res, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	if out != nil && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		require.NoError(c.t, json.Unmarshal(body, out), "%s", body)
	}
	return res
}

// get GETs path and decodes its JSON into out; it returns the status.
func (c *client) get(path string, out any) int {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req, out).StatusCode
}

// csrf reads the page's CSRF token (and gets its cookie).
func (c *client) csrf() string {
	c.t.Helper()
	var s struct{ CSRF string }
	require.Equal(c.t, http.StatusOK, c.get("/api/session", &s))
	require.Len(c.t, s.CSRF, 64)
	return s.CSRF
}

// post POSTs body as JSON with the CSRF header token (none when empty).
func (c *client) post(path, token string, body any, out any) int {
	c.t.Helper()
	data, err := json.Marshal(body)
	require.NoError(c.t, err)
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(string(data)))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set(ui.CSRFHeader, token)
	}
	return c.do(req, out).StatusCode
}

type apiError struct{ Error string }

func dlq(t *testing.T, b *broker.Broker, f deadletter.Filter) []*deadletter.Entry {
	t.Helper()
	es, err := deadletter.List(context.Background(), b, f)
	require.NoError(t, err)
	return es
}

// The jobs page and a job's page read what `jetpool status` reads, plus
// each action's counts and the dead letters by class and reason.
func TestJobViews(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	var jobs struct {
		Jobs []struct {
			Job       string
			Status    string
			Total     int
			Failed    int
			Succeeded int
		}
		Workers int
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs", &jobs))
	require.Len(t, jobs.Jobs, 1)
	require.Equal(t, "keyed", jobs.Jobs[0].Job)
	require.Equal(t, records, jobs.Jobs[0].Total)
	require.Equal(t, records, jobs.Jobs[0].Failed)
	require.Zero(t, jobs.Workers, "the pool was stopped")

	var job struct {
		Status struct {
			Failed   int
			ByReason map[string]int `json:"dead_lettered_by_reason"`
		}
		Actions []broker.ActionCounts
		Dead    struct {
			Total   int
			ByClass map[string]int `json:"by_class"`
		} `json:"dead_letters"`
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed", &job))
	require.Equal(t, map[string]int{"permanent": records}, job.Status.ByReason)
	require.Equal(t, []broker.ActionCounts{{Action: "answer", Failed: records}}, job.Actions)
	require.Equal(t, records, job.Dead.Total)
	require.Equal(t, map[string]int{"auth": records}, job.Dead.ByClass)

	var e apiError
	require.Equal(t, http.StatusNotFound, tb.c.get("/api/jobs/nope", &e))
	require.Contains(t, e.Error, "job not found: nope")
	require.Equal(t, http.StatusBadRequest, tb.c.get("/api/jobs/a.b", &e))
	require.Contains(t, e.Error, `job id "a.b"`)
}

// A job's results page by page and by outcome; a record's story: its
// results with attempts and errors, and its dead letters with headers and
// body.
func TestRecords(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	type page struct {
		Results []struct {
			Seq  uint64
			Data broker.Result
		}
		Next uint64
	}
	var p page
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/results?limit=3", &p))
	require.Len(t, p.Results, 3)
	require.NotZero(t, p.Next)
	var rest page
	require.Equal(t, http.StatusOK, tb.c.get(fmt.Sprintf("/api/jobs/keyed/results?limit=3&after=%d", p.Next), &rest))
	require.Len(t, rest.Results, 1)
	require.Zero(t, rest.Next)
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/results?outcome=ok", &p))
	require.Empty(t, p.Results)
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/results?outcome=permanent", &p))
	require.Len(t, p.Results, records)
	var e apiError
	require.Equal(t, http.StatusBadRequest, tb.c.get("/api/jobs/keyed/results?outcome=nope", &e))
	require.Contains(t, e.Error, `outcome "nope"`)
	require.Equal(t, http.StatusBadRequest, tb.c.get("/api/jobs/keyed/results?limit=0", &e))
	require.Contains(t, e.Error, `limit "0"`)

	var story struct {
		Results []struct{ Data broker.Result }
		Dead    []struct {
			Seq     uint64
			Reason  string
			Class   string
			Headers map[string][]string
			Body    map[string]any
		} `json:"dead_letters"`
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/records/r2", &story))
	require.Len(t, story.Results, 1)
	r := story.Results[0].Data
	require.Equal(t, "r2", r.ID)
	require.Equal(t, broker.StatusFailed, r.Status)
	require.Equal(t, "failed permanently: AuthError: invalid api key", r.Error.Message)
	require.Equal(t, 1, r.Recovery.Attempts)
	require.Len(t, story.Dead, 1)
	require.Equal(t, "permanent", story.Dead[0].Reason)
	require.Equal(t, "r2", story.Dead[0].Body["id"])

	var dl struct {
		Record  string
		Subject string
		Headers map[string][]string
	}
	require.Equal(t, http.StatusOK, tb.c.get(fmt.Sprintf("/api/dlq/%d", story.Dead[0].Seq), &dl))
	require.Equal(t, "r2", dl.Record)
	require.Equal(t, "jetpool.dlq.keyed.answer", dl.Subject)
	require.Equal(t, []string{"auth"}, dl.Headers["Jetpool-Error-Class"], "headers as stored")
	require.Equal(t, http.StatusNotFound, tb.c.get("/api/dlq/99999", &e))
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/keyed/records/nobody", &story))
	require.Empty(t, story.Results)
}

type listing struct {
	Entries []struct {
		Job, Record, Reason, Class string
	}
	Matched int
}

// The dead-letter listing filters as `dlq list` does, and refuses a bad
// filter naming the field.
func TestDeadLetterFilters(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	for q, want := range map[string]int{
		"":                      records + 1,
		"?job=keyed":            records,
		"?job=other":            1,
		"?class=auth":           records,
		"?class=server":         1,
		"?reason=exhausted":     1,
		"?reason=permanent":     records,
		"?action=nope":          0,
		"?since=1h":             records + 1,
		"?job=keyed&limit=2":    2,
		"?class=rate_limit":     0,
		"?job=keyed&class=auth": records,
	} {
		var l listing
		require.Equal(t, http.StatusOK, tb.c.get("/api/dlq"+q, &l), q)
		require.Equal(t, want, l.Matched, q)
		require.Len(t, l.Entries, want, q)
	}
	var l listing
	require.Equal(t, http.StatusOK, tb.c.get("/api/dlq?show=1", &l))
	require.Equal(t, records+1, l.Matched, "all counted")
	require.Len(t, l.Entries, 1, "the first shown")
	for q, want := range map[string]string{
		"?reason=nope":  `reason "nope": want one of`,
		"?class=nope":   `class "nope": want one of`,
		"?job=a*":       `job "a*" is not a valid job id`,
		"?action=>":     `action ">" is not a valid action name`,
		"?since=soon":   `since "soon": want a duration`,
		"?limit=-1":     `limit "-1"`,
		"?show=1000000": `limit "1000000": want 1 to`,
	} {
		var e apiError
		require.Equal(t, http.StatusBadRequest, tb.c.get("/api/dlq"+q, &e), q)
		require.Contains(t, e.Error, want, q)
	}
}

// Replay and purge are POSTs with the page's CSRF token: without it, or
// with another, they are refused and nothing changes.
func TestMutationsNeedCSRF(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	var e apiError
	require.Equal(t, http.StatusForbidden, tb.c.post("/api/dlq/purge", "", map[string]any{}, &e), "no cookie, no header")
	require.Equal(t, ui.ErrCSRF.Error(), e.Error)
	token := tb.c.csrf()
	require.Equal(t, http.StatusForbidden, tb.c.post("/api/dlq/purge", "", map[string]any{}, &e), "cookie, no header")
	require.Equal(t, http.StatusForbidden, tb.c.post("/api/dlq/replay", strings.Repeat("0", 64), map[string]any{}, &e), "another token")
	other := newClient(t, tb.srv.URL)
	require.Equal(t, http.StatusForbidden, other.post("/api/dlq/purge", token, map[string]any{}, &e), "the token without its cookie")
	require.Len(t, dlq(t, tb.b, deadletter.Filter{}), records+1, "nothing purged")
	seq := dlq(t, tb.b, deadletter.Filter{Job: "other"})[0].Seq
	for _, path := range []string{fmt.Sprintf("/api/dlq/%d/replay", seq), fmt.Sprintf("/api/dlq/%d/purge", seq)} {
		require.Equal(t, http.StatusForbidden, other.post(path, token, map[string]any{}, &e), "the token without its cookie: %s", path)
		require.Equal(t, http.StatusForbidden, tb.c.post(path, "", map[string]any{}, &e), "no header: %s", path)
		require.Equal(t, ui.ErrCSRF.Error(), e.Error)
	}
	require.Len(t, dlq(t, tb.b, deadletter.Filter{}), records+1, "nothing replayed or purged")

	// A cross-site form post is refused by the cross-origin check first.
	req, err := http.NewRequest(http.MethodPost, tb.srv.URL+"/api/dlq/purge", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set(ui.CSRFHeader, token)
	require.Equal(t, http.StatusForbidden, tb.c.do(req, nil).StatusCode)

	// Mutations are POST only (a GET asks for a dead letter "purge").
	require.Equal(t, http.StatusBadRequest, tb.c.get("/api/dlq/purge", &e))
	require.Len(t, dlq(t, tb.b, deadletter.Filter{}), records+1, "nothing purged")

	var purged struct{ Purged int }
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/purge", token, map[string]any{"job": "other"}, &purged))
	require.Equal(t, 1, purged.Purged)
}

// Purge deletes exactly what its filter matches; replay sends exactly that
// back to the work stream (deadletter.Replay), and with the key fixed a
// pool works the replayed records to success.
func TestReplayAndPurge(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	token := tb.c.csrf()
	var e apiError
	require.Equal(t, http.StatusBadRequest, tb.c.post("/api/dlq/purge", token, map[string]any{"class": "nope"}, &e))
	require.Contains(t, e.Error, `class "nope"`)
	require.Equal(t, http.StatusBadRequest, tb.c.post("/api/dlq/purge", token, map[string]any{"jbo": "x"}, &e))
	require.Contains(t, e.Error, `unknown field "jbo"`)
	require.Equal(t, http.StatusBadRequest, tb.c.post("/api/dlq/replay", token, map[string]any{"mode": "batch"}, &e))
	require.Contains(t, e.Error, `mode "batch"`)

	var purged struct{ Purged int }
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/purge", token, map[string]any{"class": "server"}, &purged))
	require.Equal(t, 1, purged.Purged)
	require.Empty(t, dlq(t, tb.b, deadletter.Filter{Job: "other"}))
	require.Len(t, dlq(t, tb.b, deadletter.Filter{Job: "keyed"}), records, "the other job's dead letters are kept")

	var rep struct {
		Matched, Replayed int
		Jobs              []string
		Note              string
	}
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/replay", token, map[string]any{"job": "keyed", "limit": 1}, &rep))
	require.Equal(t, 1, rep.Replayed)
	require.Len(t, dlq(t, tb.b, deadletter.Filter{Job: "keyed"}), records-1)
	n, err := tb.b.Count(context.Background(), broker.StreamWork, broker.WorkFilter("keyed"))
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "back in the work stream")

	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/replay", token, map[string]any{"job": "keyed"}, &rep))
	require.Equal(t, records-1, rep.Replayed)
	require.Equal(t, []string{"keyed"}, rep.Jobs)
	require.Equal(t, "noted", rep.Note)
	tb.mu.Lock()
	require.Equal(t, []string{"keyed", "keyed"}, tb.replayed)
	tb.mu.Unlock()
	require.Empty(t, dlq(t, tb.b, deadletter.Filter{}))

	require.NoError(t, os.WriteFile(tb.keyFile, []byte("sk-fixed"), 0o600)) // "fix the key"
	testenv.Pool(t, tb.b, worker.Config{Concurrency: 4, Jobs: []string{"keyed"}, Trust: tb.trust})
	_, p := testenv.WaitFinished(t, tb.b, "keyed", 30*time.Second)
	require.EqualValues(t, records, p.OK)
	require.Zero(t, p.Failed)
}

// A replay from the page is `jetpool retry`'s: dead letters of a context
// overflow replayed under a workflow with no overflow: block come back
// with the warning the CLI prints.
func TestReplayWarnsOfOverflow(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	require.NoError(t, deadletter.Publish(context.Background(), tb.b, &deadletter.Entry{Job: "keyed", Record: "long", Action: "answer",
		Reason: retry.ReasonContextOverflow, Class: retry.ClassContextOverflow, Error: "prompt too long",
		Attempts: 1, Deliveries: 1, Data: []byte(`{"id":"long","record":{"text":"x"}}`)}))
	var rep struct {
		Replayed int
		Warnings []string
	}
	token := tb.c.csrf()
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/replay", token, map[string]any{"job": "keyed", "reason": "context_overflow"}, &rep))
	require.Equal(t, 1, rep.Replayed)
	require.Len(t, rep.Warnings, 1)
	require.Contains(t, rep.Warnings[0], "1 dead letter of job keyed, action answer, failed with context_overflow")
}

// Read-only: the page is told, and replay and purge are refused even with
// the CSRF token.
func TestReadOnly(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{ReadOnly: true})
	var s struct {
		ReadOnly bool `json:"read_only"`
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/session", &s))
	require.True(t, s.ReadOnly)
	token := tb.c.csrf()
	seq := dlq(t, tb.b, deadletter.Filter{Job: "other"})[0].Seq
	for _, path := range []string{"/api/dlq/replay", "/api/dlq/purge", fmt.Sprintf("/api/dlq/%d/replay", seq), fmt.Sprintf("/api/dlq/%d/purge", seq)} {
		var e apiError
		require.Equal(t, http.StatusForbidden, tb.c.post(path, token, map[string]any{}, &e), path)
		require.Equal(t, ui.ErrReadOnly.Error(), e.Error)
	}
	require.Len(t, dlq(t, tb.b, deadletter.Filter{}), records+1)
	var l listing
	require.Equal(t, http.StatusOK, tb.c.get("/api/dlq", &l), "reading is allowed")
	require.Equal(t, records+1, l.Matched)
}

// With a token, every request needs it: the login form sets a session
// cookie, scripts send it as a Bearer token.
func TestToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	tb := setup(t, ui.Config{Token: token})
	var e apiError
	require.Equal(t, http.StatusUnauthorized, tb.c.get("/api/jobs", &e))
	require.Contains(t, e.Error, ui.TokenEnv)
	req, err := http.NewRequest(http.MethodGet, tb.srv.URL+"/", nil)
	require.NoError(t, err)
	res := tb.c.do(req, nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "login", res.Header.Get("Location"))
	require.Equal(t, http.StatusOK, tb.c.get("/login", nil))
	require.Equal(t, http.StatusOK, tb.c.get("/static/app.js", nil), "assets need no token: they hold no data")

	login := func(c *client, tok string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, tb.srv.URL+"/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return c.do(req, nil)
	}
	res = login(tb.c, "wrong")
	require.Equal(t, "login?wrong", res.Header.Get("Location"))
	require.Equal(t, http.StatusUnauthorized, tb.c.get("/api/jobs", nil))
	res = login(tb.c, token)
	require.Equal(t, "./", res.Header.Get("Location"))
	for _, c := range res.Cookies() {
		require.NotContains(t, c.Value, token, "the cookie holds a MAC of the token, not the token")
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs", nil))
	var purged struct{ Purged int }
	require.Equal(t, http.StatusOK, tb.c.post("/api/dlq/purge", tb.c.csrf(), map[string]any{"job": "other"}, &purged))
	require.Equal(t, 1, purged.Purged)

	script := newClient(t, tb.srv.URL)
	req, err = http.NewRequest(http.MethodGet, tb.srv.URL+"/api/jobs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	require.Equal(t, http.StatusOK, script.do(req, nil).StatusCode)
	req.Header.Set("Authorization", "Bearer nope")
	require.Equal(t, http.StatusUnauthorized, script.do(req, nil).StatusCode)

	// With a token, a Host that is not loopback is fine (behind a proxy).
	req, err = http.NewRequest(http.MethodGet, tb.srv.URL+"/api/jobs", nil)
	require.NoError(t, err)
	req.Host = "jetpool.example.com"
	req.Header.Set("Authorization", "Bearer "+token)
	require.Equal(t, http.StatusOK, script.do(req, nil).StatusCode)
}

// Without a token the dashboard answers only to loopback Host names, so a
// page that rebinds its own domain to 127.0.0.1 cannot read it.
func TestLoopbackHostOnly(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	for host, want := range map[string]int{
		"":                   http.StatusOK, // the server's own 127.0.0.1:port
		"localhost:8080":     http.StatusOK,
		"[::1]:8080":         http.StatusOK,
		"127.0.0.2":          http.StatusOK,
		"evil.example:8080":  http.StatusForbidden,
		"192.168.1.10:8080":  http.StatusForbidden,
		"localhost.evil.com": http.StatusForbidden,
	} {
		req, err := http.NewRequest(http.MethodGet, tb.srv.URL+"/api/jobs", nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		require.Equal(t, want, tb.c.do(req, nil).StatusCode, host)
	}
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true, "127.0.0.1:0": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "192.168.1.10:8080": false, "jetpool.example.com:80": false,
	} {
		err := ui.CheckAddr(addr, "")
		if ok {
			require.NoError(t, err, addr)
			continue
		}
		require.ErrorContains(t, err, ui.TokenEnv, addr)
		require.NoError(t, ui.CheckAddr(addr, "a-token"), addr)
	}
	require.ErrorContains(t, ui.CheckAddr("8080", ""), "missing port")
	// Listen refuses before it binds anything.
	_, err := ui.Listen(":0", ui.Config{B: &broker.Broker{}})
	require.ErrorContains(t, err, "is not loopback")
}

// The page itself: served with a strict content security policy (no
// inline script or style, nothing from elsewhere) and the CSRF cookie.
func TestPage(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	req, err := http.NewRequest(http.MethodGet, tb.srv.URL+"/", nil)
	require.NoError(t, err)
	res := tb.c.do(req, nil)
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'")
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	var csrf *http.Cookie
	for _, c := range res.Cookies() {
		if c.Name == "jetpool_ui_csrf" {
			csrf = c
		}
	}
	require.NotNil(t, csrf)
	require.True(t, csrf.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, csrf.SameSite)
	for _, asset := range []string{"/static/app.js", "/static/chart.js", "/static/dlq.js", "/static/app.css"} {
		require.Equal(t, http.StatusOK, tb.c.get(asset, nil), asset)
	}
}

// Providers: the shared limiter state the job's calls left in
// JETPOOL_LIMITS, and the workers answering jetpool.ctl.stats.
func TestProviders(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	type view struct {
		Limiters []struct {
			Key      string
			Mode     string
			Circuit  string
			InFlight int `json:"in_flight"`
			State    struct {
				Provider string
				Limits   struct{ RPM, Concurrency int }
			}
		}
		Workers []worker.Stats
	}
	var v view
	require.Equal(t, http.StatusOK, tb.c.get("/api/providers", &v))
	require.Len(t, v.Limiters, 1)
	l := v.Limiters[0]
	require.Equal(t, "sim", l.State.Provider)
	require.Equal(t, "limits", l.Mode)
	require.Equal(t, "closed", l.Circuit)
	require.Equal(t, 6000, l.State.Limits.RPM)
	require.Equal(t, 8, l.State.Limits.Concurrency)
	require.Empty(t, v.Workers)

	// A deployment's limiter: named with its provider, its learned pace shown.
	store, err := ratelimit.NewKVStore(context.Background(), tb.b)
	require.NoError(t, err)
	_, err = store.Update(context.Background(), ratelimit.Key("oa-eu", ""), func(s *ratelimit.State) bool {
		*s = ratelimit.State{Provider: "oa-eu", Of: "oa", Windows: map[string]ratelimit.Window{
			"w1": {N: 4, Pace: 3.5, Expires: time.Now().Add(time.Minute)}, "w2": {N: 4, Pace: 2, Expires: time.Now().Add(time.Minute)}}}
		return true
	})
	require.NoError(t, err)
	var raw struct {
		Limiters []struct {
			State struct{ Provider, Of string }
			Mode  string
			Pace  float64
		}
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/providers", &raw))
	require.Len(t, raw.Limiters, 2)
	dep := raw.Limiters[0] // sorted by key: oa-eu before sim
	require.Equal(t, "oa-eu", dep.State.Provider)
	require.Equal(t, "oa", dep.State.Of, "the provider it is a deployment of")
	require.Equal(t, "adaptive", dep.Mode)
	require.InDelta(t, 5.5, dep.Pace, 1e-9, "the live workers' learned pace, summed")

	testenv.Pool(t, tb.b, worker.Config{Concurrency: 2, Trust: tb.trust})
	require.Equal(t, http.StatusOK, tb.c.get("/api/providers", &v))
	require.Len(t, v.Workers, 1, "the pool answers")
	require.NotEmpty(t, v.Workers[0].Worker)
}

// Mounted under a prefix (http.StripPrefix), the page, its assets and its
// API answer there: the page's links are relative, and so are the
// redirects of the sign-in.
func TestMountedUnderPrefix(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{Token: "tok"})
	h, err := ui.New(ui.Config{B: tb.b, Token: "tok", Log: testenv.Logger(t)})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/jetpool/", http.StripPrefix("/jetpool", h))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := newClient(t, srv.URL)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/jetpool/", nil)
	require.NoError(t, err)
	res := c.do(req, nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "login", res.Header.Get("Location"), "relative: /jetpool/login")
	require.Equal(t, http.StatusOK, c.get("/jetpool/login", nil))
	require.Equal(t, http.StatusOK, c.get("/jetpool/static/app.css", nil))
	req, err = http.NewRequest(http.MethodGet, srv.URL+"/jetpool/api/jobs", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer tok")
	require.Equal(t, http.StatusOK, c.do(req, nil).StatusCode)
}

// Cancel, pause and resume a job from the dashboard: each needs the CSRF
// token, is refused read-only, and does what `jetpool job` does.
func TestSteerJob(t *testing.T) {
	t.Parallel()
	tb := setup(t, ui.Config{})
	wf := testenv.Workflow(t, fmt.Sprintf(keyedWorkflow, tb.keyFile))
	testenv.Dispatch(t, tb.b, wf, testenv.Records(t, 3), dispatcher.Options{JobID: "steered"})
	var e apiError
	require.Equal(t, http.StatusForbidden, tb.c.post("/api/jobs/steered/pause", "", map[string]any{}, &e), "no CSRF token")
	require.Equal(t, ui.ErrCSRF.Error(), e.Error)
	token := tb.c.csrf()

	var p struct {
		Paused bool   `json:"paused"`
		Queued uint64 `json:"queued"`
	}
	require.Equal(t, http.StatusOK, tb.c.post("/api/jobs/steered/pause", token, map[string]any{}, &p))
	require.True(t, p.Paused)
	require.EqualValues(t, 3, p.Queued)
	var v struct {
		Status struct {
			Paused bool `json:"paused"`
		} `json:"status"`
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/steered", &v))
	require.True(t, v.Status.Paused, "the job's page shows the pause")
	require.Equal(t, http.StatusOK, tb.c.post("/api/jobs/steered/resume", token, map[string]any{}, &p))
	require.False(t, p.Paused)

	var pr struct{ Priority int }
	require.Equal(t, http.StatusOK, tb.c.post("/api/jobs/steered/priority", token, map[string]any{"priority": 7}, &pr))
	require.Equal(t, 7, pr.Priority)
	var st struct {
		Status struct{ Priority int } `json:"status"`
	}
	require.Equal(t, http.StatusOK, tb.c.get("/api/jobs/steered", &st))
	require.Equal(t, 7, st.Status.Priority)
	require.Equal(t, http.StatusBadRequest, tb.c.post("/api/jobs/steered/priority", token, map[string]any{"priority": 0}, &e))
	require.Contains(t, e.Error, "out of range 1-1000")
	require.Equal(t, http.StatusBadRequest, tb.c.post("/api/jobs/steered/explode", token, map[string]any{}, &e))
	require.Equal(t, http.StatusNotFound, tb.c.post("/api/jobs/nope/cancel", token, map[string]any{}, &e))
	var c struct {
		Workers int    `json:"workers"`
		Queued  uint64 `json:"queued"`
	}
	require.Equal(t, http.StatusOK, tb.c.post("/api/jobs/steered/cancel", token, map[string]any{}, &c))
	require.EqualValues(t, 3, c.Queued)
	j, _, err := tb.b.GetJob(context.Background(), "steered")
	require.NoError(t, err)
	require.Equal(t, broker.JobCancelled, j.Status)
	require.Equal(t, "cancelled from the dashboard", j.Reason)
	require.Equal(t, http.StatusConflict, tb.c.post("/api/jobs/steered/pause", token, map[string]any{}, &e), "an ended job")
	require.Contains(t, e.Error, "job has ended")

	ro := setup(t, ui.Config{ReadOnly: true})
	require.Equal(t, http.StatusForbidden, ro.c.post("/api/jobs/keyed/cancel", ro.c.csrf(), map[string]any{}, &e))
	require.Equal(t, ui.ErrReadOnly.Error(), e.Error)
}
