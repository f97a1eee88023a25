package pricing

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MaxFileBytes bounds a price file: LiteLLM's whole table, every provider
// of it, is under 2 MB.
const MaxFileBytes = 32 << 20

// File is a price file in LiteLLM's format (model_prices_and_context_window
// .json): a JSON object of model entries keyed by model id, bare
// ("gpt-4o", "claude-sonnet-4-5") or with LiteLLM's provider prefix
// ("gemini/gemini-2.5-pro", "groq/llama-3.3-70b-versatile"), each with
// per-token rates in dollars:
//
//	input_cost_per_token, output_cost_per_token,
//	cache_read_input_token_cost, cache_creation_input_token_cost,
//	input_cost_per_token_batches, output_cost_per_token_batches,
//	input_cost_per_token_above_200k_tokens (and output_, cache_read_,
//	cache_creation_ …_above_Nk_tokens: one long-context tier),
//	litellm_provider, max_input_tokens, deprecation_date, mode.
//
// Other fields (flex and priority tiers, audio, images, limits, support
// flags) are LiteLLM's and are ignored, as are top-level values that are
// not objects and LiteLLM's "sample_spec". An entry is checked when it is
// looked up, so a file may hold entries of providers jetpool never calls.
type File struct {
	// Name is the file as given, which errors and prices' Source name.
	Name    string
	entries map[string]fileEntry
}

// fileEntry is one model entry as written, and the line of its key.
type fileEntry struct {
	raw  json.RawMessage
	line int
}

// LoadFile reads a price file (at most MaxFileBytes).
func LoadFile(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("price file: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("price file %s: %w", path, err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("price file %s: larger than %d MiB; a price file is at most that (LiteLLM's whole table is under 2 MB)", path, MaxFileBytes>>20)
	}
	return ParseFile(path, data)
}

// ParseFile reads a price file's content; name names it in errors.
func ParseFile(name string, data []byte) (*File, error) {
	if !json.Valid(data) {
		var se *json.SyntaxError
		if err := json.Unmarshal(data, new(any)); errors.As(err, &se) {
			return nil, fmt.Errorf("price file %s:%d: not JSON: %v", name, lineAt(data, se.Offset), se)
		} else if err != nil {
			return nil, fmt.Errorf("price file %s: not JSON: %v", name, err)
		}
		return nil, fmt.Errorf("price file %s: not JSON", name)
	}
	if bytes.TrimLeft(data, " \t\r\n")[0] != '{' {
		return nil, fmt.Errorf("price file %s: want a JSON object of models (LiteLLM's model_prices_and_context_window.json format)", name)
	}
	f := &File{Name: name, entries: map[string]fileEntry{}}
	err := members(data, func(key, val []byte, line int) error {
		k := string(key)
		if bytes.IndexByte(key, '\\') >= 0 { // escapes: rare in a key, so decoded only then
			if err := json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k); err != nil {
				return fmt.Errorf("price file %s:%d: %v", name, line, err)
			}
		}
		if first, dup := f.entries[k]; dup {
			return fmt.Errorf("price file %s:%d: entry %q is there twice (first at line %d)", name, line, k, first.line)
		}
		if k != "sample_spec" && val[0] == '{' {
			f.entries[k] = fileEntry{raw: val, line: line}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

func lineAt(data []byte, off int64) int {
	off = min(max(off, 0), int64(len(data)))
	return bytes.Count(data[:off], []byte{'\n'}) + 1
}

// members calls fn with each member of the JSON object data (which
// json.Valid accepts): its key as written between its quotes, its value's
// text and the key's line. It walks the text once: a json.Decoder, token
// by token, is several times slower on LiteLLM's whole table.
func members(data []byte, fn func(key, val []byte, line int) error) error {
	i, line := 0, 1
	space := func() {
		for ; i < len(data) && strings.IndexByte(" \t\r\n", data[i]) >= 0; i++ {
			if data[i] == '\n' {
				line++
			}
		}
	}
	// strEnd is the end of the string whose opening quote is at j (a
	// JSON string holds no raw newline).
	strEnd := func(j int) int {
		for j++; data[j] != '"'; j++ {
			if data[j] == '\\' {
				j++
			}
		}
		return j + 1
	}
	valEnd := func(j int) int {
		switch data[j] {
		case '"':
			return strEnd(j)
		case '{', '[':
			for depth := 0; ; j++ {
				switch data[j] {
				case '"':
					j = strEnd(j) - 1
				case '{', '[':
					depth++
				case '}', ']':
					if depth--; depth == 0 {
						return j + 1
					}
				case '\n':
					line++
				}
			}
		}
		for j < len(data) && strings.IndexByte(",}] \t\r\n", data[j]) < 0 {
			j++
		}
		return j
	}
	space()
	i++ // {
	for {
		space()
		switch data[i] {
		case '}':
			return nil
		case ',':
			i++
			space()
		}
		end := strEnd(i)
		key, keyLine := data[i+1:end-1], line
		i = end
		space()
		i++ // :
		space()
		start := i
		i = valEnd(i)
		if err := fn(key, data[start:i], keyLine); err != nil {
			return err
		}
	}
}

// Len is the number of model entries.
func (f *File) Len() int { return len(f.entries) }

// litellmProviders are LiteLLM's names of the presets whose names differ:
// the key prefix and litellm_provider of their entries. Any other provider
// is looked up under its own name, so an entry named after a provider of
// LiteLLM's ("openrouter", "together_ai", "vertex_ai") finds its prices.
var litellmProviders = map[string]string{"gemini-openai": "gemini"}

// LitellmProvider is LiteLLM's name for the provider called providerName.
func LitellmProvider(providerName string) string {
	if n, ok := litellmProviders[providerName]; ok {
		return n
	}
	return providerName
}

// Lookup is the price of model on the provider called providerName, by the
// same rule as the built-in table (Candidates): the exact id's entry, else
// the entry of the model a dated snapshot is of. Each id is looked for
// under LiteLLM's provider prefix ("gemini/gemini-2.5-pro"), then bare
// ("gpt-4o") when the entry's litellm_provider is the provider's (a bare
// "gemini-2.5-pro" is Vertex AI's, not the Gemini API's). The first entry
// found decides: one with no per-token price leaves the model unpriced. An
// entry that cannot be read is an error naming the file, its line, the
// entry and the field.
func (f *File) Lookup(providerName, model string) (Model, bool, error) {
	prov := LitellmProvider(providerName)
	for _, id := range Candidates(model) {
		for _, key := range []string{prov + "/" + id, id} {
			e, ok := f.entries[key]
			if !ok {
				continue
			}
			m, priced, err := f.model(key, e, prov, key == id)
			if err != nil {
				return Model{}, false, err
			}
			if m.Key == "" { // another provider's bare entry
				continue
			}
			return m, priced, nil
		}
	}
	return Model{}, false, nil
}

// aboveRE matches a long-context rate: its kind and threshold in
// thousands. Compiled when a price file is read, not by every process.
var aboveRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^(input_cost_per_token|output_cost_per_token|cache_read_input_token_cost|cache_creation_input_token_cost)_above_(\d+)k_tokens$`)
})

// model reads the entry key. A bare entry of another provider is no match
// (Key ""); priced is false for an entry without per-token rates.
func (f *File) model(key string, e fileEntry, prov string, bare bool) (m Model, priced bool, err error) {
	where := fmt.Sprintf("price file %s:%d: entry %q", f.Name, e.line, key)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(e.raw, &fields); err != nil {
		return Model{}, false, fmt.Errorf("%s: %v", where, err)
	}
	str := func(name string) (string, error) {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s: %s: want a string, got %s", where, name, raw)
		}
		return s, nil
	}
	owner, err := str("litellm_provider")
	if err != nil {
		return Model{}, false, err
	}
	if bare && owner != "" && owner != prov {
		return Model{}, false, nil
	}
	m.Key = key
	// The file's name alone: the source is a label, stored with the job,
	// and the same file reached by another path is the same source.
	m.Source = "price file " + filepath.Base(f.Name) + ": " + key
	num := func(name string) (float64, bool, error) {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return 0, false, nil
		}
		var v float64
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, false, fmt.Errorf("%s: %s: want a number, got %s", where, name, raw)
		}
		if v < 0 {
			return 0, false, fmt.Errorf("%s: %s: %v must not be negative", where, name, v)
		}
		return v, true, nil
	}
	rate := func(name string, dst *float64) (bool, error) {
		v, ok, err := num(name)
		*dst = perMTok(v)
		return ok, err
	}
	hasIn, err := rate("input_cost_per_token", &m.InputPerMTok)
	if err != nil || !hasIn {
		return m, false, err // priced per second, image or query: not by jetpool
	}
	mode, err := str("mode")
	if err != nil {
		return Model{}, false, err
	}
	if hasOut, err := rate("output_cost_per_token", &m.OutputPerMTok); err != nil {
		return Model{}, false, err
	} else if !hasOut {
		switch mode {
		case "embedding":
		case "", "chat", "responses", "completion":
			return Model{}, false, fmt.Errorf("%s: output_cost_per_token: missing (a text model's entry needs an output rate, 0 for none)", where)
		default:
			return m, false, nil // an image or audio model: its output is not tokens
		}
	}
	for name, dst := range map[string]*float64{"cache_read_input_token_cost": &m.CachedInputPerMTok,
		"cache_creation_input_token_cost": &m.CacheWritePerMTok, "input_cost_per_token_batches": &m.BatchInputPerMTok,
		"output_cost_per_token_batches": &m.BatchOutputPerMTok} {
		if _, err := rate(name, dst); err != nil {
			return Model{}, false, err
		}
	}
	if err := f.tier(&m, fields, where, rate); err != nil {
		return Model{}, false, err
	}
	if v, ok, err := num("max_input_tokens"); err != nil {
		return Model{}, false, err
	} else if ok {
		if v != float64(int(v)) {
			return Model{}, false, fmt.Errorf("%s: max_input_tokens: want a whole number of tokens, got %v", where, v)
		}
		m.ContextWindow = int(v)
	}
	if m.Retires, err = str("deprecation_date"); err != nil {
		return Model{}, false, err
	} else if m.Retires != "" {
		if _, err := time.Parse(time.DateOnly, m.Retires); err != nil {
			return Model{}, false, fmt.Errorf("%s: deprecation_date: want a date such as 2026-05-14, got %q", where, m.Retires)
		}
	}
	return m, true, nil
}

// tier reads the entry's long-context rates into m.LongContext. A rate the
// entry leaves out of the tier is the online one, as LiteLLM bills it.
func (f *File) tier(m *Model, fields map[string]json.RawMessage, where string, rate func(string, *float64) (bool, error)) error {
	above := 0
	for name := range fields {
		sub := aboveRE().FindStringSubmatch(name)
		if sub == nil {
			continue
		}
		k, err := strconv.Atoi(sub[2])
		if err != nil || k <= 0 {
			return fmt.Errorf("%s: %s: a threshold of %s thousand tokens", where, name, sub[2])
		}
		if above != 0 && above != k*1000 {
			return fmt.Errorf("%s: %s: a second long-context threshold (also above %dk tokens); jetpool bills one tier", where, name, above/1000)
		}
		above = k * 1000
	}
	if above == 0 {
		return nil
	}
	t := &Tier{AboveTokens: above, InputPerMTok: m.InputPerMTok, OutputPerMTok: m.OutputPerMTok,
		CachedInputPerMTok: m.CachedInputPerMTok, CacheWritePerMTok: m.CacheWritePerMTok}
	suffix := fmt.Sprintf("_above_%dk_tokens", above/1000)
	for base, dst := range map[string]*float64{"input_cost_per_token": &t.InputPerMTok, "output_cost_per_token": &t.OutputPerMTok,
		"cache_read_input_token_cost": &t.CachedInputPerMTok, "cache_creation_input_token_cost": &t.CacheWritePerMTok} {
		var v float64
		if ok, err := rate(base+suffix, &v); err != nil {
			return err
		} else if ok {
			*dst = v
		}
	}
	m.LongContext = t
	return nil
}

// perMTok is a per-token rate per million tokens, rounded to 12 significant
// digits: 3e-06 × 1e6 is 2.9999999999999996 in binary, and a price is a
// short decimal.
func perMTok(perToken float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(perToken*1e6, 'g', 12, 64), 64)
	return v
}

// String names the file and its size, for `jetpool validate`.
func (f *File) String() string {
	return f.Name + " (" + strconv.Itoa(len(f.entries)) + " models, LiteLLM format)"
}
