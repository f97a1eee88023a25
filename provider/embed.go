package provider

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	"github.com/jetpool/jetpool/retry"
)

// EmbedRequest is one embeddings call: several inputs (records' texts), one
// vector each, in order.
type EmbedRequest struct {
	Model  string
	Inputs []string
	// Params are passed to the provider: dimensions, encoding_format, user
	// (OpenAI); dimensions (as outputDimensionality), task_type, title
	// (Gemini).
	Params map[string]any
	// RecordIDs, one per input, let the sim seed its faults per record.
	RecordIDs []string
}

// EmbedResponse is a successful embeddings call.
type EmbedResponse struct {
	Vectors [][]float32 // one per input, in the order of EmbedRequest.Inputs
	// Usage counts the request's input tokens (Gemini reports none).
	Usage   Usage
	Model   string
	Latency time.Duration
}

// Embedder is a Provider that also makes embeddings (openai, gemini, sim;
// Anthropic has no embeddings API).
type Embedder interface {
	Embed(ctx context.Context, req EmbedRequest) (EmbedResponse, error)
}

// Inputs per embeddings request that each provider takes.
const (
	OpenAIEmbedMaxInputs = 2048 // POST /embeddings: input arrays up to 2048 items
	GeminiEmbedMaxInputs = 100  // batchEmbedContents: up to 100 requests
	SimEmbedMaxInputs    = 2048
	// SimDimensionsDefault is the length of the sim's vectors (SimConfig.Dimensions).
	SimDimensionsDefault = 256
)

// EmbedMaxInputs is the most inputs one embeddings request of a provider
// kind may carry; 0 when the kind has no embeddings API.
func EmbedMaxInputs(kind string) int {
	switch kind {
	case KindOpenAI:
		return OpenAIEmbedMaxInputs
	case KindGemini:
		return GeminiEmbedMaxInputs
	case KindSim:
		return SimEmbedMaxInputs
	}
	return 0
}

// embedTimed runs an embeddings call and sets its Latency.
func embedTimed(call func() (EmbedResponse, error)) (EmbedResponse, error) {
	start := time.Now()
	out, err := call()
	if err == nil {
		out.Latency = time.Since(start)
	}
	return out, err
}

// post sends one POST of body to target, with the key and within the
// timeout, and reads the answer whole; the key is returned for the decoding
// to redact.
func (c *client) post(ctx context.Context, target string, body any, model string) ([]byte, string, *retry.Error) {
	key, kerr := c.key(model)
	if kerr != nil {
		return nil, "", kerr
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	resp, rerr := c.send(ctx, http.MethodPost, target, body, model, key, nil)
	if rerr != nil {
		return nil, key, rerr
	}
	defer resp.Body.Close()
	b, rerr := c.readBody(ctx, resp, model, key)
	return b, key, rerr
}

// checkCount fails an answer that does not have one vector per input.
func (c *client) checkCount(out EmbedResponse, inputs int, model string) *retry.Error {
	if len(out.Vectors) != inputs {
		return c.invalidResponse(model, fmt.Sprintf("%d embeddings for %d inputs", len(out.Vectors), inputs))
	}
	for i, v := range out.Vectors {
		if len(v) == 0 {
			return c.invalidResponse(model, fmt.Sprintf("embedding %d is empty", i))
		}
	}
	return nil
}

// --- OpenAI (and compatible): POST /embeddings -----------------------------

// EmbedBody is the JSON body of an OpenAI embeddings request (also an
// OpenAI Batch line's, for the batch package).
func EmbedBody(req EmbedRequest) map[string]any {
	return mergeParams(req.Params, map[string]any{"model": req.Model, "input": req.Inputs})
}

// Embed implements Embedder.
func (p *openAI) Embed(ctx context.Context, req EmbedRequest) (EmbedResponse, error) {
	return embedTimed(func() (EmbedResponse, error) {
		b, key, rerr := p.post(ctx, p.endpoint("embeddings", nil), EmbedBody(req), req.Model)
		if rerr != nil {
			return EmbedResponse{}, rerr
		}
		out, rerr := p.decodeEmbeddings(b, req.Model, key)
		if rerr != nil {
			return EmbedResponse{}, rerr
		}
		if rerr := p.checkCount(out, len(req.Inputs), req.Model); rerr != nil {
			return EmbedResponse{}, rerr
		}
		return out, nil
	})
}

type openAIEmbedding struct {
	Index int `json:"index"`
	// Embedding is a list of floats, or base64 little-endian float32
	// with encoding_format: base64.
	Embedding json.RawMessage `json:"embedding"`
}

type openAIEmbeddings struct {
	Data  []openAIEmbedding `json:"data"`
	Model string            `json:"model"`
	Usage *openAIUsage      `json:"usage"`
	Error json.RawMessage   `json:"error"`
}

// decodeEmbeddings parses an embeddings list, in input order (by index).
func (c *client) decodeEmbeddings(b []byte, model, key string) (EmbedResponse, *retry.Error) {
	var r openAIEmbeddings
	if rerr := c.decodeBody(b, &r, model, key); rerr != nil {
		return EmbedResponse{}, rerr
	}
	if hasError(r.Error) && len(r.Data) == 0 {
		return EmbedResponse{}, c.inBandError(b, model, key)
	}
	slices.SortStableFunc(r.Data, func(a, b openAIEmbedding) int { return cmp.Compare(a.Index, b.Index) })
	out := EmbedResponse{Model: cmp.Or(r.Model, model)}
	for i, d := range r.Data {
		v, err := vector(d.Embedding)
		if err != nil {
			return EmbedResponse{}, c.invalidResponse(model, fmt.Sprintf("data[%d].embedding %v", i, err))
		}
		out.Vectors = append(out.Vectors, v)
	}
	if r.Usage != nil {
		out.Usage = Usage{InputTokens: r.Usage.PromptTokens}
	}
	return out, nil
}

// EmbedResponseBody parses an OpenAI embeddings body with one input (an
// OpenAI Batch result line's).
func (w *Wire) EmbedResponseBody(body []byte, model string) (EmbedResponse, error) {
	out, rerr := w.c.decodeEmbeddings(body, model, "")
	if rerr != nil {
		return EmbedResponse{}, rerr
	}
	if rerr := w.c.checkCount(out, 1, model); rerr != nil {
		return EmbedResponse{}, rerr
	}
	return out, nil
}

// vector decodes an embedding: a list of numbers, or base64 float32.
func vector(raw json.RawMessage) ([]float32, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(b)%4 != 0 {
			return nil, fmt.Errorf("is a string that is not base64 float32")
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	}
	var v []float32
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("is %s, want a list of numbers", jsonKind(raw))
	}
	return v, nil
}

// --- Gemini: embedContent, batchEmbedContents ------------------------------

// geminiEmbedParams maps common parameter names onto an EmbedContentRequest's.
var geminiEmbedParams = map[string]string{
	"dimensions":            "outputDimensionality",
	"output_dimensionality": "outputDimensionality",
	"task_type":             "taskType",
}

// embedContent is one EmbedContentRequest: the text and the params.
func geminiEmbedContent(model, text string, params map[string]any, batched bool) map[string]any {
	r := map[string]any{}
	for k, v := range params {
		if g, ok := geminiEmbedParams[k]; ok {
			k = g
		}
		r[k] = v
	}
	r["content"] = geminiContent{Parts: []geminiPart{{Text: text}}}
	if batched {
		r["model"] = modelPath(model) // each request of a batch names its model
	}
	return r
}

// Embed implements Embedder: embedContent for one input, batchEmbedContents
// for more.
func (p *gemini) Embed(ctx context.Context, req EmbedRequest) (EmbedResponse, error) {
	return embedTimed(func() (EmbedResponse, error) {
		target := p.endpoint(modelPath(req.Model)+":embedContent", nil)
		var body any
		if len(req.Inputs) == 1 {
			body = geminiEmbedContent(req.Model, req.Inputs[0], req.Params, false)
		} else {
			target = p.endpoint(modelPath(req.Model)+":batchEmbedContents", nil)
			reqs := make([]map[string]any, len(req.Inputs))
			for i, in := range req.Inputs {
				reqs[i] = geminiEmbedContent(req.Model, in, req.Params, true)
			}
			body = map[string]any{"requests": reqs}
		}
		b, key, rerr := p.post(ctx, target, body, req.Model)
		if rerr != nil {
			return EmbedResponse{}, rerr
		}
		type values struct {
			Values json.RawMessage `json:"values"`
		}
		var r struct {
			Embedding  *values         `json:"embedding"`
			Embeddings []values        `json:"embeddings"`
			Error      json.RawMessage `json:"error"`
		}
		if rerr := p.decodeBody(b, &r, req.Model, key); rerr != nil {
			return EmbedResponse{}, rerr
		}
		if hasError(r.Error) {
			return EmbedResponse{}, p.inBandError(b, req.Model, key)
		}
		if r.Embedding != nil {
			r.Embeddings = append(r.Embeddings, *r.Embedding)
		}
		out := EmbedResponse{Model: req.Model}
		for i, e := range r.Embeddings {
			v, err := vector(e.Values)
			if err != nil {
				return EmbedResponse{}, p.invalidResponse(req.Model, fmt.Sprintf("embeddings[%d].values %v", i, err))
			}
			out.Vectors = append(out.Vectors, v)
		}
		if rerr := p.checkCount(out, len(req.Inputs), req.Model); rerr != nil {
			return EmbedResponse{}, rerr
		}
		return out, nil
	})
}
