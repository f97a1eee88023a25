package providertest

import (
	"regexp"
	"strings"
)

var markerRE = regexp.MustCompile(`\[\[([^\]]+)\]\]`)

// prompt is a request read for the bill: its messages' texts (the system
// prompt first, when set) and what the call is.
type prompt struct {
	call     BillCall
	system   string
	cacheSys bool // the system prompt is marked cacheable (Anthropic)
	texts    []string
	user     []string
}

// inputTokens is what the prompt counts as, before any cache.
func (p *prompt) inputTokens() (total, system int) {
	for _, t := range p.texts {
		total += Tokens(t) + messageTokens
	}
	if p.system != "" {
		system = Tokens(p.system) + messageTokens
		total += system
	}
	return total, system
}

// readPrompt reads a request of any of the three wire formats.
func readPrompt(path string, body map[string]any) (prompt, bool) {
	var p prompt
	str := func(v any) string { s, _ := v.(string); return s }
	// text of a content: a string, or a list of parts/blocks with "text".
	text := func(v any) string {
		if s, ok := v.(string); ok {
			return s
		}
		var sb strings.Builder
		if l, ok := v.([]any); ok {
			for _, e := range l {
				if m, ok := e.(map[string]any); ok {
					sb.WriteString(str(m["text"]))
				}
			}
		}
		return sb.String()
	}
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		p.call.Kind = "openai"
		p.call.Model, p.call.Stream = str(body["model"]), body["stream"] == true
		_, p.call.JSON = body["response_format"]
		msgs, _ := body["messages"].([]any)
		for _, e := range msgs {
			m, _ := e.(map[string]any)
			t := text(m["content"])
			if str(m["role"]) == "system" {
				p.system += t
				continue
			}
			p.texts = append(p.texts, t)
			if str(m["role"]) == "user" {
				p.user = append(p.user, t)
			}
		}
	case strings.HasSuffix(path, "/messages"):
		p.call.Kind = "anthropic"
		p.call.Model, p.call.Stream = str(body["model"]), body["stream"] == true
		switch sys := body["system"].(type) {
		case string:
			p.system = sys
		case []any:
			p.system = text(sys)
			for _, e := range sys {
				if m, ok := e.(map[string]any); ok && m["cache_control"] != nil {
					p.cacheSys = true
				}
			}
		}
		msgs, _ := body["messages"].([]any)
		for _, e := range msgs {
			m, _ := e.(map[string]any)
			t := text(m["content"])
			p.texts = append(p.texts, t)
			if str(m["role"]) == "user" {
				p.user = append(p.user, t)
			}
		}
		p.call.JSON = strings.Contains(strings.ToLower(p.system), "json")
	case strings.Contains(path, ":generateContent"), strings.Contains(path, ":streamGenerateContent"):
		p.call.Kind = "gemini"
		name := path[strings.LastIndex(path, "/models/")+len("/models/"):]
		p.call.Model, _, _ = strings.Cut(name, ":")
		p.call.Stream = strings.Contains(path, ":streamGenerateContent")
		if si, ok := body["systemInstruction"].(map[string]any); ok {
			p.system = text(si["parts"])
		}
		contents, _ := body["contents"].([]any)
		for _, e := range contents {
			m, _ := e.(map[string]any)
			t := text(m["parts"])
			p.texts = append(p.texts, t)
			if str(m["role"]) == "user" {
				p.user = append(p.user, t)
			}
		}
		if gc, ok := body["generationConfig"].(map[string]any); ok {
			p.call.JSON = str(gc["responseMimeType"]) == "application/json"
		}
	default:
		return p, false
	}
	p.call.MaxTokens = maxTokens(body)
	if len(p.user) > 0 {
		p.call.Prompt = p.user[len(p.user)-1]
		for _, u := range p.user {
			if m := markerRE.FindStringSubmatch(u); m != nil {
				p.call.Key = m[1]
				break
			}
		}
	}
	return p, true
}
