package worker_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/worker"
)

// scripted is an OpenAI-format endpoint whose every record answers a
// random script of replies (429s with random Retry-After, 5xx, dropped
// connections, calls that outlast the provider's timeout, 200s), and which
// counts each record's calls.
type scripted struct {
	mu     sync.Mutex
	seed   uint64
	calls  map[string]int
	hang   time.Duration
	record *regexp.Regexp
}

// recordOf is the record an OpenAI-format request's first message names
// (record, a pattern whose group is its number: "r" + the number), or
// "" when it names none.
func recordOf(r *http.Request, record *regexp.Regexp) string {
	var req struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if len(req.Messages) > 0 {
		if m := record.FindStringSubmatch(req.Messages[0].Content); m != nil {
			return "r" + m[1]
		}
	}
	return ""
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := cmp.Or(recordOf(r, s.record), "?")
	s.mu.Lock()
	s.calls[id]++
	n := s.calls[id]
	s.mu.Unlock()
	// The record's nth reply, the same whichever worker asks.
	num, _ := strconv.Atoi(id[1:])
	rng := rand.New(rand.NewPCG(s.seed, uint64(num)*1000+uint64(n)))
	switch k := rng.IntN(10); {
	case k < 2:
		ra := strconv.Itoa(rng.IntN(3)) // 0–2 s
		providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", ra),
			Body: providertest.OpenAIError("Rate limit reached for requests", "requests", "rate_limit_exceeded")}.ServeHTTP(w, r)
	case k < 3:
		providertest.Reply{Status: 503, Body: providertest.OpenAIError("The server is overloaded", "server_error", "")}.ServeHTTP(w, r)
	case k < 4:
		providertest.ResetBeforeHeaders.ServeHTTP(w, r)
	case k < 5:
		select { // outlasts the provider's timeout
		case <-time.After(s.hang):
		case <-r.Context().Done():
		}
	default:
		providertest.Reply{Status: 200, Body: providertest.OpenAIChat("gpt-4o-mini", "ok", 5, 1)}.ServeHTTP(w, r)
	}
}

// countsEveryCall checks that a record's result counts every call the
// server saw. It may count more only for calls the server may never have
// seen: a call that timed out or broke before an answer (on a busy host
// its request may not have left before the timeout) and a call a silent
// delivery left open (counted lost, since nobody can know).
func countsEveryCall(t *testing.T, id string, calls int, rec broker.Recovery) {
	t.Helper()
	unsure := 0
	for _, f := range rec.Failures {
		if f.Class == string(retry.ClassNetwork) || strings.HasPrefix(f.Error, "LostCall") {
			unsure++
		}
	}
	require.GreaterOrEqual(t, rec.Attempts, calls, "%s: the result counts every call: %+v", id, rec)
	require.LessOrEqual(t, rec.Attempts, calls+unsure, "%s: the result counts only calls that may have been made: %+v", id, rec)
}

// Over random scripts and retry policies, no record makes more calls than
// validate's bound, and every record ends with exactly one final result; a
// failed one made at least one call (no wait here reaches max_wait).
func TestCallsWithinBound(t *testing.T) {
	t.Parallel()
	policies := []string{
		`false`,
		`{max_attempts: 2, backoff: 20ms, redeliver: {max_deliveries: 1}}`,
		`{max_attempts: 1, backoff: 20ms, redeliver: {max_deliveries: 3, backoff: 50ms}}`,
		`{max_attempts: 3, backoff: 20ms, max_backoff: 100ms, redeliver: {max_deliveries: 2, backoff: 50ms}}`,
	}
	for i, pol := range policies {
		t.Run(fmt.Sprintf("policy %d", i), func(t *testing.T) {
			t.Parallel()
			const n = 30
			s := &scripted{seed: uint64(i) + 1, calls: map[string]int{}, hang: 2 * time.Second, record: regexp.MustCompile(`record (\d+)`)}
			srv := providertest.NewServer(t, s)
			b := testenv.Broker(t, testenv.Options{AckWait: 3 * time.Second})
			wf := testenv.Workflow(t, fmt.Sprintf(`
providers:
  p: {kind: openai, base_url: %q, timeout: 300ms}
actions:
  - name: act
    provider: p
    model: gpt-4o-mini
    prompt: "do {{ .text }}"
    retry: %s
`, srv.URL+"/v1", pol))
			res := testenv.Dispatch(t, b, wf, testenv.Records(t, n), dispatcher.Options{})
			testenv.Pool(t, b, worker.Config{Concurrency: 8})
			job, p := testenv.WaitFinished(t, b, res.Job.ID, 90*time.Second)
			bound := wf.Actions[0].Bound(wf.Providers["p"]).Calls
			results := testenv.Results(t, b, job)
			require.Len(t, results, n, "one final result a record")
			s.mu.Lock()
			defer s.mu.Unlock()
			most := 0
			for id, r := range results {
				calls := s.calls[id]
				most = max(most, calls)
				require.LessOrEqual(t, calls, bound, "%s: %d calls, validate's bound is %d (%s)", id, calls, bound, pol)
				countsEveryCall(t, id, calls, r.Recovery)
				if r.Status == broker.StatusFailed {
					require.Positive(t, r.Recovery.Attempts, "%s failed without a call", id)
				}
			}
			t.Logf("%s: %d ok, %d failed, at most %d calls a record (bound %d)", pol, p.OK, p.Failed, most, bound)
		})
	}
}
