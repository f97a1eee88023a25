package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"slices"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// An action's images and documents, its tools and their calls, and its
// cache marks, as a request carries them and a result keeps
// them. The session (session.go) calls these at its edges; its loop
// is the same for every action.

// partsFor renders the action's images and documents for the delivery. A
// file path must be one the dispatcher read into the record: a worker reads
// no local file. What cannot be sent is bad input (renderFailure): the
// record, not the worker, is at fault.
func partsFor(a *workflow.Action, d *delivery) ([]provider.Part, error) {
	if len(a.Images)+len(a.Documents) == 0 {
		return nil, nil
	}
	data, err := templateData(d, a.Fields())
	if err != nil {
		return nil, err
	}
	rendered, err := a.RenderParts(data)
	if err != nil {
		return nil, err
	}
	bad := func(p workflow.RenderedPart, format string, args ...any) error {
		return &retry.Error{Class: retry.ClassInvalidRequest, TypeName: "BadInputError",
			Message: fmt.Sprintf("action %s: %s: ", a.Name, p.Field) + fmt.Sprintf(format, args...),
			Err:     workflow.ErrBadInput}
	}
	var parts []provider.Part
	for _, p := range rendered {
		src, err := workflow.PartSource(p.Value)
		if err != nil {
			return nil, bad(p, "%v", err)
		}
		part := provider.Part{Type: p.Type}
		switch src {
		case workflow.SourceURL:
			part.URL = p.Value
		case workflow.SourceData:
			if part.MediaType, part.Data, err = provider.ParseDataURL(p.Value); err != nil {
				return nil, bad(p, "%v", err)
			}
		case workflow.SourceFile:
			f, ok := d.env.Files[p.Value]
			if !ok {
				return nil, bad(p, "the file %s is not in the record: files are read by the dispatcher, from entries that read only the record's fields (not an earlier action's output)", p.Value)
			}
			part.MediaType, part.Data, part.Name = f.MediaType, f.Data, path.Base(p.Value)
		}
		parts = append(parts, part)
	}
	markCache(a, parts)
	return parts, nil
}

// markCache marks the last image and the last document that the action's
// cache: list names.
func markCache(a *workflow.Action, parts []provider.Part) {
	for _, c := range []struct{ what, typ string }{{workflow.CacheImages, provider.PartImage}, {workflow.CacheDocuments, provider.PartDocument}} {
		if !slices.Contains(a.Cache, c.what) {
			continue
		}
		for i := len(parts) - 1; i >= 0; i-- {
			if parts[i].Type == c.typ {
				parts[i].Cache = true
				break
			}
		}
	}
}

// withTools sets the action's tools and cache marks on a request. An
// action with tools asks for no JSON mode of its own: its expect: schema
// describes {text, tool_calls}, not the text.
func withTools(a *workflow.Action, req *provider.Request) {
	req.Tools, req.ToolChoice = a.Tools, a.ToolChoice
	req.CacheSystem = slices.Contains(a.Cache, workflow.CacheSystem)
	req.CacheTools = slices.Contains(a.Cache, workflow.CacheTools)
	if a.HasTools() {
		req.JSON, req.Schema = a.JSON, nil
	}
}

// answerOutput is the output of an answer for action a: its text, or with
// tools {text, tool_calls}, each call {id, name, arguments} with its
// arguments parsed (text that is not JSON stays a string).
func answerOutput(a *workflow.Action, resp provider.Response) any {
	if !a.HasTools() {
		return resp.Text
	}
	calls := make([]any, len(resp.ToolCalls))
	for i, c := range resp.ToolCalls {
		var args any
		dec := json.NewDecoder(bytes.NewReader(c.Arguments))
		dec.UseNumber() // as expect: parses: large integers survive
		if dec.Decode(&args) != nil {
			args = string(c.Arguments)
		}
		calls[i] = map[string]any{"id": c.ID, "name": c.Name, "arguments": args}
	}
	return map[string]any{"text": resp.Text, "tool_calls": calls}
}

// answerText is what expect: checks of an answer, and what a diagnostic
// quotes: the text, or with tools the output as JSON.
func answerText(a *workflow.Action, resp provider.Response) string {
	if !a.HasTools() {
		return resp.Text
	}
	b, err := json.Marshal(answerOutput(a, resp))
	if err != nil {
		return resp.Text
	}
	return string(b)
}
