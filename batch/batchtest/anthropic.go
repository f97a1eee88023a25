package batchtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jetpool/jetpool/provider"
)

func (s *Server) anthropicBatch(b *fakeBatch) map[string]any {
	counts := map[string]int{"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
	var resultsURL any
	if !b.done {
		counts["processing"] = len(b.reqs)
	} else {
		resultsURL = s.URL + "/v1/messages/batches/" + b.id + "/results"
		for _, r := range b.reqs {
			a := s.answer(r)
			switch {
			case a.Omit:
			case s.Final == "cancelled":
				counts["canceled"]++
			case s.Final != "" || a.Expire:
				counts["expired"]++
			case a.Status != 0:
				counts["errored"]++
			default:
				counts["succeeded"]++
			}
		}
	}
	return map[string]any{"id": b.id, "type": "message_batch", "processing_status": b.status, "request_counts": counts,
		"ended_at": nil, "created_at": b.created.Format(time.RFC3339), "expires_at": b.created.Add(24 * time.Hour).Format(time.RFC3339),
		"archived_at": nil, "cancel_initiated_at": nil, "results_url": resultsURL}
}

func (s *Server) anthropicResults(b *fakeBatch) {
	var out bytes.Buffer
	for _, r := range b.reqs {
		a := s.answer(r)
		switch {
		case a.Omit:
		case s.Final == "cancelled":
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"canceled"}}`+"\n", q(r.CustomID))
		case s.Final != "" || a.Expire:
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"expired"}}`+"\n", q(r.CustomID))
		case a.Status != 0:
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"errored","error":%s}}`+"\n", q(r.CustomID), a.Error)
		default:
			model, _ := r.Body["model"].(string)
			text, stop := a.Text, "end_turn"
			if a.Refusal != "" {
				text, stop = a.Refusal, "refusal"
			}
			in, n := s.billed(provider.KindAnthropic, r.Body, text, true)
			fmt.Fprintf(&out, `{"custom_id":%s,"result":{"type":"succeeded","message":{"id":"msg_%s","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s}],"stop_reason":%s,"stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}}}`+"\n",
				q(r.CustomID), r.CustomID, q(model), q(text), q(stop), in, n)
		}
	}
	b.results = out.Bytes()
}

func (s *Server) anthropic(w http.ResponseWriter, r *http.Request, p string) {
	if r.Header.Get("Anthropic-Version") == "" {
		writeJSON(w, 400, AnthropicError("invalid_request_error", "anthropic-version: header is required"))
		return
	}
	switch {
	case r.Method == http.MethodPost && p == "messages":
		s.online++
		model, text, req := lastUser(r)
		reply := s.onlineText(text)
		in, out := s.billed(provider.KindAnthropic, req, reply, false)
		body := fmt.Sprintf(`{"id":"msg_online","type":"message","role":"assistant","model":%s,"content":[{"type":"text","text":%s}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":%d,"output_tokens":%d}}`, q(model), q(reply), in, out)
		writeJSON(w, 200, body)
	case r.Method == http.MethodPost && p == "messages/batches":
		if s.FailCreate != nil {
			writeJSON(w, s.FailCreate.Status, s.FailCreate.Error)
			return
		}
		var in struct {
			Requests []struct {
				CustomID string         `json:"custom_id"`
				Params   map[string]any `json:"params"`
			} `json:"requests"`
		}
		if json.NewDecoder(r.Body).Decode(&in) != nil || len(in.Requests) == 0 {
			writeJSON(w, 400, AnthropicError("invalid_request_error", "requests: field required"))
			return
		}
		b := &fakeBatch{id: s.nextID("msgbatch_"), status: "in_progress", created: time.Now()}
		for _, rq := range in.Requests {
			if rq.CustomID == "" || rq.Params["max_tokens"] == nil {
				writeJSON(w, 400, AnthropicError("invalid_request_error", "requests: custom_id and params.max_tokens are required"))
				return
			}
			b.reqs = append(b.reqs, Request{CustomID: rq.CustomID, Body: rq.Params})
		}
		if !s.record(w, b) {
			return
		}
		writeJSON(w, 200, s.anthropicBatch(b))
	case r.Method == http.MethodGet && strings.HasSuffix(p, "/results"):
		b, ok := s.batches[strings.TrimSuffix(strings.TrimPrefix(p, "messages/batches/"), "/results")]
		if !ok || !b.done {
			writeJSON(w, 404, AnthropicError("not_found_error", "batch results not available"))
			return
		}
		w.Header().Set("Content-Type", "application/binary")
		w.Write(b.results)
	case r.Method == http.MethodGet && strings.HasPrefix(p, "messages/batches/"):
		b, ok := s.batches[strings.TrimPrefix(p, "messages/batches/")]
		if !ok {
			writeJSON(w, 404, AnthropicError("not_found_error", "batch not found"))
			return
		}
		s.advance(b)
		writeJSON(w, 200, s.anthropicBatch(b))
	default:
		writeJSON(w, 404, AnthropicError("not_found_error", "Not Found"))
	}
}
