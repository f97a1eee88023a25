package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

// A scrape of /metrics passes promlint (Prometheus's naming rules), has no
// `job` label (the target's own), and carries the per-job gauges read from
// the server, which end with the job's consumer.
func TestMetricsScrape(t *testing.T) {
	ctx := context.Background()
	b := testenv.Broker(t)
	testenv.Dispatch(t, b, testenv.Workflow(t, simWorkflow), testenv.Records(t, 7), dispatcher.Options{JobID: "scraped"})
	for _, subj := range []string{broker.DLQSubject("scraped", "a"), broker.DLQSubject("scraped", "a"), broker.DLQSubject("gone", "a")} {
		_, err := b.JS.Publish(ctx, subj, []byte(`{"id":"x"}`))
		require.NoError(t, err)
	}

	m := newMetrics()
	m.Record("scraped", "a", broker.StatusOK, "")
	m.Record("scraped", "a", string(retry.ReasonPermanent), retry.ClassAuth)
	m.Call("sim", "sim-1", "", 120*time.Millisecond, provider.Usage{InputTokens: 3, OutputTokens: 5})
	m.Call("sim", "sim-1", retry.ClassAuth, 10*time.Millisecond, provider.Usage{})
	m.Delivery("scraped")
	m.InFlight(1)
	m.Limiter(ratelimit.Status{Provider: "sim", Key: "k1", Limit: 8})
	// A provider's deployment: labelled with the provider and its own name.
	m.CallAt("oa", "oa-east", "gpt-4.1-mini", "", 50*time.Millisecond, provider.Usage{InputTokens: 9, CachedInputTokens: 4, ReasoningTokens: 2, OutputTokens: 3})
	m.Limiter(ratelimit.Status{Provider: "oa-east", Of: "oa", Key: "k2", Limit: 4, Congested: 2})
	srv := httptest.NewServer(metricsMux(&env{log: testenv.Logger(t)}, m, b))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, body := get("/metrics")
	require.Equal(t, http.StatusOK, code)
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems, "promlint")
	assert.NotRegexp(t, `[{,]job="`, body, "no metric may carry a job label: Prometheus renames it exported_job")
	for _, want := range []string{
		`jetpool_backlog{jetpool_job="scraped"} 7`,
		`jetpool_dead_letters{jetpool_job="scraped"} 2`,
		`jetpool_dlq_messages 3`,
		`jetpool_records_total{action="a",class="auth",outcome="permanent"} 1`,
		`jetpool_calls_total{class="",deployment="",model="sim-1",provider="sim"} 1`,
		`jetpool_calls_total{class="auth",deployment="",model="sim-1",provider="sim"} 1`,
		`jetpool_call_duration_seconds_count{deployment="",model="sim-1",provider="sim"} 2`,
		`jetpool_tokens_total{deployment="",direction="output",model="sim-1",provider="sim"} 5`,
		`jetpool_calls_total{class="",deployment="oa-east",model="gpt-4.1-mini",provider="oa"} 1`,
		`jetpool_tokens_total{deployment="oa-east",direction="cached_input",model="gpt-4.1-mini",provider="oa"} 4`,
		`jetpool_tokens_total{deployment="oa-east",direction="reasoning",model="gpt-4.1-mini",provider="oa"} 2`,
		`jetpool_limiter_concurrency{deployment="oa-east",key="k2",provider="oa"} 4`,
		`jetpool_limiter_congested_total{deployment="oa-east",key="k2",provider="oa"} 2`,
		`jetpool_deliveries_total 1`,
		`jetpool_in_flight 1`,
		`jetpool_limiter_concurrency{deployment="",key="k1",provider="sim"} 8`,
	} {
		assert.Contains(t, body, want)
	}
	assert.Regexp(t, regexp.MustCompile(`jetpool_build_info\{commit="(?:[0-9a-f]+|unknown)",goversion="`+regexp.QuoteMeta(runtime.Version())+`",version="[^"]+"\} 1`), body)
	assert.NotContains(t, body, `jetpool_dead_letters{jetpool_job="gone"}`, "per job only for jobs with a work consumer")
	assert.NotContains(t, body, "jetpool_limiter_absorbed")

	// The job's series end with its consumer.
	_, err = b.DeleteJob(ctx, "scraped")
	require.NoError(t, err)
	_, body = get("/metrics")
	assert.NotContains(t, body, `jetpool_job="scraped"`)
	assert.Contains(t, body, `jetpool_dlq_messages 1`)

	code, _ = get("/healthz")
	assert.Equal(t, http.StatusOK, code)
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusOK, code)
	m.setReady(false)
	code, _ = get("/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
}
