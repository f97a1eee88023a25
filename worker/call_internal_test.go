package worker

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// callRunner is a jobRunner with just what call needs: a limiter registry
// over an in-memory store, and one openai provider at srv.
func callRunner(t *testing.T, srv *providertest.Server) (*jobRunner, provider.Provider) {
	t.Helper()
	reg, err := ratelimit.NewRegistry(context.Background(), ratelimit.NewMemStore(), ratelimit.Config{})
	require.NoError(t, err)
	t.Cleanup(reg.Close)
	cfg := providertest.Config(provider.KindOpenAI, srv)
	jr := &jobRunner{p: &Pool{cfg: Config{Clock: retry.SystemClock{}, Metrics: nopMetrics{}}, limits: reg},
		wf: &workflow.Workflow{Providers: map[string]provider.Config{cfg.Name: cfg}}}
	return jr, providertest.New(t, cfg)
}

var askHi = provider.Request{Model: "m", Messages: []provider.Message{{Role: "user", Content: "hi"}}}

// call makes exactly one HTTP request per invocation, a 429 included: the
// 429 comes back to the session as the attempt it is.
func TestCallIsOneRequest(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", "1"),
			Body: providertest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")}.ServeHTTP(w, r)
	}))
	jr, pr := callRunner(t, srv)
	_, err := jr.call(context.Background(), pr.Name(), pr, askHi, nil)
	require.Equal(t, retry.ClassRateLimit, retry.AsError(err).Class)
	require.Equal(t, int64(1), n.Load())
	require.Equal(t, int64(1), jr.p.Calls())
}

// A wait longer than the hold limit comes back as the limiter's
// *ratelimit.WaitError, unchanged, and no request is made: it is no
// attempt.
func TestCallReturnsWaitErrorUnchanged(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", "120",
			"X-Ratelimit-Remaining-Requests", "0", "X-Ratelimit-Reset-Requests", "2m0s"),
			Body: providertest.OpenAIError("Rate limit reached", "requests", "rate_limit_exceeded")}.ServeHTTP(w, r)
	}))
	jr, pr := callRunner(t, srv)
	_, err := jr.call(context.Background(), pr.Name(), pr, askHi, nil) // the bucket is empty: a shared cooldown
	require.Equal(t, retry.ClassRateLimit, retry.AsError(err).Class)
	start := time.Now()
	_, err = jr.call(context.Background(), pr.Name(), pr, askHi, nil)
	require.Less(t, time.Since(start), 30*time.Second, "not waited in the slot (the cooldown is 2m)")
	var we *ratelimit.WaitError
	require.True(t, errors.As(err, &we), "%T: %v", err, err)
	require.Equal(t, ratelimit.WaitCooldown, we.Kind)
	require.WithinDuration(t, start.Add(2*time.Minute), we.Until, 30*time.Second)
	var re *retry.Error
	require.False(t, errors.As(err, &re), "not a *retry.Error: never counted as an attempt")
	require.Equal(t, int64(1), n.Load(), "no request was made for the wait")
}
