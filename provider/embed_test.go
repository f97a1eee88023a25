package provider_test

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

var vecs = [][]float32{{0.25, -0.5, 0.125}, {1, 0, -1}, {0.5, 0.5, 0.5}}

// embedCell is one embeddings case for one adapter.
type embedCell struct {
	serve  http.Handler
	sim    *provider.SimConfig
	skip   string
	inputs []string
	params map[string]any
	// want: vectors (nil: a success of dims-long vectors, for the sim),
	// the request path and body, the usage; or the error.
	vectors [][]float32
	dims    int
	path    string
	body    string
	usage   provider.Usage
	err     *wantErr
}

// TestEmbedSuite runs the embeddings behaviours against every adapter
// that has an embeddings API (Anthropic has none).
func TestEmbedSuite(t *testing.T) {
	t.Parallel()
	three := []string{"a", "b", "c"}
	b64 := func(v []float32) string {
		b := make([]byte, 4*len(v))
		for i, f := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		}
		return base64.StdEncoding.EncodeToString(b)
	}
	cases := map[string]map[string]embedCell{
		"several inputs, one request": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIEmbeddings("text-embedding-3-small", vecs, 9)},
				inputs: three, vectors: vecs, usage: provider.Usage{InputTokens: 9},
				path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":["a","b","c"],"dimensions":3}`, params: map[string]any{"dimensions": 3}},
			provider.KindGemini: {serve: providertest.Reply{Status: 200, Body: providertest.GeminiEmbeddings(vecs)},
				inputs: three, vectors: vecs, params: map[string]any{"dimensions": 3, "task_type": "RETRIEVAL_DOCUMENT"},
				path: "/v1beta/models/gemini-embedding-001:batchEmbedContents",
				body: `{"requests":[` +
					`{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"a"}]},"outputDimensionality":3,"taskType":"RETRIEVAL_DOCUMENT"},` +
					`{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"b"}]},"outputDimensionality":3,"taskType":"RETRIEVAL_DOCUMENT"},` +
					`{"model":"models/gemini-embedding-001","content":{"parts":[{"text":"c"}]},"outputDimensionality":3,"taskType":"RETRIEVAL_DOCUMENT"}]}`},
			provider.KindSim: {inputs: three, params: map[string]any{"dimensions": 3.0}, dims: 3, usage: provider.Usage{InputTokens: 3}},
		},
		"one input": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIEmbeddings("text-embedding-3-small", vecs[:1], 1)},
				inputs: three[:1], vectors: vecs[:1], usage: provider.Usage{InputTokens: 1},
				path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":["a"]}`},
			provider.KindGemini: {serve: providertest.Reply{Status: 200, Body: providertest.GeminiEmbedding(vecs[0])},
				inputs: three[:1], vectors: vecs[:1],
				path: "/v1beta/models/gemini-embedding-001:embedContent", body: `{"content":{"parts":[{"text":"a"}]}}`},
			provider.KindSim: {inputs: three[:1], dims: provider.SimDimensionsDefault, usage: provider.Usage{InputTokens: 1}},
		},
		"base64 vectors": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 200, Body: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":"` + b64(vecs[1]) + `"}],"model":"text-embedding-3-small","usage":{"prompt_tokens":1,"total_tokens":1}}`},
				inputs: three[:1], vectors: vecs[1:2], usage: provider.Usage{InputTokens: 1}, params: map[string]any{"encoding_format": "base64"},
				path: "/v1/embeddings", body: `{"model":"text-embedding-3-small","input":["a"],"encoding_format":"base64"}`},
			provider.KindGemini: {skip: "Gemini sends numbers only"},
			provider.KindSim:    {skip: "the sim has no wire"},
		},
		"rate limit": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 429, Header: providertest.Header("Retry-After", "3"),
				Body: providertest.OpenAIError("Rate limit reached for text-embedding-3-small on tokens per min (TPM): Limit 1000000, Used 999000, Requested 5000.", "tokens", "rate_limit_exceeded")},
				inputs: three, err: &wantErr{class: retry.ClassRateLimit, status: 429, msg: "Rate limit reached", retryAfter: 3 * time.Second}},
			provider.KindGemini: {serve: providertest.Reply{Status: 429, Body: providertest.GeminiError(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted (e.g. check quota).",
				providertest.GeminiRetryInfo("7s"))},
				inputs: three, err: &wantErr{class: retry.ClassRateLimit, status: 429, msg: "Resource has been exhausted", retryAfter: 7 * time.Second}},
			provider.KindSim: {sim: &provider.SimConfig{FailFirst: 1, FailClass: "rate_limit"}, inputs: three,
				err: &wantErr{class: retry.ClassRateLimit, status: 429, retryAfter: time.Second}},
		},
		"an input too long": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 400, Body: providertest.OpenAIError("This model's maximum context length is 8192 tokens, however you requested 9001 tokens (9001 in your prompt; 0 for the completion). Please reduce your prompt; or completion length.", "invalid_request_error", "")},
				inputs: three, err: &wantErr{class: retry.ClassContextOverflow, status: 400, msg: "maximum context length"}},
			provider.KindGemini: {serve: providertest.Reply{Status: 400, Body: providertest.GeminiError(400, "INVALID_ARGUMENT", "Request payload size exceeds the limit: 10000 bytes.")},
				inputs: three, err: &wantErr{class: retry.ClassInvalidRequest, status: 400, msg: "payload size exceeds"}},
			provider.KindSim: {sim: &provider.SimConfig{FailFirst: 1, FailClass: "context_overflow"}, inputs: three,
				err: &wantErr{class: retry.ClassContextOverflow, status: 400}},
		},
		"fewer vectors than inputs": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 200, Body: providertest.OpenAIEmbeddings("text-embedding-3-small", vecs[:2], 9)},
				inputs: three, err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "2 embeddings for 3 inputs"}},
			provider.KindGemini: {serve: providertest.Reply{Status: 200, Body: providertest.GeminiEmbeddings(vecs[:2])},
				inputs: three, err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "2 embeddings for 3 inputs"}},
			provider.KindSim: {skip: "the sim has no wire"},
		},
		"a vector of the wrong shape": {
			provider.KindOpenAI: {serve: providertest.Reply{Status: 200, Body: `{"object":"list","data":[{"object":"embedding","index":0,"embedding":{"x":1}}],"model":"m"}`},
				inputs: three[:1], err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "data[0].embedding is an object, want a list of numbers"}},
			provider.KindGemini: {serve: providertest.Reply{Status: 200, Body: `{"embedding":{"values":"x"}}`},
				inputs: three[:1], err: &wantErr{class: retry.ClassUnknown, typeName: "InvalidResponseError", msg: "embeddings[0].values is a string that is not base64"}},
			provider.KindSim: {skip: "the sim has no wire"},
		},
	}
	models := map[string]string{provider.KindOpenAI: "text-embedding-3-small", provider.KindGemini: "gemini-embedding-001", provider.KindSim: "sim-1"}
	for name, cells := range cases {
		for _, kind := range []string{provider.KindOpenAI, provider.KindGemini, provider.KindSim} {
			t.Run(kind+"/"+name, func(t *testing.T) {
				t.Parallel()
				c, ok := cells[kind]
				require.True(t, ok, "case %q has no cell for %s", name, kind)
				if c.skip != "" {
					t.Skip(c.skip)
				}
				cfg := provider.Config{Name: "fake-" + kind, Kind: kind, Timeout: 5 * time.Second, APIKeyEnv: keyEnv, Sim: c.sim}
				var srv *providertest.Server
				if kind != provider.KindSim {
					srv = providertest.NewServer(t, c.serve)
					cfg.BaseURL = providertest.Config(kind, srv).BaseURL
				}
				e, ok := providertest.New(t, cfg).(provider.Embedder)
				require.True(t, ok, "%s embeds", kind)
				resp, err := e.Embed(context.Background(), provider.EmbedRequest{Model: models[kind], Inputs: c.inputs, Params: c.params,
					RecordIDs: c.inputs})
				if c.err != nil {
					requireError(t, err, *c.err, cfg.Name, models[kind])
					return
				}
				require.NoError(t, err)
				require.Positive(t, resp.Latency)
				require.Equal(t, c.usage, resp.Usage)
				if c.vectors != nil {
					require.Equal(t, c.vectors, resp.Vectors)
				} else {
					require.Len(t, resp.Vectors, len(c.inputs))
					for _, v := range resp.Vectors {
						require.Len(t, v, c.dims)
						var n float64
						for _, f := range v {
							n += float64(f) * float64(f)
						}
						require.InDelta(t, 1, n, 1e-4, "a unit vector")
					}
				}
				if srv != nil {
					r := srv.Requests()[0]
					require.Equal(t, c.path, r.Path)
					require.JSONEq(t, c.body, string(r.Body))
					require.NotContains(t, r.Query, "key=")
				}
			})
		}
	}
	t.Run("anthropic has no embeddings", func(t *testing.T) {
		p := providertest.New(t, provider.Config{Name: "a", Kind: provider.KindAnthropic})
		_, ok := p.(provider.Embedder)
		require.False(t, ok)
		require.Zero(t, provider.EmbedMaxInputs(provider.KindAnthropic))
	})
}

// The sim's vectors are the same for the same text, and differ between texts.
func TestSimEmbedDeterministic(t *testing.T) {
	t.Parallel()
	e := providertest.New(t, provider.Config{Name: "s", Kind: provider.KindSim, Sim: &provider.SimConfig{Dimensions: 8}}).(provider.Embedder)
	a, err := e.Embed(context.Background(), provider.EmbedRequest{Inputs: []string{"x", "y", "x"}})
	require.NoError(t, err)
	require.Len(t, a.Vectors[0], 8)
	require.Equal(t, a.Vectors[0], a.Vectors[2])
	require.NotEqual(t, a.Vectors[0], a.Vectors[1])
}
