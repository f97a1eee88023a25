// Package provider holds the model adapters (openai, anthropic, gemini, sim)
// and normalises every failure into a *retry.Error.
//
// # Adapters
//
// One adapter per wire protocol (docs/design.md §3), built with [New]:
//
//   - openai: Chat Completions (POST {base_url}/chat/completions, Authorization:
//     Bearer), for OpenAI and every compatible endpoint (see [Presets]).
//     Streaming reads SSE "data:" lines up to "data: [DONE]" and asks for
//     stream_options.include_usage. JSON mode is response_format json_object, or
//     json_schema when Request.Schema is set (see Beyond text). Request.Params are merged into the
//     body (temperature, max_tokens, top_p, stop, seed, …); the adapter's own
//     fields (model, messages, stream) cannot be overridden by them.
//   - anthropic: Messages API (POST {base_url}/messages, x-api-key,
//     anthropic-version 2023-06-01). max_tokens defaults to
//     [AnthropicMaxTokensDefault]; "stop" is sent as stop_sequences. The API has
//     no JSON switch: JSON mode with an object schema forces a tool whose
//     input is the answer; otherwise it adds an instruction (and the schema)
//     to the system prompt. Input tokens count cache reads and writes too, as OpenAI's
//     prompt_tokens does.
//   - gemini: native generateContent / streamGenerateContent?alt=sse. The key
//     goes in the x-goog-api-key header, never in ?key=. Params map onto
//     generationConfig (max_tokens → maxOutputTokens, top_p → topP, …); JSON
//     mode sets responseMimeType application/json and responseJsonSchema.
//     Thinking tokens are counted as output tokens (they are billed as such).
//   - sim: the simulated model of sim.go; it stops at max_tokens (four
//     characters a token) as a model does, takes images (and refuses data
//     that is not one), calls a tool it is given with arguments that fit
//     its schema, answers a schema with JSON that satisfies it, reports
//     cache writes and reads of a cached system prompt, and embeds text in
//     unit vectors of a fixed dimension (sim_tools.go).
//
// # Beyond text
//
// A user turn may carry images and documents (PDF) as [Part]s, at a URL or as
// base64 data, sent before its text: OpenAI image_url and file parts (a
// document only as data: Chat Completions takes no document URL, and such a
// request fails as invalid_request before anything is sent), Anthropic image
// and document blocks (source url or base64), Gemini inlineData and fileData.
//
// Request.Tools are function definitions (a JSON Schema of the arguments)
// and Request.ToolChoice auto, none, required or a tool's name: OpenAI tools
// and tool_choice, Anthropic tools and tool_choice (required is "any"),
// Gemini functionDeclarations (parametersJsonSchema) and a
// functionCallingConfig. The answer's calls are Response.ToolCalls, their
// arguments the JSON the model wrote, and FinishReason tool_calls (Gemini
// says STOP). A conversation that goes on after a turn of calls (a repair)
// answers each call with a result saying it was not run: jetpool runs no
// tools, the calls are the output.
//
// Structured output: with Request.Schema, OpenAI gets response_format
// json_schema, with strict: true when the schema is in the strict subset
// (every object lists all its properties as required and sets
// additionalProperties: false; strict outside it is a 400); Gemini
// responseJsonSchema (JSON Schema as it is; responseSchema is an OpenAPI
// subset); Anthropic a forced tool (jetpool_structured_output) whose input is
// the answer's text, when the schema is an object and the request has no
// tools, tool_choice or thinking of its own — otherwise, and for JSON without
// a schema, the instruction in the system prompt. What params set
// (response_format, response_mime_type, response_schema) wins.
//
// Prompt caching: Request.CacheSystem, CacheTools and Part.Cache put
// Anthropic's cache_control on the system prompt, the last tool and a part;
// OpenAI and Gemini cache long prefixes by themselves. Every adapter reports
// cached-input tokens in Usage (and Anthropic's cache writes).
//
// Embeddings: the openai, gemini and sim adapters are [Embedder]s: POST
// {base_url}/embeddings with a list of inputs (vectors as numbers or
// base64 float32), Gemini embedContent for one input and batchEmbedContents
// for more ([EmbedMaxInputs] per request).
//
// # Answers
//
// Every Response carries FinishReason, normalised to stop, length,
// content_filter, tool_calls or other (FinishReasonRaw keeps the provider's
// own word: OpenAI finish_reason, Anthropic stop_reason max_tokens /
// end_turn / refusal, Gemini finishReason MAX_TOKENS / SAFETY / RECITATION
// …), streamed or not. A refusal is content_filter in every wire format:
// OpenAI's message.refusal or streamed delta.refusal (raw "refusal", the
// refusal's text as Text), Anthropic's stop_reason refusal, and a Gemini
// prompt blocked before any candidate (raw "blockReason SAFETY", usage
// kept). Whether a truncated or filtered answer fails its
// record is the worker's decision (worker/outcome_finish.go). Usage counts
// every input token (cached ones included) and every output token
// (reasoning included), and the cached, cache-write and reasoning parts
// where the provider reports them.
//
// A 2xx body that is JSON but not the promised shape — no choices or
// candidates, a message without content, content 12345 — is an
// InvalidResponseError of class unknown, never an empty success: the
// session layer does not call again at once, the exec layer redelivers (a
// broken gateway is the usual cause, and it may have mended by then).
//
// The real adapters use net/http, not the vendors' SDKs: classifying a
// failure needs its exact status, headers and body, and the SDKs' own retries
// would multiply with jetpool's two retry layers, which alone own retrying.
//
// # Errors
//
// Every failure is a *retry.Error with its Class set, a stable TypeName, the
// HTTP Status, the provider's error type and code (Gemini: status and
// ErrorInfo reason), the provider's message (parsed from the body; a body that
// is not JSON gives its first [MaxMessageLen] characters), RetryAfter
// (Retry-After, retry-after-ms, Gemini's RetryInfo.retryDelay), Reset (the
// longest x-ratelimit-reset-* / anthropic-ratelimit-*-reset, set on rate
// limits only: on any other error a bucket's refill time would only delay a
// retry), Provider and Model. Classification is [retry.Classify]'s; an adapter
// overrides it only where it knows a provider shape Classify cannot tell:
//
//   - OpenAI's 429 "Request too large for … on tokens per min" is
//     invalid_request: the request alone exceeds the per-minute budget, so no
//     wait lets it through.
//   - Gemini's 200 whose promptFeedback blocks the prompt is invalid_request
//     (PromptBlockedError).
//
// Transport failures are network errors: APIConnectionError before any
// response (connection refused or reset, DNS, TLS), APITimeoutError when
// Config.Timeout expires (it bounds the whole call, stream included),
// NetworkError for a body cut short. A stream that breaks mid-flight is a
// NetworkError with an empty message (docs/design.md §3). A 2xx body that ends in
// "unexpected end of JSON input" is a truncated body, so network, not a schema
// problem. A body beyond [MaxBodyBytes] is a ResponseTooLargeError of class
// invalid_request: the size of an answer follows from its request, so a retry
// would download (and pay for) the same body again; an error body beyond
// [MaxErrorBodyBytes] is just cut.
//
// An error event inside a 200 stream is normalised like an HTTP error; when
// it carries only words (no status, no type) retry.Classify reads them. A
// stream that is garbage says what was wrong, with its first bytes quoted: a
// body that is not SSE at all ("response is not an SSE stream: …"; a JSON
// error body sent with a 200 is read as that error) and an event that does
// not decode ("stream event does not decode: …") are classified by their
// words, and are unknown (InvalidResponseError) when the words say nothing;
// an event cut by the end of the stream is a NetworkError ("stream ended
// inside an event: …"). llama.cpp's "error: {…}" stream lines are errors.
//
// # insufficient_quota
//
// OpenAI's 429 with type/code insufficient_quota ("You exceeded your current
// quota, please check your plan and billing details") is a billing problem:
// no wait fixes it, so it is permanent. It is classed auth (retry.Classify
// does so; the adapter names it InsufficientQuotaError): like a dead key, the
// account must be fixed by a person, after which every record that failed
// this way can be replayed with `jetpool retry --class auth`. Gemini's
// per-minute 429 RESOURCE_EXHAUSTED says "exceeded your current quota" too and
// stays a rate limit: the type, not the message, decides.
//
// # Secrets
//
// API keys come from Config.APIKey (the environment or a key file) at each
// call. They never appear in an error: every message is scrubbed of the key,
// and of credential-looking query parameters (key=, api_key=, token=, …),
// including the URL inside Go's *url.Error.
//
// # Tests
//
// Package providertest has loopback fake servers and the wire formats of the
// three APIs; suite_test.go runs one behaviour suite against every adapter.
package provider
