package provider

import (
	"cmp"
	"context"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"strings"
)

// The sim's answers beyond text: tool calls and structured output whose
// JSON fits the schema it was given, and embeddings of a fixed dimension,
// so the quickstart and tests can exercise each without a real model.

// simDimensionsMax bounds SimConfig.Dimensions and a request's dimensions.
const simDimensionsMax = 1 << 16

// example is a value that satisfies schema (as far as a small generator
// can: const, enum, type, required, min and max): strings are the start of
// the prompt, so that a demo's tool arguments say something of the record.
func example(schema map[string]any, prompt string) any {
	return exampleDepth(schema, prompt, 0)
}

func exampleDepth(s map[string]any, prompt string, depth int) any {
	if depth > 8 {
		return nil
	}
	if v, ok := s["const"]; ok {
		return v
	}
	if e, ok := s["enum"].([]any); ok && len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"anyOf", "oneOf", "allOf"} {
		if l, ok := s[k].([]any); ok && len(l) > 0 {
			if m, ok := l[0].(map[string]any); ok {
				return exampleDepth(m, prompt, depth+1)
			}
		}
	}
	props, _ := s["properties"].(map[string]any)
	switch schemaType(s, props) {
	case "object":
		out := map[string]any{}
		for _, name := range slices.Sorted(maps.Keys(props)) {
			p, _ := props[name].(map[string]any)
			out[name] = exampleDepth(p, prompt, depth+1)
		}
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					if _, set := out[name]; !set {
						out[name] = exampleText(prompt, 0)
					}
				}
			}
		}
		return out
	case "array":
		items, _ := s["items"].(map[string]any)
		n := 1
		if m, ok := s["minItems"].(float64); ok {
			n = max(n, int(m))
		}
		out := make([]any, min(n, 100))
		for i := range out {
			out[i] = exampleDepth(items, prompt, depth+1)
		}
		return out
	case "integer":
		return math.Ceil(exampleNumber(s, 1))
	case "number":
		return exampleNumber(s, 1.5)
	case "boolean":
		return true
	case "null":
		return nil
	case "string":
		return exampleString(s, prompt)
	}
	return exampleText(prompt, 0)
}

// schemaType is s's type: the first not null of a list, object when it
// has properties and no type.
func schemaType(s, props map[string]any) string {
	typ, _ := s["type"].(string)
	if l, ok := s["type"].([]any); ok {
		for _, t := range l {
			if t, ok := t.(string); ok && t != "null" {
				typ = t
				break
			}
		}
	}
	if typ == "" && props != nil {
		typ = "object"
	}
	return typ
}

// exampleNumber is def within s's minimum and maximum.
func exampleNumber(s map[string]any, def float64) float64 {
	v := def
	if m, ok := s["minimum"].(float64); ok {
		v = math.Max(v, m)
	}
	if m, ok := s["exclusiveMinimum"].(float64); ok && v <= m {
		v = m + 1
	}
	if m, ok := s["maximum"].(float64); ok {
		v = math.Min(v, m)
	}
	return v
}

func exampleString(s map[string]any, prompt string) string {
	switch s["format"] {
	case "date":
		return "2025-01-01"
	case "date-time":
		return "2025-01-01T00:00:00Z"
	case "email":
		return "sim@example.com"
	case "uri", "url":
		return "https://example.com/sim"
	}
	minLen := 0
	if m, ok := s["minLength"].(float64); ok {
		minLen = int(m)
	}
	t := exampleText(prompt, minLen)
	if m, ok := s["maxLength"].(float64); ok && len([]rune(t)) > int(m) {
		t = string([]rune(t)[:int(m)])
	}
	return t
}

// exampleText is the start of the prompt (at most 40 runes, at least
// minLen), "sim" when it is empty.
func exampleText(prompt string, minLen int) string {
	t := []rune(strings.Join(strings.Fields(prompt), " "))
	if len(t) > 40 {
		t = t[:40]
	}
	s := cmp.Or(string(t), "sim")
	for len([]rune(s)) < minLen {
		s += " sim"
	}
	return s
}

// Embed implements Embedder: a unit vector per input, the same for the same
// text (a hash of it), with the sim's latency and faults, drawn for the
// request's first record.
func (s *sim) Embed(ctx context.Context, req EmbedRequest) (EmbedResponse, error) {
	return embedTimed(func() (EmbedResponse, error) {
		model := cmp.Or(req.Model, SimModelDefault)
		records := req.RecordIDs
		if len(records) == 0 {
			records = req.Inputs
		}
		if len(records) == 0 {
			records = []string{""}
		}
		if _, err := s.begin(ctx, model, records, func() {}); err != nil {
			return EmbedResponse{}, err
		}
		dims := cmp.Or(s.sc.Dimensions, SimDimensionsDefault)
		if d := intParam(req.Params, "dimensions"); d > 0 && d <= simDimensionsMax {
			dims = d
		}
		out := EmbedResponse{Model: model}
		for _, in := range req.Inputs {
			out.Vectors = append(out.Vectors, simVector(in, dims))
			out.Usage.InputTokens += len(in)/4 + 1
		}
		return out, nil
	})
}

// simVector is a unit vector of dims drawn from a hash of text.
func simVector(text string, dims int) []float32 {
	h := fnv.New64a()
	h.Write([]byte(text))
	x := h.Sum64() | 1
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		// splitmix64: cheap, well spread, and the same everywhere.
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		f := float64(z>>11)/float64(1<<53)*2 - 1
		v[i] = float32(f)
		norm += f * f
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / norm)
		}
	}
	return v
}
