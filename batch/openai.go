package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// OpenAI batch constants.
const (
	// OpenAIEndpoint is the endpoint of every request of a batch (of a chat
	// action; an embed action's is OpenAIEmbedEndpoint).
	OpenAIEndpoint      = "/v1/chat/completions"
	OpenAIEmbedEndpoint = "/v1/embeddings"
	// OpenAIWindow is the completion window (the only one OpenAI offers).
	OpenAIWindow = "24h"
	// MetadataKey is the batch metadata entry that holds jetpool's batch key,
	// by which a batch created just before a crash is found again.
	MetadataKey = "jetpool_batch"
	// openAIFindPages bounds the listing Find walks (100 batches a page).
	openAIFindPages = 20
)

// openAI speaks the Files and Batches APIs.
type openAI struct{ *httpc }

func (c *openAI) Kind() string { return provider.KindOpenAI }

func (c *openAI) Limits() Limits {
	return Limits{MaxRequests: OpenAIMaxRequests, MaxBytes: OpenAIMaxBytes}
}

func (c *openAI) Line(customID string, req provider.Request) ([]byte, error) {
	body, err := c.w.Body(req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"custom_id": customID, "method": "POST", "url": OpenAIEndpoint, "body": body})
}

// EmbedLine implements EmbedClient.
func (c *openAI) EmbedLine(customID string, req provider.EmbedRequest) ([]byte, error) {
	return json.Marshal(map[string]any{"custom_id": customID, "method": "POST", "url": OpenAIEmbedEndpoint, "body": provider.EmbedBody(req)})
}

// endpointOf is the endpoint of a batch's lines (all of one action, so of
// one endpoint): the first line's url.
func endpointOf(lines [][]byte) string {
	var l struct {
		URL string `json:"url"`
	}
	if len(lines) > 0 && json.Unmarshal(lines[0], &l) == nil && l.URL != "" {
		return l.URL
	}
	return OpenAIEndpoint
}

// openAIBatch is a Batch object.
type openAIBatch struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	Endpoint      string            `json:"endpoint"`
	OutputFileID  string            `json:"output_file_id"`
	ErrorFileID   string            `json:"error_file_id"`
	Metadata      map[string]string `json:"metadata"`
	RequestCounts struct {
		Total     int `json:"total"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	} `json:"request_counts"`
	Errors *struct {
		Data []json.RawMessage `json:"data"`
	} `json:"errors"`
}

// Submit uploads the JSONL file (purpose batch) and creates the batch.
func (c *openAI) Submit(ctx context.Context, key string, lines [][]byte) (string, error) {
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	if err := mw.WriteField("purpose", "batch"); err != nil {
		return "", err
	}
	hdr := textproto.MIMEHeader{}
	hdr.Set("Content-Disposition", `form-data; name="file"; filename="jetpool-`+key+`.jsonl"`)
	hdr.Set("Content-Type", "application/jsonl")
	fw, err := mw.CreatePart(hdr)
	if err != nil {
		return "", err
	}
	for _, l := range lines {
		fw.Write(l)
		fw.Write([]byte{'\n'})
	}
	if err := mw.Close(); err != nil {
		return "", err
	}
	b, err := c.do(ctx, http.MethodPost, c.w.Endpoint("files"), &body, mw.FormDataContentType(), provider.MaxBodyBytes)
	if err != nil {
		return "", err
	}
	var file struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &file) != nil || file.ID == "" {
		return "", &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
			Message: "file upload answered without a file id", Provider: c.w.Config().Name}
	}
	var bt openAIBatch
	err = c.json(ctx, http.MethodPost, c.w.Endpoint("batches"), map[string]any{
		"input_file_id": file.ID, "endpoint": endpointOf(lines), "completion_window": OpenAIWindow,
		"metadata": map[string]string{MetadataKey: key},
	}, &bt)
	if err != nil {
		return "", err
	}
	if bt.ID == "" {
		return "", &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
			Message: "batch created without an id", Provider: c.w.Config().Name}
	}
	return bt.ID, nil
}

// Find walks the batch listing, newest first, for a batch whose metadata
// carries key.
func (c *openAI) Find(ctx context.Context, key string) (string, error) {
	after := ""
	for range openAIFindPages {
		q := url.Values{"limit": {"100"}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Data    []openAIBatch `json:"data"`
			HasMore bool          `json:"has_more"`
			LastID  string        `json:"last_id"`
		}
		if err := c.json(ctx, http.MethodGet, c.w.Endpoint("batches")+"?"+q.Encode(), nil, &page); err != nil {
			return "", err
		}
		for _, b := range page.Data {
			if b.Metadata[MetadataKey] == key {
				return b.ID, nil
			}
		}
		if !page.HasMore || len(page.Data) == 0 {
			return "", nil
		}
		after = page.Data[len(page.Data)-1].ID
	}
	return "", nil
}

func (c *openAI) Status(ctx context.Context, id string) (Status, error) {
	var b openAIBatch
	if err := c.json(ctx, http.MethodGet, c.w.Endpoint("batches/"+url.PathEscape(id)), nil, &b); err != nil {
		return Status{}, err
	}
	st := Status{ID: b.ID, State: b.Status, OutputFile: b.OutputFileID, ErrorFile: b.ErrorFileID, Endpoint: b.Endpoint,
		Counts: Counts{Total: b.RequestCounts.Total, Succeeded: b.RequestCounts.Completed, Failed: b.RequestCounts.Failed}}
	st.Counts.Processing = max(0, st.Counts.Total-st.Counts.Succeeded-st.Counts.Failed)
	switch b.Status {
	case "completed", "expired", "cancelled":
		st.Ended = true
	case "failed":
		// Validation of the input file failed: no request ran.
		st.Ended = true
		st.Err = &retry.Error{Class: retry.ClassUnknown, TypeName: "BatchFailedError", Message: "batch " + id + " failed validation",
			Provider: c.w.Config().Name}
		if b.Errors != nil && len(b.Errors.Data) > 0 {
			st.Err = c.w.InBandError(append(append([]byte(`{"error":`), b.Errors.Data[0]...), '}'), "", "")
		}
	}
	return st, nil
}

// openAILine is a line of an output or error file.
type openAILine struct {
	CustomID string `json:"custom_id"`
	Response *struct {
		StatusCode int             `json:"status_code"`
		Body       json.RawMessage `json:"body"`
	} `json:"response"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Results reads the output file, then the error file.
func (c *openAI) Results(ctx context.Context, st Status, fn func(Entry) error) error {
	for _, f := range []string{st.OutputFile, st.ErrorFile} {
		if f == "" {
			continue
		}
		b, err := c.do(ctx, http.MethodGet, c.w.Endpoint("files/"+url.PathEscape(f)+"/content"), nil, "", MaxResultBytes)
		if err != nil {
			return err
		}
		err = eachLine(b, func(line []byte) error {
			var l openAILine
			if json.Unmarshal(line, &l) != nil || l.CustomID == "" {
				return nil // not ours to understand; the record counts as not returned
			}
			return fn(c.entry(&l, st.Endpoint))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *openAI) entry(l *openAILine, endpoint string) Entry {
	e := Entry{CustomID: l.CustomID}
	switch {
	case l.Error != nil && (l.Error.Code == "batch_expired" || l.Error.Code == "batch_cancelled"):
		e.NotReturned, e.State = true, l.Error.Code
	case l.Response != nil && l.Response.StatusCode/100 == 2 && endpoint == OpenAIEmbedEndpoint:
		r, err := c.w.EmbedResponseBody(l.Response.Body, "")
		if err != nil {
			e.Err = retry.AsError(err)
		} else {
			e.Response = provider.Response{Embedding: r.Vectors[0], Usage: r.Usage, Model: r.Model}
		}
	case l.Response != nil && l.Response.StatusCode/100 == 2:
		r, err := c.w.Response(l.Response.Body, "")
		if err != nil {
			e.Err = retry.AsError(err)
		} else {
			e.Response = r
		}
	case l.Response != nil && l.Response.StatusCode != 0:
		e.Err = c.w.StatusError(l.Response.StatusCode, nil, l.Response.Body, "", "")
	case l.Error != nil:
		b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": l.Error.Code, "message": l.Error.Message}})
		e.Err = c.w.InBandError(b, "", "")
	default:
		e.NotReturned, e.State = true, "no response"
	}
	return e
}
