package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// anthropic speaks the Message Batches API.
type anthropic struct{ *httpc }

func (c *anthropic) Kind() string { return provider.KindAnthropic }

func (c *anthropic) Limits() Limits {
	return Limits{MaxRequests: AnthropicMaxRequests, MaxBytes: AnthropicMaxBytes}
}

func (c *anthropic) Line(customID string, req provider.Request) ([]byte, error) {
	body, err := c.w.Body(req)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"custom_id": customID, "params": body})
}

type anthropicBatch struct {
	ID               string `json:"id"`
	ProcessingStatus string `json:"processing_status"`
	RequestCounts    struct {
		Processing int `json:"processing"`
		Succeeded  int `json:"succeeded"`
		Errored    int `json:"errored"`
		Canceled   int `json:"canceled"`
		Expired    int `json:"expired"`
	} `json:"request_counts"`
	ResultsURL *string `json:"results_url"`
}

// Submit creates the batch: POST /messages/batches {"requests": [...]}.
func (c *anthropic) Submit(ctx context.Context, _ string, lines [][]byte) (string, error) {
	var body bytes.Buffer
	body.WriteString(`{"requests":[`)
	for i, l := range lines {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(l)
	}
	body.WriteString(`]}`)
	b, err := c.do(ctx, http.MethodPost, c.w.Endpoint("messages/batches"), &body, "application/json", provider.MaxBodyBytes)
	if err != nil {
		return "", err
	}
	var bt anthropicBatch
	if json.Unmarshal(b, &bt) != nil || bt.ID == "" {
		return "", &retry.Error{Class: retry.ClassUnknown, TypeName: "InvalidResponseError",
			Message: "batch created without an id", Provider: c.w.Config().Name}
	}
	return bt.ID, nil
}

// Find is not possible: a message batch has no metadata to carry the key.
func (c *anthropic) Find(context.Context, string) (string, error) { return "", ErrNoFind }

func (c *anthropic) Status(ctx context.Context, id string) (Status, error) {
	var b anthropicBatch
	if err := c.json(ctx, http.MethodGet, c.w.Endpoint("messages/batches/"+url.PathEscape(id)), nil, &b); err != nil {
		return Status{}, err
	}
	rc := b.RequestCounts
	st := Status{ID: b.ID, State: b.ProcessingStatus, Ended: b.ProcessingStatus == "ended",
		Counts: Counts{Processing: rc.Processing, Succeeded: rc.Succeeded, Failed: rc.Errored + rc.Canceled + rc.Expired}}
	st.Counts.Total = rc.Processing + rc.Succeeded + rc.Errored + rc.Canceled + rc.Expired
	if b.ResultsURL != nil {
		st.ResultsURL = *b.ResultsURL
	}
	return st, nil
}

// Results reads the results JSONL. The key is sent only to the provider's
// own host: a results_url elsewhere (or with credentials of its own) is
// replaced by the documented path.
func (c *anthropic) Results(ctx context.Context, st Status, fn func(Entry) error) error {
	target := c.w.Endpoint("messages/batches/" + url.PathEscape(st.ID) + "/results")
	if u, err := url.Parse(st.ResultsURL); err == nil && st.ResultsURL != "" {
		if base, err := url.Parse(target); err == nil && u.Scheme == base.Scheme && u.Host == base.Host && u.User == nil {
			target = st.ResultsURL
		}
	}
	b, err := c.do(ctx, http.MethodGet, target, nil, "", MaxResultBytes)
	if err != nil {
		return err
	}
	return eachLine(b, func(line []byte) error {
		var l struct {
			CustomID string `json:"custom_id"`
			Result   struct {
				Type    string          `json:"type"`
				Message json.RawMessage `json:"message"`
				Error   json.RawMessage `json:"error"`
			} `json:"result"`
		}
		if json.Unmarshal(line, &l) != nil || l.CustomID == "" {
			return nil
		}
		e := Entry{CustomID: l.CustomID}
		switch l.Result.Type {
		case "succeeded":
			r, err := c.w.Response(l.Result.Message, "")
			if err != nil {
				e.Err = retry.AsError(err)
			} else {
				e.Response = r
			}
		case "errored":
			e.Err = c.w.InBandError(l.Result.Error, "", "")
		default: // canceled, expired
			e.NotReturned, e.State = true, l.Result.Type
		}
		return fn(e)
	})
}
