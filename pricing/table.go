package pricing

import (
	"cmp"
	"sync"
)

// TableDate is the date of the newest source of the built-in table: the
// public LiteLLM price table (model_prices_and_context_window.json, BerriAI/
// litellm) as of that day. Each entry says its own source date (entry.at).
// The table holds the standard tier, text tokens, of the presets' current
// models; a workflow's price: block or a price file overrides any of them,
// and `jetpool validate` shows which one each action uses.
const TableDate = litellm20260724

// litellm20260724 is the LiteLLM table of 2026-07-24 (its copy synced
// that day), the source of every entry below.
const litellm20260724 = "2026-07-24"

// entry is one model of the built-in table: what the source says of it,
// the source's date, or the model it is another name of.
type entry struct {
	model Model
	at    string // the source's date (TableDate when "")
	alias string // the entry this id is another name of ("" when none)
}

func (e entry) date() string { return cmp.Or(e.at, TableDate) }

// builtin is the price table, by preset and model id. Each id is exact: a
// dated snapshot of one takes its price (Candidates), nothing else does. A
// snapshot whose price differs from its model's has its own entry. It is
// built on first use: a process that prices nothing (a worker on a
// provider without a price) does not build it.
var builtin = sync.OnceValue(func() map[string]map[string]entry {
	geminiPrices := geminiPrices()
	return map[string]map[string]entry{
		// Chat Completions models only: the Responses API's (o3-pro, gpt-5-pro,
		// the codex models) cannot be called by the openai kind.
		"openai": dated(litellm20260724, map[string]Model{
			"gpt-5.6":                {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 30, LongContext: &Tier{AboveTokens: 272_000, InputPerMTok: 10, OutputPerMTok: 45, CachedInputPerMTok: 1, CacheWritePerMTok: 12.5}}, ContextWindow: 1_050_000},
			"gpt-5.6-sol":            {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 30, LongContext: &Tier{AboveTokens: 272_000, InputPerMTok: 10, OutputPerMTok: 45, CachedInputPerMTok: 1, CacheWritePerMTok: 12.5}}, ContextWindow: 1_050_000},
			"gpt-5.6-terra":          {Price: Price{InputPerMTok: 2.5, CachedInputPerMTok: 0.25, CacheWritePerMTok: 3.125, OutputPerMTok: 15, LongContext: &Tier{AboveTokens: 272_000, InputPerMTok: 5, OutputPerMTok: 22.5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25}}, ContextWindow: 1_050_000},
			"gpt-5.6-luna":           {Price: Price{InputPerMTok: 1, CachedInputPerMTok: 0.1, CacheWritePerMTok: 1.25, OutputPerMTok: 6, LongContext: &Tier{AboveTokens: 272_000, InputPerMTok: 2, OutputPerMTok: 9, CachedInputPerMTok: 0.2, CacheWritePerMTok: 2.5}}, ContextWindow: 1_050_000},
			"gpt-5.5":                {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, OutputPerMTok: 30, LongContext: &Tier{AboveTokens: 272_000, InputPerMTok: 10, OutputPerMTok: 45, CachedInputPerMTok: 1}}, ContextWindow: 1_050_000},
			"gpt-5.4":                {Price: Price{InputPerMTok: 2.5, CachedInputPerMTok: 0.25, OutputPerMTok: 15, LongContext: &Tier{AboveTokens: 272_000, InputPerMTok: 5, OutputPerMTok: 22.5, CachedInputPerMTok: 0.5}}, ContextWindow: 1_050_000},
			"gpt-5.4-mini":           {Price: Price{InputPerMTok: 0.75, CachedInputPerMTok: 0.075, OutputPerMTok: 4.5}, ContextWindow: 1_050_000},
			"gpt-5.4-nano":           {Price: Price{InputPerMTok: 0.2, CachedInputPerMTok: 0.02, OutputPerMTok: 1.25}, ContextWindow: 1_050_000},
			"gpt-5.3-chat-latest":    {Price: Price{InputPerMTok: 1.75, CachedInputPerMTok: 0.175, OutputPerMTok: 14}, ContextWindow: 128_000},
			"gpt-5.2":                {Price: Price{InputPerMTok: 1.75, CachedInputPerMTok: 0.175, OutputPerMTok: 14}, ContextWindow: 272_000},
			"gpt-5.2-chat-latest":    {Price: Price{InputPerMTok: 1.75, CachedInputPerMTok: 0.175, OutputPerMTok: 14}, ContextWindow: 128_000},
			"gpt-5.1":                {Price: Price{InputPerMTok: 1.25, CachedInputPerMTok: 0.125, OutputPerMTok: 10}, ContextWindow: 272_000},
			"gpt-5.1-chat-latest":    {Price: Price{InputPerMTok: 1.25, CachedInputPerMTok: 0.125, OutputPerMTok: 10}, ContextWindow: 128_000},
			"gpt-5":                  {Price: Price{InputPerMTok: 1.25, CachedInputPerMTok: 0.125, OutputPerMTok: 10}, ContextWindow: 272_000},
			"gpt-5-mini":             {Price: Price{InputPerMTok: 0.25, CachedInputPerMTok: 0.025, OutputPerMTok: 2}, ContextWindow: 272_000},
			"gpt-5-nano":             {Price: Price{InputPerMTok: 0.05, CachedInputPerMTok: 0.005, OutputPerMTok: 0.4}, ContextWindow: 272_000},
			"gpt-5-chat-latest":      {Price: Price{InputPerMTok: 1.25, CachedInputPerMTok: 0.125, OutputPerMTok: 10}, ContextWindow: 128_000},
			"gpt-4.1":                {Price: Price{InputPerMTok: 2, CachedInputPerMTok: 0.5, OutputPerMTok: 8}, ContextWindow: 1_047_576},
			"gpt-4.1-mini":           {Price: Price{InputPerMTok: 0.4, CachedInputPerMTok: 0.1, OutputPerMTok: 1.6}, ContextWindow: 1_047_576},
			"gpt-4.1-nano":           {Price: Price{InputPerMTok: 0.1, CachedInputPerMTok: 0.025, OutputPerMTok: 0.4}, ContextWindow: 1_047_576},
			"gpt-4o":                 {Price: Price{InputPerMTok: 2.5, CachedInputPerMTok: 1.25, OutputPerMTok: 10}, ContextWindow: 128_000},
			"gpt-4o-2024-05-13":      {Price: Price{InputPerMTok: 5, OutputPerMTok: 15}, ContextWindow: 128_000},
			"gpt-4o-mini":            {Price: Price{InputPerMTok: 0.15, CachedInputPerMTok: 0.075, OutputPerMTok: 0.6}, ContextWindow: 128_000},
			"o4-mini":                {Price: Price{InputPerMTok: 1.1, CachedInputPerMTok: 0.275, OutputPerMTok: 4.4}, ContextWindow: 200_000},
			"o3":                     {Price: Price{InputPerMTok: 2, CachedInputPerMTok: 0.5, OutputPerMTok: 8}, ContextWindow: 200_000},
			"o3-mini":                {Price: Price{InputPerMTok: 1.1, CachedInputPerMTok: 0.55, OutputPerMTok: 4.4}, ContextWindow: 200_000},
			"o1":                     {Price: Price{InputPerMTok: 15, CachedInputPerMTok: 7.5, OutputPerMTok: 60}, ContextWindow: 200_000},
			"gpt-4-turbo":            {Price: Price{InputPerMTok: 10, OutputPerMTok: 30}, ContextWindow: 128_000},
			"gpt-4":                  {Price: Price{InputPerMTok: 30, OutputPerMTok: 60}, ContextWindow: 8_192},
			"gpt-3.5-turbo":          {Price: Price{InputPerMTok: 0.5, OutputPerMTok: 1.5}, ContextWindow: 16_385},
			"gpt-3.5-turbo-0125":     {Price: Price{InputPerMTok: 0.5, OutputPerMTok: 1.5}, ContextWindow: 16_385},
			"gpt-3.5-turbo-1106":     {Price: Price{InputPerMTok: 1, OutputPerMTok: 2}, ContextWindow: 16_385, Retires: "2026-09-28"},
			"text-embedding-3-small": {Price: Price{InputPerMTok: 0.02}, ContextWindow: 8_191},
			"text-embedding-3-large": {Price: Price{InputPerMTok: 0.13}, ContextWindow: 8_191},
			"text-embedding-ada-002": {Price: Price{InputPerMTok: 0.1}, ContextWindow: 8_191},
		}),
		// Keyed by family id: the source lists claude-opus-4, claude-sonnet-4,
		// claude-3-* and claude-opus-4-1's shutdown date by their snapshots
		// only (claude-sonnet-4-20250514), whose date suffix maps back here.
		"anthropic": dated(litellm20260724, map[string]Model{
			"claude-opus-5":     {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 25}, ContextWindow: 1_000_000},
			"claude-sonnet-5":   {Price: Price{InputPerMTok: 2, CachedInputPerMTok: 0.2, CacheWritePerMTok: 2.5, OutputPerMTok: 10}, ContextWindow: 1_000_000},
			"claude-fable-5":    {Price: Price{InputPerMTok: 10, CachedInputPerMTok: 1, CacheWritePerMTok: 12.5, OutputPerMTok: 50}, ContextWindow: 1_000_000},
			"claude-opus-4-8":   {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 25}, ContextWindow: 1_000_000},
			"claude-opus-4-7":   {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 25}, ContextWindow: 1_000_000},
			"claude-opus-4-6":   {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 25}, ContextWindow: 1_000_000},
			"claude-opus-4-5":   {Price: Price{InputPerMTok: 5, CachedInputPerMTok: 0.5, CacheWritePerMTok: 6.25, OutputPerMTok: 25}, ContextWindow: 200_000},
			"claude-opus-4-1":   {Price: Price{InputPerMTok: 15, CachedInputPerMTok: 1.5, CacheWritePerMTok: 18.75, OutputPerMTok: 75}, ContextWindow: 200_000, Retires: "2026-08-05"},
			"claude-opus-4":     {Price: Price{InputPerMTok: 15, CachedInputPerMTok: 1.5, CacheWritePerMTok: 18.75, OutputPerMTok: 75}, ContextWindow: 200_000, Retires: "2026-05-14"},
			"claude-sonnet-4-6": {Price: Price{InputPerMTok: 3, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75, OutputPerMTok: 15}, ContextWindow: 1_000_000},
			// The source says 200k, the window without Anthropic's 1M-context beta;
			// prompts above 200k, which its tier bills, need that beta. A window
			// only feeds the overflow estimate, which must not cut a prompt that
			// fits: the larger one.
			"claude-sonnet-4-5": {Price: Price{InputPerMTok: 3, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75, OutputPerMTok: 15, LongContext: &Tier{AboveTokens: 200_000, InputPerMTok: 6, OutputPerMTok: 22.5, CachedInputPerMTok: 0.6, CacheWritePerMTok: 7.5}}, ContextWindow: 1_000_000},
			"claude-sonnet-4":   {Price: Price{InputPerMTok: 3, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75, OutputPerMTok: 15, LongContext: &Tier{AboveTokens: 200_000, InputPerMTok: 6, OutputPerMTok: 22.5, CachedInputPerMTok: 0.6, CacheWritePerMTok: 7.5}}, ContextWindow: 1_000_000, Retires: "2026-05-14"},
			"claude-haiku-4-5":  {Price: Price{InputPerMTok: 1, CachedInputPerMTok: 0.1, CacheWritePerMTok: 1.25, OutputPerMTok: 5}, ContextWindow: 200_000},
			"claude-3-7-sonnet": {Price: Price{InputPerMTok: 3, CachedInputPerMTok: 0.3, CacheWritePerMTok: 3.75, OutputPerMTok: 15}, ContextWindow: 200_000, Retires: "2026-02-19"},
			"claude-3-opus":     {Price: Price{InputPerMTok: 15, CachedInputPerMTok: 1.5, CacheWritePerMTok: 18.75, OutputPerMTok: 75}, ContextWindow: 200_000, Retires: "2026-05-01"},
			"claude-3-haiku":    {Price: Price{InputPerMTok: 0.25, CachedInputPerMTok: 0.03, CacheWritePerMTok: 0.3, OutputPerMTok: 1.25}, ContextWindow: 200_000},
		}, aliases{"claude-opus-4-0": "claude-opus-4", "claude-sonnet-4-0": "claude-sonnet-4", "claude-3-7-sonnet-latest": "claude-3-7-sonnet"}),
		"gemini": geminiPrices,
		// The same models through Gemini's OpenAI-compatible endpoint.
		"gemini-openai": geminiPrices,
		"groq": dated(litellm20260724, map[string]Model{
			"llama-3.1-8b-instant":                          {Price: Price{InputPerMTok: 0.05, OutputPerMTok: 0.08}, ContextWindow: 128_000},
			"llama-3.3-70b-versatile":                       {Price: Price{InputPerMTok: 0.59, OutputPerMTok: 0.79}, ContextWindow: 128_000},
			"meta-llama/llama-4-maverick-17b-128e-instruct": {Price: Price{InputPerMTok: 0.2, OutputPerMTok: 0.6}, ContextWindow: 131_072},
			"meta-llama/llama-4-scout-17b-16e-instruct":     {Price: Price{InputPerMTok: 0.11, OutputPerMTok: 0.34}, ContextWindow: 131_072},
			"openai/gpt-oss-120b":                           {Price: Price{InputPerMTok: 0.15, CachedInputPerMTok: 0.075, OutputPerMTok: 0.6}, ContextWindow: 131_072},
			"openai/gpt-oss-20b":                            {Price: Price{InputPerMTok: 0.075, CachedInputPerMTok: 0.0375, OutputPerMTok: 0.3}, ContextWindow: 131_072},
			"qwen/qwen3-32b":                                {Price: Price{InputPerMTok: 0.29, OutputPerMTok: 0.59}, ContextWindow: 131_000},
			"moonshotai/kimi-k2-instruct-0905":              {Price: Price{InputPerMTok: 1, CachedInputPerMTok: 0.5, OutputPerMTok: 3}, ContextWindow: 262_144},
		}),
	}
})

// Gemini's batch mode bills half, as the default batch rates do.
func geminiPrices() map[string]entry {
	return dated(litellm20260724, map[string]Model{
		"gemini-3.6-flash":       {Price: Price{InputPerMTok: 1.5, CachedInputPerMTok: 0.15, OutputPerMTok: 7.5}, ContextWindow: 1_048_576},
		"gemini-3.5-flash":       {Price: Price{InputPerMTok: 1.5, CachedInputPerMTok: 0.15, OutputPerMTok: 9}, ContextWindow: 1_048_576},
		"gemini-3.5-flash-lite":  {Price: Price{InputPerMTok: 0.3, CachedInputPerMTok: 0.03, OutputPerMTok: 2.5}, ContextWindow: 1_048_576},
		"gemini-3.1-pro-preview": {Price: Price{InputPerMTok: 2, CachedInputPerMTok: 0.2, OutputPerMTok: 12, LongContext: &Tier{AboveTokens: 200_000, InputPerMTok: 4, OutputPerMTok: 18, CachedInputPerMTok: 0.4}}, ContextWindow: 1_048_576},
		"gemini-3.1-flash-lite":  {Price: Price{InputPerMTok: 0.25, CachedInputPerMTok: 0.025, OutputPerMTok: 1.5}, ContextWindow: 1_048_576},
		"gemini-3-pro-preview":   {Price: Price{InputPerMTok: 2, CachedInputPerMTok: 0.2, OutputPerMTok: 12, LongContext: &Tier{AboveTokens: 200_000, InputPerMTok: 4, OutputPerMTok: 18, CachedInputPerMTok: 0.4}}, ContextWindow: 1_048_576, Retires: "2026-03-09"},
		"gemini-3-flash-preview": {Price: Price{InputPerMTok: 0.5, CachedInputPerMTok: 0.05, OutputPerMTok: 3}, ContextWindow: 1_048_576},
		"gemini-2.5-pro":         {Price: Price{InputPerMTok: 1.25, CachedInputPerMTok: 0.125, OutputPerMTok: 10, LongContext: &Tier{AboveTokens: 200_000, InputPerMTok: 2.5, OutputPerMTok: 15, CachedInputPerMTok: 0.25}}, ContextWindow: 1_048_576},
		"gemini-2.5-flash":       {Price: Price{InputPerMTok: 0.3, CachedInputPerMTok: 0.03, OutputPerMTok: 2.5}, ContextWindow: 1_048_576},
		"gemini-2.5-flash-lite":  {Price: Price{InputPerMTok: 0.1, CachedInputPerMTok: 0.01, OutputPerMTok: 0.4}, ContextWindow: 1_048_576},
		"gemini-2.0-flash":       {Price: Price{InputPerMTok: 0.1, CachedInputPerMTok: 0.025, OutputPerMTok: 0.4}, ContextWindow: 1_048_576, Retires: "2026-06-01"},
		"gemini-2.0-flash-lite":  {Price: Price{InputPerMTok: 0.075, CachedInputPerMTok: 0.01875, OutputPerMTok: 0.3}, ContextWindow: 1_048_576, Retires: "2026-06-01"},
		"gemini-embedding-001":   {Price: Price{InputPerMTok: 0.15}, ContextWindow: 2_048},
	}, aliases{"gemini-2.0-flash-001": "gemini-2.0-flash", "gemini-2.0-flash-lite-001": "gemini-2.0-flash-lite"})
}

// aliases are other names of a table's models: id to the entry it names.
type aliases map[string]string

// dated makes the entries of one source's models, and their aliases.
func dated(at string, models map[string]Model, names ...aliases) map[string]entry {
	out := make(map[string]entry, len(models))
	for id, m := range models {
		out[id] = entry{model: m, at: at}
	}
	for _, a := range names {
		for id, to := range a {
			out[id] = entry{alias: to, at: at}
		}
	}
	return out
}
