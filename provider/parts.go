package provider

import (
	"encoding/json"
	"fmt"
	"mime"
	"path"
	"slices"
	"strings"

	"github.com/jetpool/jetpool/retry"
)

// Kinds of Part.
const (
	PartImage    = "image"
	PartDocument = "document" // a PDF
)

// Part is an image or a document of a user turn: at a URL, or carried as
// base64 data (a data: URL the workflow gave, or a file the dispatcher read
// into the record).
type Part struct {
	Type string `json:"type"` // PartImage or PartDocument
	// URL is an http(s) URL of the content; empty when Data is set.
	URL string `json:"url,omitempty"`
	// MediaType is the content's type (image/png, image/jpeg, image/gif,
	// image/webp, application/pdf): given with Data, guessed from the URL's
	// extension otherwise (see MediaType).
	MediaType string `json:"media_type,omitempty"`
	// Data is the content, standard base64.
	Data string `json:"data,omitempty"`
	// Name is the file name, where a wire format wants one (OpenAI's file
	// parts); "" gives "document.pdf".
	Name string `json:"name,omitempty"`
	// Cache marks the end of a cacheable prefix (Anthropic cache_control).
	Cache bool `json:"cache,omitempty"`
}

// ImageTypes are the image media types every adapter accepts.
var ImageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// DocumentTypes are the document media types every adapter accepts.
var DocumentTypes = []string{"application/pdf"}

// AcceptedTypes are the media types of a kind of part.
func AcceptedTypes(kind string) []string {
	if kind == PartDocument {
		return DocumentTypes
	}
	return ImageTypes
}

// mediaType is the part's media type: its own, or the one its URL's
// extension names, or the kind's most common one.
func (p Part) mediaType() string {
	if p.MediaType != "" {
		return p.MediaType
	}
	if p.URL != "" {
		if t := mime.TypeByExtension(strings.ToLower(path.Ext(strings.SplitN(p.URL, "?", 2)[0]))); t != "" {
			t, _, _ = strings.Cut(t, ";")
			return t
		}
	}
	if p.Type == PartDocument {
		return "application/pdf"
	}
	return "image/jpeg"
}

// dataURL is the part's content as a data: URL (or its URL).
func (p Part) dataURL() string {
	if p.Data == "" {
		return p.URL
	}
	return "data:" + p.mediaType() + ";base64," + p.Data
}

// ParseDataURL splits a base64 data: URL into its media type and data.
func ParseDataURL(s string) (mediaType, data string, err error) {
	rest, ok := strings.CutPrefix(s, "data:")
	if !ok {
		return "", "", fmt.Errorf("not a data: URL")
	}
	head, data, ok := strings.Cut(rest, ",")
	if !ok {
		return "", "", fmt.Errorf("data: URL without a comma before its data")
	}
	params := strings.Split(head, ";")
	if !slices.Contains(params[1:], "base64") {
		return "", "", fmt.Errorf("data: URL is not base64 (want data:TYPE;base64,…)")
	}
	if params[0] == "" {
		return "", "", fmt.Errorf("data: URL names no media type")
	}
	return strings.ToLower(params[0]), data, nil
}

// Tool is a function the model may call: its name, what it does, and a
// JSON Schema of its arguments.
type Tool struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
}

// Values of Request.ToolChoice besides a tool's name.
const (
	ToolChoiceAuto     = "auto"     // the model decides
	ToolChoiceNone     = "none"     // no tool
	ToolChoiceRequired = "required" // some tool (Anthropic "any", Gemini ANY)
)

// ToolCall is one call the model asked for. Arguments are JSON as the
// model wrote them: an object, or (rarely) text that is not JSON at all.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	// Signature is Gemini's thoughtSignature of the call, sent back with
	// it when a later turn of the conversation carries the call again.
	Signature string `json:"-"`
}

// notRun is the result a later turn gives each tool call of an assistant
// turn: jetpool runs no tools, and the wire formats want every call
// answered before the conversation goes on (a repair's correction).
const notRun = "not run: jetpool does not run tools; see the next message"

// parameters is a tool's schema, an empty object schema when it has none
// (every wire format wants one).
func (t Tool) parameters() map[string]any {
	if t.Parameters == nil {
		return map[string]any{"type": "object", "properties": map[string]any{}}
	}
	return t.Parameters
}

// arguments is a call's arguments for a wire format that wants an object:
// the arguments when they are one, else {} (and ok false).
func (c ToolCall) arguments() (obj json.RawMessage, ok bool) {
	a := json.RawMessage(strings.TrimSpace(string(c.Arguments)))
	if len(a) > 0 && a[0] == '{' && json.Valid(a) {
		return a, true
	}
	return json.RawMessage("{}"), false
}

// argumentText is a call's arguments as the JSON text OpenAI carries.
func (c ToolCall) argumentText() string {
	if len(c.Arguments) == 0 {
		return "{}"
	}
	return string(c.Arguments)
}

// callID is a tool call's id, made up from its position when the provider
// gave none (Gemini's older models).
func callID(id string, i int) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("call_%d", i)
}

// answersTools returns the tool calls that msgs[i] must answer: those of
// the assistant turn before it, when it is a user turn.
func answersTools(msgs []Message, i int) []ToolCall {
	if i == 0 || msgs[i].Role != "user" || msgs[i-1].Role != "assistant" {
		return nil
	}
	return msgs[i-1].ToolCalls
}

// badPart is the error of a part a wire format cannot send: permanent, the
// record's input must change.
func (c *client) badPart(model, msg string) *retry.Error {
	return &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "InvalidRequestError",
		Message: msg, Provider: c.cfg.Name, Model: model}
}

// OpenAIStrict reports whether schema is in OpenAI's strict structured-output
// subset, which strict: true requires (a schema outside it is refused with a
// 400): an object at the root, and every object listing all its properties
// in required and setting additionalProperties: false, with no keyword
// strict mode does not take.
func OpenAIStrict(schema map[string]any) bool {
	if schema["type"] != "object" {
		return false
	}
	return strictNode(schema)
}

// strictUnsupported are keywords strict mode refuses.
var strictUnsupported = []string{"allOf", "oneOf", "not", "if", "then", "else", "dependentRequired",
	"dependentSchemas", "patternProperties", "unevaluatedProperties", "propertyNames", "contains"}

func strictNode(n map[string]any) bool {
	for _, k := range strictUnsupported {
		if _, ok := n[k]; ok {
			return false
		}
	}
	props, hasProps := n["properties"].(map[string]any)
	if isObjectType(n["type"]) || hasProps {
		if n["additionalProperties"] != false {
			return false
		}
		req, _ := n["required"].([]any)
		if len(req) != len(props) {
			return false
		}
		for _, r := range req {
			name, _ := r.(string)
			if _, ok := props[name]; !ok {
				return false
			}
		}
		for _, p := range props {
			if m, ok := p.(map[string]any); !ok || !strictNode(m) {
				return false
			}
		}
	}
	for _, k := range []string{"items"} {
		if m, ok := n[k].(map[string]any); ok && !strictNode(m) {
			return false
		}
	}
	for _, k := range []string{"anyOf", "prefixItems"} {
		if list, ok := n[k].([]any); ok {
			for _, x := range list {
				if m, ok := x.(map[string]any); !ok || !strictNode(m) {
					return false
				}
			}
		}
	}
	for _, k := range []string{"$defs", "definitions"} {
		if defs, ok := n[k].(map[string]any); ok {
			for _, x := range defs {
				if m, ok := x.(map[string]any); !ok || !strictNode(m) {
					return false
				}
			}
		}
	}
	return true
}

// isObjectType reports whether a schema's type is (or includes) object.
func isObjectType(t any) bool {
	switch t := t.(type) {
	case string:
		return t == "object"
	case []any:
		return slices.Contains(t, any("object"))
	}
	return false
}
