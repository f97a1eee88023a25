package batchtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jetpool/jetpool/provider"
)

// The endpoints of an OpenAI batch (every line of a batch has its batch's).
const (
	chatEndpoint       = "/v1/chat/completions"
	embeddingsEndpoint = "/v1/embeddings"
)

func firstOf(l []any) any {
	if len(l) == 0 {
		return nil
	}
	return l[0]
}

func (s *Server) openAIBatch(b *fakeBatch) map[string]any {
	completed, failed := 0, 0
	if b.done {
		for _, r := range b.reqs {
			a := s.answer(r)
			switch {
			case s.Final != "" || a.Omit:
			case a.Expire || a.Status != 0:
				failed++
			default:
				completed++
			}
		}
	}
	out := map[string]any{"id": b.id, "object": "batch", "endpoint": b.endpoint, "errors": nil,
		"input_file_id": "file-in-" + b.id, "completion_window": "24h", "status": b.status,
		"output_file_id": nil, "error_file_id": nil, "created_at": b.created.Unix(),
		"request_counts": map[string]int{"total": len(b.reqs), "completed": completed, "failed": failed},
		"metadata":       map[string]string{"jetpool_batch": b.key}}
	if b.out != "" {
		out["output_file_id"] = b.out
	}
	if b.err != "" {
		out["error_file_id"] = b.err
	}
	return out
}

func (s *Server) openAIResults(b *fakeBatch) {
	b.status = "completed"
	if s.Final != "" {
		b.status = s.Final
	}
	var out, errs bytes.Buffer
	for _, r := range b.reqs {
		a := s.answer(r)
		switch {
		case a.Omit:
		case s.Final != "" || a.Expire:
			code := "batch_expired"
			if s.Final == "cancelled" {
				code = "batch_cancelled"
			}
			fmt.Fprintf(&errs, `{"id":"batch_req_%s","custom_id":%s,"response":null,"error":{"code":%s,"message":"This request could not be executed before the completion window expired."}}`+"\n", r.CustomID, q(r.CustomID), q(code))
		case a.Status != 0:
			fmt.Fprintf(&errs, `{"id":"batch_req_%s","custom_id":%s,"response":{"status_code":%d,"request_id":"req_x","body":%s},"error":null}`+"\n", r.CustomID, q(r.CustomID), a.Status, a.Error)
		case b.endpoint == embeddingsEndpoint:
			model, _ := r.Body["model"].(string)
			v := a.Vector
			if v == nil {
				in, _ := r.Body["input"].([]any)
				text, _ := firstOf(in).(string)
				v = []float32{float32(len(text)), 0.5, -0.25}
			}
			vb, _ := json.Marshal(v)
			body := fmt.Sprintf(`{"object":"list","data":[{"object":"embedding","index":0,"embedding":%s}],"model":%s,"usage":{"prompt_tokens":5,"total_tokens":5}}`, vb, q(model))
			fmt.Fprintf(&out, `{"id":"batch_req_%s","custom_id":%s,"response":{"status_code":200,"request_id":"req_x","body":%s},"error":null}`+"\n", r.CustomID, q(r.CustomID), body)
		default:
			model, _ := r.Body["model"].(string)
			text, content, refusal := a.Text, q(a.Text), "null"
			if a.Refusal != "" {
				text, content, refusal = a.Refusal, "null", q(a.Refusal)
			}
			in, n := s.billed(provider.KindOpenAI, r.Body, text, true)
			body := fmt.Sprintf(`{"id":"chatcmpl-%s","object":"chat.completion","created":1741570283,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":%s},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, r.CustomID, q(model), content, refusal, in, n, in+n)
			fmt.Fprintf(&out, `{"id":"batch_req_%s","custom_id":%s,"response":{"status_code":200,"request_id":"req_x","body":%s},"error":null}`+"\n", r.CustomID, q(r.CustomID), body)
		}
	}
	if out.Len() > 0 {
		b.out = s.nextID("file-out-")
		s.files[b.out] = out.Bytes()
	}
	if errs.Len() > 0 {
		b.err = s.nextID("file-err-")
		s.files[b.err] = errs.Bytes()
	}
}

func (s *Server) openAI(w http.ResponseWriter, r *http.Request, p string) {
	switch {
	case r.Method == http.MethodPost && p == "chat/completions":
		s.online++
		model, text, req := lastUser(r)
		reply := s.onlineText(text)
		in, out := s.billed(provider.KindOpenAI, req, reply, false)
		body := fmt.Sprintf(`{"id":"chatcmpl-online","object":"chat.completion","created":1741570283,"model":%s,"choices":[{"index":0,"message":{"role":"assistant","content":%s},"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`, q(model), q(reply), in, out, in+out)
		writeJSON(w, 200, body)
	case r.Method == http.MethodPost && p == "files":
		if err := r.ParseMultipartForm(64 << 20); err != nil || r.FormValue("purpose") != "batch" {
			writeJSON(w, 400, OpenAIError("purpose must be batch and file a multipart part", "invalid_request_error", ""))
			return
		}
		f, _, err := r.FormFile("file")
		if err != nil {
			writeJSON(w, 400, OpenAIError("missing file", "invalid_request_error", ""))
			return
		}
		data, _ := io.ReadAll(f)
		s.uploads++
		id := s.nextID("file-")
		s.files[id] = data
		writeJSON(w, 200, map[string]any{"id": id, "object": "file", "bytes": len(data), "created_at": time.Now().Unix(),
			"filename": "batch.jsonl", "purpose": "batch"})
	case r.Method == http.MethodPost && p == "batches":
		if s.FailCreate != nil {
			writeJSON(w, s.FailCreate.Status, s.FailCreate.Error)
			return
		}
		var in struct {
			InputFileID      string            `json:"input_file_id"`
			Endpoint         string            `json:"endpoint"`
			CompletionWindow string            `json:"completion_window"`
			Metadata         map[string]string `json:"metadata"`
		}
		if json.NewDecoder(r.Body).Decode(&in) != nil || (in.Endpoint != chatEndpoint && in.Endpoint != embeddingsEndpoint) || in.CompletionWindow != "24h" {
			writeJSON(w, 400, OpenAIError("bad batch request", "invalid_request_error", ""))
			return
		}
		data, ok := s.files[in.InputFileID]
		if !ok {
			writeJSON(w, 404, OpenAIError("No such File object: "+in.InputFileID, "invalid_request_error", ""))
			return
		}
		b := &fakeBatch{id: s.nextID("batch_"), key: in.Metadata["jetpool_batch"], status: "validating", created: time.Now(), endpoint: in.Endpoint}
		for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
			var l struct {
				CustomID string         `json:"custom_id"`
				Method   string         `json:"method"`
				URL      string         `json:"url"`
				Body     map[string]any `json:"body"`
			}
			if json.Unmarshal(line, &l) != nil || l.CustomID == "" || l.Method != "POST" || l.URL != in.Endpoint {
				writeJSON(w, 400, OpenAIError("invalid batch line: "+string(line), "invalid_request_error", ""))
				return
			}
			b.reqs = append(b.reqs, Request{CustomID: l.CustomID, Body: l.Body})
		}
		if !s.record(w, b) {
			return
		}
		b.status = "in_progress"
		writeJSON(w, 200, s.openAIBatch(b))
	case r.Method == http.MethodGet && p == "batches":
		// Newest first, as the API lists them; one page.
		var data []any
		for i := len(s.order) - 1; i >= 0; i-- {
			data = append(data, s.openAIBatch(s.batches[s.order[i]]))
		}
		writeJSON(w, 200, map[string]any{"object": "list", "data": data, "has_more": false})
	case r.Method == http.MethodGet && strings.HasPrefix(p, "batches/"):
		b, ok := s.batches[strings.TrimPrefix(p, "batches/")]
		if !ok {
			writeJSON(w, 404, OpenAIError("No batch found", "invalid_request_error", ""))
			return
		}
		if b.status == "validating" {
			b.status = "in_progress"
		}
		s.advance(b)
		writeJSON(w, 200, s.openAIBatch(b))
	case r.Method == http.MethodGet && strings.HasPrefix(p, "files/") && strings.HasSuffix(p, "/content"):
		data, ok := s.files[strings.TrimSuffix(strings.TrimPrefix(p, "files/"), "/content")]
		if !ok {
			writeJSON(w, 404, OpenAIError("No such File object", "invalid_request_error", ""))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(data)
	default:
		writeJSON(w, 404, OpenAIError("Invalid URL ("+r.Method+" "+r.URL.Path+")", "invalid_request_error", ""))
	}
}
