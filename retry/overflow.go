package retry

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Overflow is what a context-overflow error says of the request that did
// not fit: most providers name the model's context window and the
// request's size in tokens. Zero fields were not said.
type Overflow struct {
	// Limit is the model's context window.
	Limit int
	// Prompt is the request's input as the provider counted it.
	Prompt int
	// Completion is the room the request reserved for the answer
	// (max_tokens) when the provider counted it against Limit.
	Completion int
	// Over is how many tokens the request is over: Prompt + Completion −
	// Limit, or the excess alone when that is all the message says.
	Over int
}

// Sized reports whether o says by how much the request was over.
func (o Overflow) Sized() bool { return o.Over > 0 }

func (o Overflow) String() string {
	switch {
	case !o.Sized():
		return "the provider named no sizes"
	case o.Limit == 0:
		return fmt.Sprintf("%s tokens over the limit", Thousands(o.Over))
	case o.Completion > 0:
		return fmt.Sprintf("%s + %s tokens for the answer > %s", Thousands(o.Prompt), Thousands(o.Completion), Thousands(o.Limit))
	}
	return fmt.Sprintf("%s tokens > %s", Thousands(o.Prompt), Thousands(o.Limit))
}

// Defaults of compaction (the overflow: block of an action).
const (
	// OverflowMargin is the share of the context window left free when a
	// field is cut to fit: the provider counts tokens, the cut is made in
	// characters at the request's own ratio, and a field's text is rarely
	// exactly as dense as the rest of the prompt.
	OverflowMargin = 0.05
	// OverflowMarginMin is the least margin, in tokens.
	OverflowMarginMin = 16
	// CharsPerToken is the heuristic ratio (OpenAI's rule of thumb for
	// English) used where the provider gave no count to measure it by: a
	// message that names only the excess.
	CharsPerToken = 4.0
	// EstimateSlack is how far over a known window a prompt's estimate must
	// be before it is shortened or routed without a call: an estimate in
	// characters is not a count, so a prompt near the window is sent, and
	// cut by the provider's own numbers if it does not fit.
	EstimateSlack = 0.10
)

// Keep says how many characters of a field of field characters to keep so
// that the request, of sent characters in all (system prompt and messages),
// fits the window o describes, with OverflowMargin to spare: the tokens
// over, and the margin, are converted to characters at the request's own
// ratio (sent ÷ o.Prompt; CharsPerToken when o has no count). When o names
// no sizes (Ollama's "input length exceeds the context length"), half the
// field is kept. ok is false when no length of the field would fit: the
// rest of the prompt alone is over.
func (o Overflow) Keep(sent, field int) (keep int, ok bool) {
	if field <= 0 {
		return 0, false
	}
	if !o.Sized() {
		keep = field / 2
		return keep, keep > 0
	}
	perToken := CharsPerToken
	if o.Prompt > 0 && sent > 0 {
		perToken = float64(sent) / float64(o.Prompt)
	}
	var margin int
	switch {
	case o.Limit > 0:
		margin = int(math.Ceil(OverflowMargin * float64(o.Limit)))
	case o.Prompt > 0:
		margin = int(math.Ceil(OverflowMargin * float64(o.Prompt)))
	default:
		margin = o.Over / 4 // the excess alone: a wider margin for a heuristic ratio
	}
	margin = max(margin, OverflowMarginMin)
	keep = field - int(math.Ceil(float64(o.Over+margin)*perToken))
	return keep, keep > 0
}

// Window is what an overflow taught about a model: its context window, the
// room a request reserves for the answer, and how many characters make a
// token in the prompts of this job. It lets the next records be estimated
// before they are sent.
type Window struct {
	Limit      int
	Completion int
	PerToken   float64 // characters per token, measured on a request the provider counted
}

// CharsPerTokenMax is the most characters a token is taken to hold where
// no overflow has measured a job's prompts: a window a price table gives is
// estimated at this ratio, so that a prompt is moved or cut before its
// first call only when no likely text fits it. English averages about
// CharsPerToken; code and most other languages hold fewer.
const CharsPerTokenMax = 1.5 * CharsPerToken

// KnownWindow is a model's context window of limit input tokens, as a
// price table gives it (the input limit: no room for the answer is
// counted), before any overflow has measured the job's prompts.
func KnownWindow(limit int) Window {
	return Window{Limit: limit, PerToken: CharsPerTokenMax}
}

// Window is what o teaches, for a request of sent characters; ok is false
// when o names no window or no count.
func (o Overflow) Window(sent int) (Window, bool) {
	if o.Limit <= 0 || o.Prompt <= 0 || sent <= 0 {
		return Window{}, false
	}
	return Window{Limit: o.Limit, Completion: o.Completion, PerToken: float64(sent) / float64(o.Prompt)}, true
}

// Estimate is the overflow a request of sent characters would meet in w,
// when its estimate passes the window by more than EstimateSlack; ok is
// false otherwise (it is sent as it is).
func (w Window) Estimate(sent int) (Overflow, bool) {
	if w.Limit <= 0 || w.PerToken <= 0 {
		return Overflow{}, false
	}
	prompt := int(math.Ceil(float64(sent) / w.PerToken))
	if float64(prompt+w.Completion) <= float64(w.Limit)*(1+EstimateSlack) {
		return Overflow{}, false
	}
	return Overflow{Limit: w.Limit, Prompt: prompt, Completion: w.Completion, Over: prompt + w.Completion - w.Limit}, true
}

// ParseOverflow reads the sizes a context-overflow message names (see
// overflowForms); ok is false when it names none, or names a request that
// is not over (a max_tokens complaint, which is no overflow).
func ParseOverflow(msg string) (o Overflow, ok bool) {
	text := strings.ToLower(msg)
	for _, f := range overflowForms {
		m := f.re().FindStringSubmatch(text)
		if m == nil {
			continue
		}
		n := make([]int, len(m))
		for i := 1; i < len(m); i++ {
			n[i] = number(m[i])
		}
		if o = f.read(n, text); o.Over <= 0 && o.Limit > 0 {
			o.Over = o.Prompt + o.Completion - o.Limit
		}
		if o.Sized() {
			return o, true
		}
	}
	return Overflow{}, false
}

// num is a token count as providers write it: 4097, or 200,000.
const num = `(\d{1,3}(?:,\d{3})+|\d+)`

var completionRE = pattern(num + ` (?:in|for) the (?:completion|output)`)

// overflowForms are the ways providers state the sizes, each read from
// the lower-cased message.
var overflowForms = []struct {
	re   func() *regexp.Regexp
	read func(n []int, text string) Overflow
}{
	// OpenAI, Azure, Groq, DeepSeek, vLLM, OpenRouter: "This model's maximum
	// context length is 4097 tokens. However, your messages resulted in 4294
	// tokens." / "… you requested 4294 tokens (3294 in your prompt; 1000 for
	// the completion)." / "… your request has 5000 input tokens."
	{pattern(`maximum context length is ` + num + ` tokens[^0-9]{0,80}?(?:resulted in|requested(?: about)?|request has) ` + num + ` (?:input )?tokens`),
		func(n []int, text string) Overflow {
			o := Overflow{Limit: n[1], Prompt: n[2]}
			if m := completionRE().FindStringSubmatch(text); m != nil {
				o.Completion = number(m[1])
				o.Prompt -= o.Completion
			}
			return o
		}},
	// Anthropic: "prompt is too long: 210000 tokens > 200000 maximum".
	{pattern(`prompt is too long: ` + num + ` tokens > ` + num), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Limit: n[2]}
	}},
	// Anthropic: "input length and `max_tokens` exceed context limit: 197000
	// + 8192 > 200000".
	{pattern(`exceed context limit: ` + num + ` \+ ` + num + ` > ` + num), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Completion: n[2], Limit: n[3]}
	}},
	// Gemini: "The input token count (1200000) exceeds the maximum number of
	// tokens allowed (1048576)." (Vertex AI writes the numbers bare.)
	{pattern(`input token count \(?` + num + `\)? exceeds the maximum number of tokens allowed \(?` + num), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Limit: n[2]}
	}},
	// llama.cpp server: "request (4390 tokens) exceeds the available context
	// size (4096 tokens)".
	{pattern(`request \(` + num + ` tokens\) exceeds the available context size \(` + num), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Limit: n[2]}
	}},
	// llama.cpp server's exceed_context_size_error, whose counts ride in the
	// error object (the provider adapter adds them to the message).
	{pattern(`n_prompt_tokens\W{1,4}` + num + `\W{1,4}n_ctx\W{1,4}` + num), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Limit: n[2]}
	}},
	// llama-cpp-python: "Requested tokens (2285) exceed context window of 2048".
	{pattern(`requested tokens \(` + num + `\) exceed context window of ` + num), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Limit: n[2]}
	}},
	// Mistral, vLLM: "Prompt contains 40000 tokens and 0 draft tokens, too
	// large for model with 32768 maximum context length".
	{pattern(`prompt contains ` + num + ` tokens(?: and \d+ draft tokens)?, too large for model with ` + num + ` maximum context length`), func(n []int, _ string) Overflow {
		return Overflow{Prompt: n[1], Limit: n[2]}
	}},
	// Cohere: "too many tokens: total number of tokens in the prompt cannot
	// exceed 4081 - received 4500".
	{pattern(`tokens in the prompt cannot exceed ` + num + ` - received ` + num), func(n []int, _ string) Overflow {
		return Overflow{Limit: n[1], Prompt: n[2]}
	}},
	// Cohere v2: "too many tokens: size limit exceeded by 1234 tokens".
	{pattern(`size limit exceeded by ` + num + ` tokens`), func(n []int, _ string) Overflow {
		return Overflow{Over: n[1]}
	}},
}

func number(s string) int {
	n, err := strconv.Atoi(strings.ReplaceAll(s, ",", ""))
	if err != nil {
		return 0
	}
	return n
}

// Thousands writes n with thousands separators (40,000), as diagnostics
// and the record's story write sizes.
func Thousands(n int) string {
	if n < 0 {
		return "-" + Thousands(-n)
	}
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
