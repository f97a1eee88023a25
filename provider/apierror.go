package provider

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// apiError is the error object of any of the three wire formats:
//
//	OpenAI & co.: {"error":{"message","type","param","code"}} (code: string, number or null)
//	vLLM, Mistral: {"object":"error","message","type","code"}
//	Anthropic:    {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
//	Gemini:       {"error":{"code":429,"message","status":"RESOURCE_EXHAUSTED","details":[…]}}
//	Gemini's OpenAI-compatible endpoint wraps that in an array; Ollama says {"error":"…"}.
type apiError struct {
	message, typ, code string
	status             int           // a numeric code in the body
	retryDelay         time.Duration // Gemini RetryInfo
}

type wireError struct {
	Message json.RawMessage `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	// Status is Google's status word ("UNAVAILABLE"); Azure OpenAI puts
	// the HTTP status there as a number, which must not fail the decoding.
	Status textOnly        `json:"status"`
	Detail json.RawMessage `json:"detail"`
	// llama.cpp's exceed_context_size_error counts the prompt and names the
	// context size beside a message that says neither.
	NPromptTokens int `json:"n_prompt_tokens"`
	NCtx          int `json:"n_ctx"`
	Details       []struct {
		Type       string `json:"@type"`
		Reason     string `json:"reason"`
		RetryDelay string `json:"retryDelay"`
	} `json:"details"`
}

// textOnly is a JSON string; any other value decodes as "".
type textOnly string

func (t *textOnly) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*t = textOnly(s)
	}
	return nil
}

func parseAPIError(body []byte) apiError {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' {
		var arr []json.RawMessage
		if json.Unmarshal(body, &arr) != nil || len(arr) == 0 {
			return apiError{}
		}
		body = arr[0]
	}
	var top struct {
		wireError
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &top) != nil {
		return apiError{}
	}
	w := top.wireError
	if len(top.Error) > 0 {
		var s string
		if json.Unmarshal(top.Error, &s) == nil {
			w = wireError{Message: top.Error} // Ollama: {"error":"model \"x\" not found"}
		} else {
			var inner wireError
			if json.Unmarshal(top.Error, &inner) == nil {
				w = inner
			}
		}
	}
	var ae apiError
	ae.message = jsonText(w.Message)
	if ae.message == "" {
		ae.message = jsonText(w.Detail) // FastAPI servers: {"detail":"Not Found"}
	}
	if w.NPromptTokens > 0 && w.NCtx > 0 {
		// In the message, where compaction (retry.ParseOverflow) and a
		// reader of the dead letter find them.
		ae.message += fmt.Sprintf(" (n_prompt_tokens %d, n_ctx %d)", w.NPromptTokens, w.NCtx)
	}
	ae.typ = cmp.Or(string(w.Status), w.Type)
	if w.Type == "error" && w.Status == "" {
		ae.typ = "" // Anthropic's envelope type, not an error type
	}
	var code string
	var num int
	switch {
	case json.Unmarshal(w.Code, &code) == nil:
		ae.code = code
	case json.Unmarshal(w.Code, &num) == nil:
		ae.status = num
	}
	for _, d := range w.Details {
		switch {
		case strings.HasSuffix(d.Type, "google.rpc.ErrorInfo") && d.Reason != "":
			ae.code = d.Reason
		case strings.HasSuffix(d.Type, "google.rpc.RetryInfo"):
			if dd, err := time.ParseDuration(d.RetryDelay); err == nil && dd > 0 {
				ae.retryDelay = dd
			}
		}
	}
	return ae
}

// jsonText renders a JSON string as itself and anything else (a FastAPI
// validation list, say) as compact JSON.
func jsonText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.TrimSpace(s)
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return ""
	}
	return truncate(b.String(), MaxMessageLen)
}

// bodyPrefix is a body that is not a JSON error, trimmed for a message.
func bodyPrefix(b []byte) string {
	return truncate(strings.Join(strings.Fields(string(b)), " "), MaxMessageLen)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8Start(s[len(s)-1]) {
		s = s[:len(s)-1] // don't cut a rune in half
	}
	if len(s) > 0 {
		s = s[:len(s)-1]
	}
	return s + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
