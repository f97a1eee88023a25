package provider

import (
	"fmt"
	"strings"
)

// ParamChange is one change AdaptParams made to a request's parameters.
type ParamChange struct {
	Param string // the parameter as written
	// To is the name it is sent under; "" when it is dropped.
	To  string
	Why string
}

func (c ParamChange) String() string {
	if c.To != "" {
		return fmt.Sprintf("%s is sent as %s (%s)", c.Param, c.To, c.Why)
	}
	return fmt.Sprintf("%s is dropped (%s)", c.Param, c.Why)
}

// OpenAIReasoning reports whether model is one of OpenAI's reasoning models
// (the gpt-5 family but its -chat models, and the o-series: o1, o3, o4-mini,
// …), which take max_completion_tokens and refuse a temperature or top_p
// other than the default. An "openai/" prefix (OpenRouter's name) is
// allowed.
func OpenAIReasoning(model string) bool {
	m := strings.TrimPrefix(model, "openai/")
	if strings.HasPrefix(m, "gpt-5") {
		return !strings.Contains(m, "-chat")
	}
	return len(m) >= 2 && m[0] == 'o' && m[1] >= '1' && m[1] <= '9'
}

// reasoningDefaults are the sampling parameters OpenAI's reasoning models
// take at their default value only (any other is a 400 for every record),
// with that value.
var reasoningDefaults = []struct {
	name string
	def  float64
}{{"temperature", 1}, {"top_p", 1}, {"presence_penalty", 0}, {"frequency_penalty", 0}}

// AdaptParams returns params as the model of a provider kind takes them,
// and what it changed; params itself is never modified (the action's map is
// shared by every call). It is what a router does: a workflow whose
// defaults: set max_tokens and temperature for every action works with
// gpt-5 too, and `jetpool validate` says what changed. Only OpenAI's
// reasoning models have rules so far.
func AdaptParams(kind, model string, params map[string]any) (map[string]any, []ParamChange) {
	if kind != KindOpenAI || !OpenAIReasoning(model) || len(params) == 0 {
		return params, nil
	}
	var changes []ParamChange
	var out map[string]any
	edit := func() {
		if out == nil {
			out = make(map[string]any, len(params))
			for k, v := range params {
				out[k] = v
			}
		}
	}
	if v, ok := params["max_tokens"]; ok {
		edit()
		delete(out, "max_tokens")
		if _, set := params["max_completion_tokens"]; set {
			changes = append(changes, ParamChange{Param: "max_tokens", Why: model + " takes max_completion_tokens, which is set"})
		} else {
			out["max_completion_tokens"] = v
			changes = append(changes, ParamChange{Param: "max_tokens", To: "max_completion_tokens",
				Why: model + " refuses max_tokens; reasoning tokens count against it"})
		}
	}
	for _, d := range reasoningDefaults {
		v, ok := params[d.name]
		if !ok {
			continue
		}
		if f, num := number(v); num && f == d.def {
			continue // the default is accepted
		}
		edit()
		delete(out, d.name)
		changes = append(changes, ParamChange{Param: d.name,
			Why: fmt.Sprintf("%s takes only the default %g, not %v", model, d.def, v)})
	}
	if out == nil {
		return params, nil
	}
	return out, changes
}

// number is v as a float64, when it is a number.
func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}
