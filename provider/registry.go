package provider

import (
	"fmt"
	"os"
	"sort"
	"strings"
)

// Presets are the providers usable by name without a providers: entry.
var Presets = map[string]Config{
	"openai":        {Kind: KindOpenAI, BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY"},
	"anthropic":     {Kind: KindAnthropic, BaseURL: "https://api.anthropic.com/v1", APIKeyEnv: "ANTHROPIC_API_KEY"},
	"gemini":        {Kind: KindGemini, BaseURL: "https://generativelanguage.googleapis.com/v1beta", APIKeyEnv: "GEMINI_API_KEY"},
	"gemini-openai": {Kind: KindOpenAI, BaseURL: "https://generativelanguage.googleapis.com/v1beta/openai", APIKeyEnv: "GEMINI_API_KEY"},
	"groq":          {Kind: KindOpenAI, BaseURL: "https://api.groq.com/openai/v1", APIKeyEnv: "GROQ_API_KEY"},
	"ollama":        {Kind: KindOpenAI, BaseURL: "http://127.0.0.1:11434/v1"},
	"vllm":          {Kind: KindOpenAI, BaseURL: "http://127.0.0.1:8000/v1"},
	"mistral":       {Kind: KindOpenAI, BaseURL: "https://api.mistral.ai/v1", APIKeyEnv: "MISTRAL_API_KEY"},
	"together":      {Kind: KindOpenAI, BaseURL: "https://api.together.xyz/v1", APIKeyEnv: "TOGETHER_API_KEY"},
	"openrouter":    {Kind: KindOpenAI, BaseURL: "https://openrouter.ai/api/v1", APIKeyEnv: "OPENROUTER_API_KEY"},
	"deepseek":      {Kind: KindOpenAI, BaseURL: "https://api.deepseek.com/v1", APIKeyEnv: "DEEPSEEK_API_KEY"},
	"cohere":        {Kind: KindOpenAI, BaseURL: "https://api.cohere.ai/compatibility/v1", APIKeyEnv: "CO_API_KEY"},
	"sim":           {Kind: KindSim},
}

// Kinds lists the adapter kinds.
var Kinds = []string{KindOpenAI, KindAnthropic, KindGemini, KindSim}

// PresetNames returns the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns the preset called name, with its Name set.
func Preset(name string) (Config, bool) {
	c, ok := Presets[name]
	if ok {
		c.Name = name
	}
	return c, ok
}

// New builds the adapter for cfg.
func New(cfg Config) (Provider, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = TimeoutDefault
	}
	switch cfg.Kind {
	case KindOpenAI:
		return newOpenAI(cfg)
	case KindAnthropic:
		return newAnthropic(cfg)
	case KindGemini:
		return newGemini(cfg)
	case KindSim:
		return newSim(cfg)
	}
	return nil, fmt.Errorf("unknown provider kind %q (want one of %s)", cfg.Kind, strings.Join(Kinds, ", "))
}

// ErrMissingKey is returned (wrapped) by APIKey when the key variable is unset or empty.
var ErrMissingKey = fmt.Errorf("missing API key")

// APIKey reads the provider's key from its environment variable or key file.
// It returns "" and no error when the provider needs no key.
func (c Config) APIKey() (string, error) {
	if c.APIKeyFile != "" {
		b, err := os.ReadFile(c.APIKeyFile)
		if err != nil {
			return "", fmt.Errorf("provider %s: api_key_file: %w", c.Name, err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", fmt.Errorf("provider %s: api_key_file %s is empty: %w", c.Name, c.APIKeyFile, ErrMissingKey)
		}
		return k, nil
	}
	if c.APIKeyEnv == "" {
		return "", nil
	}
	k := strings.TrimSpace(os.Getenv(c.APIKeyEnv))
	if k == "" {
		return "", fmt.Errorf("provider %s: environment variable %s is not set: %w", c.Name, c.APIKeyEnv, ErrMissingKey)
	}
	return k, nil
}
