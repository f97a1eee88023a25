package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Provider limits of one batch (what the provider accepts in one file or request).
const (
	OpenAIMaxRequests    = 50_000
	OpenAIMaxBytes       = 200 << 20
	AnthropicMaxRequests = 100_000
	AnthropicMaxBytes    = 256 << 20
	// MaxResultBytes caps one result file (or results stream) read from a provider.
	MaxResultBytes = 2 << 30
)

// ErrNoFind is returned by Client.Find when the provider cannot look a batch
// up by jetpool's key (Anthropic's Message Batches carry no metadata).
var ErrNoFind = errors.New("the provider cannot find a batch by its jetpool key")

// Limits are the provider's caps of one batch.
type Limits struct {
	MaxRequests int
	MaxBytes    int
}

// Counts are a batch's request counts as the provider reports them.
type Counts struct {
	Total      int `json:"total"`
	Processing int `json:"processing"`
	Succeeded  int `json:"succeeded"`
	Failed     int `json:"failed"`
}

// Status is a provider batch's state.
type Status struct {
	ID     string `json:"id"`
	State  string `json:"state"` // the provider's word: in_progress, completed, expired, ended, …
	Ended  bool   `json:"ended"` // no more results will come; Results may be read
	Counts Counts `json:"counts"`
	// Where the results are (provider-specific).
	OutputFile string `json:"output_file,omitempty"`
	ErrorFile  string `json:"error_file,omitempty"`
	ResultsURL string `json:"results_url,omitempty"`
	// Endpoint is the batch's endpoint (OpenAI: /v1/chat/completions or
	// /v1/embeddings), which says how to read its results.
	Endpoint string `json:"endpoint,omitempty"`
	// Err is set when the whole batch failed (OpenAI status failed): every
	// request of it failed with this error.
	Err *retry.Error `json:"-"`
}

// Entry is one returned result, mapped by CustomID.
type Entry struct {
	CustomID string
	Response provider.Response
	Err      *retry.Error // nil on success
	// NotReturned: the provider gave up on the request (expired or canceled);
	// the record is failed with reason batch_not_returned.
	NotReturned bool
	State       string // the provider's word when NotReturned
}

// Client is one provider's batch API.
type Client interface {
	Kind() string
	Limits() Limits
	// Line encodes one request of a batch under customID.
	Line(customID string, req provider.Request) ([]byte, error)
	// Submit creates a batch of lines, tagged with key where the provider
	// allows it, and returns the provider's batch id.
	Submit(ctx context.Context, key string, lines [][]byte) (string, error)
	// Find returns the id of a batch created with key ("" when none), or ErrNoFind.
	Find(ctx context.Context, key string) (string, error)
	// Status polls a batch.
	Status(ctx context.Context, id string) (Status, error)
	// Results calls fn for every entry of an ended batch.
	Results(ctx context.Context, st Status, fn func(Entry) error) error
}

// EmbedClient is a Client whose batches can also make embeddings (OpenAI
// Batch's /v1/embeddings): one record's input per line, its vector in the
// entry's Response.Embedding.
type EmbedClient interface {
	Client
	// EmbedLine encodes one embeddings request of a batch under customID.
	EmbedLine(customID string, req provider.EmbedRequest) ([]byte, error)
}

// NewClient returns the batch client of a provider entry (kind openai or anthropic).
func NewClient(cfg provider.Config) (Client, error) {
	w, err := provider.NewWire(cfg)
	if err != nil {
		return nil, fmt.Errorf("provider %s (kind %s) has no batch API in jetpool: use mode: online", cfg.Name, cfg.Kind)
	}
	h := &httpc{w: w}
	switch cfg.Kind {
	case provider.KindOpenAI:
		return &openAI{h}, nil
	case provider.KindAnthropic:
		return &anthropic{h}, nil
	}
	return nil, fmt.Errorf("provider %s (kind %s) has no batch API", cfg.Name, cfg.Kind)
}

// httpc is the HTTP plumbing of both clients: every error comes back as a
// classified *retry.Error, as from an online call.
type httpc struct{ w *provider.Wire }

// do sends one request and returns the response body (read up to limit).
func (h *httpc) do(ctx context.Context, method, target string, body io.Reader, ctype string, limit int64) ([]byte, error) {
	key, err := h.w.Key("")
	if err != nil {
		return nil, err
	}
	ctx, cancel := h.w.WithTimeout(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, &retry.Error{Class: retry.ClassProgramming, TypeName: "RequestError", Message: err.Error(),
			Provider: h.w.Config().Name}
	}
	req.Header.Set("Accept", "application/json")
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	h.w.Auth(req.Header, key)
	resp, err := h.w.HTTP().Do(req)
	if err != nil {
		return nil, h.w.TransportError(ctx, err, "", key, "")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, provider.MaxErrorBodyBytes))
		return nil, h.w.StatusError(resp.StatusCode, resp.Header, b, "", key)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, h.w.TransportError(ctx, err, "", key, "reading response body")
	}
	if int64(len(b)) > limit {
		return nil, &retry.Error{Class: retry.ClassServer, TypeName: "ResponseTooLargeError",
			Message: fmt.Sprintf("response body exceeds %d MiB", limit>>20), Provider: h.w.Config().Name}
	}
	return b, nil
}

func (h *httpc) json(ctx context.Context, method, target string, in, out any) error {
	var rd io.Reader
	ctype := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &retry.Error{Class: retry.ClassProgramming, TypeName: "EncodeError", Message: err.Error()}
		}
		rd, ctype = bytes.NewReader(b), "application/json"
	}
	b, err := h.do(ctx, method, target, rd, ctype, provider.MaxBodyBytes)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
			Message: "decoding response: " + err.Error(), Provider: h.w.Config().Name}
	}
	return nil
}

// eachLine calls fn for every non-empty line of a JSONL body.
func eachLine(b []byte, fn func([]byte) error) error {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		var line []byte
		if i < 0 {
			line, b = b, nil
		} else {
			line, b = b[:i], b[i+1:]
		}
		if line = bytes.TrimSpace(line); len(line) == 0 {
			continue
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	return nil
}
