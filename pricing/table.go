package pricing

// TableDate is when the built-in prices were copied from the vendors'
// public price pages (openai.com/api/pricing, anthropic.com/pricing,
// ai.google.dev/gemini-api/docs/pricing, groq.com/pricing): standard tier,
// text tokens, Gemini's rates for prompts up to 200k tokens. Prices change;
// a workflow's price: block overrides any of them, and `jetpool validate`
// shows which one each action uses.
const TableDate = "2025-08"

// builtin is the price table, by preset and model family.
var builtin = map[string]map[string]Price{
	"openai": {
		"gpt-4o-mini":  {InputPerMTok: 0.15, CachedInputPerMTok: 0.075, OutputPerMTok: 0.60},
		"gpt-4o":       {InputPerMTok: 2.50, CachedInputPerMTok: 1.25, OutputPerMTok: 10.00},
		"gpt-4.1":      {InputPerMTok: 2.00, CachedInputPerMTok: 0.50, OutputPerMTok: 8.00},
		"gpt-4.1-mini": {InputPerMTok: 0.40, CachedInputPerMTok: 0.10, OutputPerMTok: 1.60},
		"gpt-4.1-nano": {InputPerMTok: 0.10, CachedInputPerMTok: 0.025, OutputPerMTok: 0.40},
		"gpt-5":        {InputPerMTok: 1.25, CachedInputPerMTok: 0.125, OutputPerMTok: 10.00},
		"gpt-5-mini":   {InputPerMTok: 0.25, CachedInputPerMTok: 0.025, OutputPerMTok: 2.00},
		"gpt-5-nano":   {InputPerMTok: 0.05, CachedInputPerMTok: 0.005, OutputPerMTok: 0.40},
		"o4-mini":      {InputPerMTok: 1.10, CachedInputPerMTok: 0.275, OutputPerMTok: 4.40},
		"o3":           {InputPerMTok: 2.00, CachedInputPerMTok: 0.50, OutputPerMTok: 8.00},
		// Embeddings (kind: embed actions): input tokens only.
		"text-embedding-3-small": {InputPerMTok: 0.02},
		"text-embedding-3-large": {InputPerMTok: 0.13},
		"text-embedding-ada-002": {InputPerMTok: 0.10},
	},
	"anthropic": {
		"claude-opus-4-1":   {InputPerMTok: 15, CachedInputPerMTok: 1.50, CacheWritePerMTok: 18.75, OutputPerMTok: 75},
		"claude-opus-4":     {InputPerMTok: 15, CachedInputPerMTok: 1.50, CacheWritePerMTok: 18.75, OutputPerMTok: 75},
		"claude-sonnet-4-5": {InputPerMTok: 3, CachedInputPerMTok: 0.30, CacheWritePerMTok: 3.75, OutputPerMTok: 15},
		"claude-sonnet-4":   {InputPerMTok: 3, CachedInputPerMTok: 0.30, CacheWritePerMTok: 3.75, OutputPerMTok: 15},
		"claude-3-7-sonnet": {InputPerMTok: 3, CachedInputPerMTok: 0.30, CacheWritePerMTok: 3.75, OutputPerMTok: 15},
		"claude-haiku-4-5":  {InputPerMTok: 1, CachedInputPerMTok: 0.10, CacheWritePerMTok: 1.25, OutputPerMTok: 5},
		"claude-3-5-haiku":  {InputPerMTok: 0.80, CachedInputPerMTok: 0.08, CacheWritePerMTok: 1.00, OutputPerMTok: 4},
	},
	"gemini": geminiPrices,
	// The same models through Gemini's OpenAI-compatible endpoint.
	"gemini-openai": geminiPrices,
	"groq": {
		"llama-3.1-8b-instant":    {InputPerMTok: 0.05, OutputPerMTok: 0.08},
		"llama-3.3-70b-versatile": {InputPerMTok: 0.59, OutputPerMTok: 0.79},
	},
}

var geminiPrices = map[string]Price{
	// Gemini's batch mode also bills half: the default batch rates hold.
	"gemini-2.5-pro":        {InputPerMTok: 1.25, CachedInputPerMTok: 0.31, OutputPerMTok: 10.00},
	"gemini-2.5-flash":      {InputPerMTok: 0.30, CachedInputPerMTok: 0.075, OutputPerMTok: 2.50},
	"gemini-2.5-flash-lite": {InputPerMTok: 0.10, CachedInputPerMTok: 0.025, OutputPerMTok: 0.40},
	"gemini-2.0-flash":      {InputPerMTok: 0.10, CachedInputPerMTok: 0.025, OutputPerMTok: 0.40},
}
