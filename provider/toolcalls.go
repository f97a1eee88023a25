package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// The answers' tool calls, in each wire format: OpenAI's message.tool_calls
// (arguments a JSON string, streamed in pieces by index), Anthropic's
// tool_use blocks (input an object, streamed as input_json_delta), Gemini's
// functionCall parts (args an object, each whole in its chunk: gemini.go).

// withCalls makes an answer with tool calls finish with FinishToolCalls:
// Gemini says STOP, and some compatible servers stop, when the model called
// a tool (FinishReasonRaw keeps their word).
func withCalls(out *Response) {
	if len(out.ToolCalls) > 0 && (out.FinishReason == FinishStop || out.FinishReason == "") {
		out.FinishReason = FinishToolCalls
	}
}

// rawArgs is a call's arguments as the model wrote them: JSON as it is,
// anything else (a model that wrote broken JSON) as a JSON string, so that
// it still marshals and an expect: schema can say what is wrong.
func rawArgs(text string) json.RawMessage {
	text = strings.TrimSpace(text)
	if text == "" {
		return json.RawMessage("{}")
	}
	if json.Valid([]byte(text)) {
		return json.RawMessage(text)
	}
	b, _ := json.Marshal(text)
	return b
}

// openAIToolCallOut is a tool call of a message or of a stream delta
// (whose index says which call a piece belongs to).
type openAIToolCallOut struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name string `json:"name"`
		// Arguments is a JSON string by the spec; some compatible
		// servers send the object itself.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// args is the text of a call's arguments.
func (c *openAIToolCallOut) args() string {
	a := bytes.TrimSpace(c.Function.Arguments)
	if len(a) > 0 && a[0] == '"' {
		var s string
		if json.Unmarshal(a, &s) == nil {
			return s
		}
	}
	if string(a) == "null" {
		return ""
	}
	return string(a)
}

// openAICalls decodes a message's (or delta's) tool_calls.
func openAICalls(raw json.RawMessage) ([]openAIToolCallOut, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	m, err := parseMessage(raw)
	if err != nil {
		return nil, err
	}
	return m.calls()
}

// calls are the message's tool calls as they came.
func (m *openAIMessageOut) calls() ([]openAIToolCallOut, error) {
	if len(m.ToolCalls) == 0 || string(m.ToolCalls) == "null" {
		return nil, nil
	}
	var calls []openAIToolCallOut
	if err := json.Unmarshal(m.ToolCalls, &calls); err != nil {
		return nil, fmt.Errorf(".tool_calls is %s, want a list of {id, function: {name, arguments}}", jsonKind(m.ToolCalls))
	}
	return calls, nil
}

// toolCalls are the tool calls of a chat.completion message.
func (m *openAIMessageOut) toolCalls() ([]ToolCall, error) {
	calls, err := m.calls()
	if err != nil {
		return nil, err
	}
	var out []ToolCall
	for i, c := range calls {
		if c.Function.Name == "" {
			return nil, fmt.Errorf(".tool_calls[%d] has no function name", i)
		}
		out = append(out, ToolCall{ID: callID(c.ID, i), Name: c.Function.Name, Arguments: rawArgs(c.args())})
	}
	return out, nil
}

// toolAcc gathers the tool calls of a stream, piece by piece.
type toolAcc struct {
	calls   []*accCall
	byIndex map[int]*accCall
}

type accCall struct {
	id, name string
	args     strings.Builder
}

// at is the call at a stream's index, new when the index is.
func (a *toolAcc) at(i int) *accCall {
	if c, ok := a.byIndex[i]; ok {
		return c
	}
	if a.byIndex == nil {
		a.byIndex = map[int]*accCall{}
	}
	c := &accCall{}
	a.byIndex[i] = c
	a.calls = append(a.calls, c)
	return c
}

// openAIDelta adds a stream delta's tool-call pieces.
func (a *toolAcc) openAIDelta(raw json.RawMessage) error {
	calls, err := openAICalls(raw)
	if err != nil {
		return err
	}
	for i, c := range calls {
		idx := i
		if c.Index != nil {
			idx = *c.Index
		}
		acc := a.at(idx)
		if c.ID != "" {
			acc.id = c.ID
		}
		if c.Function.Name != "" {
			acc.name = c.Function.Name
		}
		acc.args.WriteString(c.args())
	}
	return nil
}

// done is the stream's calls, in the order they began.
func (a *toolAcc) done() []ToolCall {
	var out []ToolCall
	for i, c := range a.calls {
		out = append(out, ToolCall{ID: callID(c.id, i), Name: c.name, Arguments: rawArgs(c.args.String())})
	}
	return out
}
