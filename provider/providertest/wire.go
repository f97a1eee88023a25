package providertest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// q is s as a JSON string.
func q(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// --- OpenAI Chat Completions ------------------------------------------------

// OpenAIChat is a chat.completion body.
func OpenAIChat(model, text string, in, out int) string {
	return OpenAIChatFinish(model, text, "stop", in, out)
}

// OpenAIChatFinish is a chat.completion body with the given finish_reason.
func OpenAIChatFinish(model, text, finish string, in, out int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-abc123","object":"chat.completion","created":1741570283,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":%s,"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":%s}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},`+
		`"service_tier":"default","system_fingerprint":"fp_06737a9306"}`, q(model), q(text), q(finish), in, out, in+out)
}

// OpenAIStream is the SSE events of a streamed completion with
// stream_options.include_usage: a role chunk, one chunk per delta, a
// finish_reason chunk, a usage chunk with empty choices, and [DONE].
func OpenAIStream(model string, deltas []string, in, out int) []string {
	return OpenAIStreamFinish(model, deltas, "stop", in, out)
}

// OpenAIStreamFinish is OpenAIStream with the given finish_reason.
func OpenAIStreamFinish(model string, deltas []string, finish string, in, out int) []string {
	chunk := func(choices string) string {
		return fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,"+
			"\"model\":%s,\"system_fingerprint\":\"fp_06737a9306\",\"choices\":%s,\"usage\":null}\n\n", q(model), choices)
	}
	evs := []string{chunk(`[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]`)}
	for _, d := range deltas {
		evs = append(evs, chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%s},"logprobs":null,"finish_reason":null}]`, q(d))))
	}
	evs = append(evs, chunk(fmt.Sprintf(`[{"index":0,"delta":{},"logprobs":null,"finish_reason":%s}]`, q(finish))))
	evs = append(evs, fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,"+
		"\"model\":%s,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
		q(model), in, out, in+out))
	return append(evs, "data: [DONE]\n\n")
}

// OpenAIRefusal is a chat.completion whose message is a refusal: content
// null, the refusal's text in message.refusal, finish_reason stop (as
// OpenAI answers a request it declines, structured output or not).
func OpenAIRefusal(model, refusal string, in, out int) string {
	return fmt.Sprintf(`{"id":"chatcmpl-9nYAG9LPNonX8DAyrkwYfemr3C8HC","object":"chat.completion","created":1721596428,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":%s,"annotations":[]},"logprobs":null,"finish_reason":"stop"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},`+
		`"service_tier":"default","system_fingerprint":"fp_3407719c7f"}`, q(model), q(refusal), in, out, in+out)
}

// OpenAIRefusalStream is the SSE events of a streamed refusal: a role chunk
// with an empty refusal, the refusal's pieces as delta.refusal, finish_reason
// stop, the usage chunk and [DONE].
func OpenAIRefusalStream(model string, pieces []string, in, out int) []string {
	chunk := func(delta, finish string) string {
		return fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,"+
			"\"model\":%s,\"system_fingerprint\":\"fp_3407719c7f\",\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}],\"usage\":null}\n\n",
			q(model), delta, finish)
	}
	evs := []string{chunk(`{"role":"assistant","content":null,"refusal":""}`, "null")}
	for _, p := range pieces {
		evs = append(evs, chunk(fmt.Sprintf(`{"refusal":%s}`, q(p)), "null"))
	}
	evs = append(evs, chunk(`{}`, `"stop"`))
	evs = append(evs, fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,"+
		"\"model\":%s,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
		q(model), in, out, in+out))
	return append(evs, "data: [DONE]\n\n")
}

// AzureContentFilterError is the 400 body of an Azure OpenAI deployment (an
// OpenAI-compatible endpoint) whose content filter refused the prompt.
func AzureContentFilterError() string {
	return `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. ` +
		`Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: ` +
		`https://go.microsoft.com/fwlink/?linkid=2198766","type":null,"param":"prompt","code":"content_filter","status":400,` +
		`"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},` +
		`"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":true,"severity":"high"}}}}}`
}

// OpenAIError is an OpenAI error body; an empty code is null.
func OpenAIError(message, typ, code string) string {
	c := "null"
	if code != "" {
		c = q(code)
	}
	return fmt.Sprintf(`{"error":{"message":%s,"type":%s,"param":null,"code":%s}}`, q(message), q(typ), c)
}

// OpenAIModels is a GET /models listing.
func OpenAIModels(ids ...string) string {
	items := make([]string, len(ids))
	for i, id := range ids {
		items[i] = fmt.Sprintf(`{"id":%s,"object":"model","created":1686935002,"owned_by":"system"}`, q(id))
	}
	return `{"object":"list","data":[` + strings.Join(items, ",") + `]}`
}

// --- Anthropic Messages -----------------------------------------------------

// AnthropicMessage is a Messages API response body.
func AnthropicMessage(model, text string, in, out int) string {
	return AnthropicMessageStop(model, text, "end_turn", in, out)
}

// AnthropicMessageStop is a Messages API response body with the given stop_reason.
func AnthropicMessageStop(model, text, stop string, in, out int) string {
	return fmt.Sprintf(`{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":%s,`+
		`"content":[{"type":"text","text":%s}],"stop_reason":%s,"stop_sequence":null,`+
		`"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":%d,"service_tier":"standard"}}`,
		q(model), q(text), q(stop), in, out)
}

// anthropicEvent is one SSE event of the Messages stream.
func anthropicEvent(name, data string) string {
	return "event: " + name + "\ndata: " + data + "\n\n"
}

// AnthropicStream is the SSE events of a streamed message, as the API sends
// them: message_start, content_block_start, ping, content_block_delta…,
// content_block_stop, message_delta, message_stop.
func AnthropicStream(model string, deltas []string, in, out int) []string {
	return AnthropicStreamStop(model, deltas, "end_turn", in, out)
}

// AnthropicStreamStop is AnthropicStream with the given stop_reason.
func AnthropicStreamStop(model string, deltas []string, stop string, in, out int) []string {
	evs := []string{
		anthropicEvent("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":%s,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}`, q(model), in)),
		anthropicEvent("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		anthropicEvent("ping", `{"type": "ping"}`),
	}
	for _, d := range deltas {
		evs = append(evs, anthropicEvent("content_block_delta",
			fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":%s}}`, q(d))))
	}
	return append(evs,
		anthropicEvent("content_block_stop", `{"type":"content_block_stop","index":0}`),
		anthropicEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%s,"stop_sequence":null},"usage":{"output_tokens":%d}}`, q(stop), out)),
		anthropicEvent("message_stop", `{"type":"message_stop"}`),
	)
}

// AnthropicError is an Anthropic error body (also the data of an SSE error event).
func AnthropicError(typ, message string) string {
	return fmt.Sprintf(`{"type":"error","error":{"type":%s,"message":%s},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}`, q(typ), q(message))
}

// AnthropicErrorEvent is an SSE error event, as sent after a 200.
func AnthropicErrorEvent(typ, message string) string {
	return anthropicEvent("error", fmt.Sprintf(`{"type":"error","error":{"type":%s,"message":%s}}`, q(typ), q(message)))
}

// AnthropicModel is a GET /models/{id} body.
func AnthropicModel(id string) string {
	return fmt.Sprintf(`{"type":"model","id":%s,"display_name":"Claude","created_at":"2025-02-19T00:00:00Z"}`, q(id))
}

// --- Gemini generateContent -------------------------------------------------

// geminiChunk is a GenerateContentResponse with one candidate.
func geminiChunk(model, text, finish string, in, out int) string {
	fin, usage := "", ""
	if finish != "" {
		fin = fmt.Sprintf(`,"finishReason":%s`, q(finish))
	}
	if in > 0 || out > 0 {
		usage = fmt.Sprintf(`,"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d,"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d}]}`,
			in, out, in+out, in)
	}
	return fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":%s}],"role":"model"}%s,"index":0}]%s,"modelVersion":%s,"responseId":"6bLbaLq0NcSxz7IPj8i5-Ao"}`,
		q(text), fin, usage, q(model))
}

// GeminiResponse is a generateContent response body.
func GeminiResponse(model, text string, in, out int) string {
	return geminiChunk(model, text, "STOP", in, out)
}

// GeminiResponseFinish is a generateContent response body with the given finishReason.
func GeminiResponseFinish(model, text, finish string, in, out int) string {
	return geminiChunk(model, text, finish, in, out)
}

// GeminiStream is the alt=sse events of streamGenerateContent: each a whole
// response, CRLF-framed as Google sends them; the last carries finishReason
// and the usage.
func GeminiStream(model string, deltas []string, in, out int) []string {
	return GeminiStreamFinish(model, deltas, "STOP", in, out)
}

// GeminiStreamFinish is GeminiStream with the given finishReason.
func GeminiStreamFinish(model string, deltas []string, finish string, in, out int) []string {
	evs := make([]string, len(deltas))
	for i, d := range deltas {
		fin, ci, co := "", 0, 0
		if i == len(deltas)-1 {
			fin, ci, co = finish, in, out
		}
		evs[i] = "data: " + geminiChunk(model, d, fin, ci, co) + "\r\n\r\n"
	}
	return evs
}

// GeminiPromptBlocked is a generateContent answer to a prompt Gemini
// blocked: no candidates, promptFeedback.blockReason, the prompt's tokens
// counted in usageMetadata.
func GeminiPromptBlocked(model, reason string, in int) string {
	return fmt.Sprintf(`{"promptFeedback":{"blockReason":%s,"safetyRatings":[{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"HIGH","blocked":true}]},`+
		`"usageMetadata":{"promptTokenCount":%d,"totalTokenCount":%d,"promptTokensDetails":[{"modality":"TEXT","tokenCount":%d}]},"modelVersion":%s,"responseId":"8bLbaNq0NcSxz7IPj8i5-Ao"}`,
		q(reason), in, in, in, q(model))
}

// GeminiPromptBlockedStream is streamGenerateContent's one event for a
// blocked prompt: the same answer as GeminiPromptBlocked, and the end.
func GeminiPromptBlockedStream(model, reason string, in int) []string {
	return []string{"data: " + GeminiPromptBlocked(model, reason, in) + "\r\n\r\n"}
}

// GeminiError is a Google API error body; details are JSON objects (see
// GeminiErrorInfo, GeminiRetryInfo).
func GeminiError(code int, status, message string, details ...string) string {
	d := ""
	if len(details) > 0 {
		d = `,"details":[` + strings.Join(details, ",") + `]`
	}
	return fmt.Sprintf(`{"error":{"code":%d,"message":%s,"status":%s%s}}`, code, q(message), q(status), d)
}

// GeminiErrorInfo is a google.rpc.ErrorInfo detail.
func GeminiErrorInfo(reason string) string {
	return fmt.Sprintf(`{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":%s,"domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}`, q(reason))
}

// GeminiRetryInfo is a google.rpc.RetryInfo detail, e.g. delay "13s".
func GeminiRetryInfo(delay string) string {
	return fmt.Sprintf(`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":%s}`, q(delay))
}

// GeminiQuotaFailure is the google.rpc.QuotaFailure detail of a per-minute quota 429.
func GeminiQuotaFailure(metric string) string {
	return fmt.Sprintf(`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":%s,"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaValue":"10"}]}`, q(metric))
}

// GeminiModel is a GET /models/{model} body.
func GeminiModel(name string) string {
	return fmt.Sprintf(`{"name":%s,"version":"001","displayName":"Gemini","inputTokenLimit":1048576,"outputTokenLimit":65536,"supportedGenerationMethods":["generateContent","countTokens"]}`, q("models/"+name))
}

// --- Tool calls, structured output, embeddings -------------------

// ToolCall is a call a fake answers with: the tool's name and its
// arguments as JSON text.
type ToolCall struct {
	ID, Name, Args string
}

// OpenAIToolCalls is a chat.completion whose message calls tools (content
// null, finish_reason tool_calls; arguments a JSON string, as OpenAI sends them).
func OpenAIToolCalls(model string, calls []ToolCall, in, out int) string {
	items := make([]string, len(calls))
	for i, c := range calls {
		items[i] = fmt.Sprintf(`{"id":%s,"type":"function","function":{"name":%s,"arguments":%s}}`, q(c.ID), q(c.Name), q(c.Args))
	}
	return fmt.Sprintf(`{"id":"chatcmpl-abc123","object":"chat.completion","created":1741570283,"model":%s,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[%s],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],`+
		`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},`+
		`"service_tier":"default","system_fingerprint":"fp_06737a9306"}`, q(model), strings.Join(items, ","), in, out, in+out)
}

// OpenAIToolCallStream is the SSE events of a streamed answer that calls
// tools: the first chunk of each call carries its id and name, the
// arguments follow in two pieces, by index; then finish_reason tool_calls,
// the usage chunk (cached tokens in prompt_tokens_details) and [DONE].
func OpenAIToolCallStream(model string, calls []ToolCall, in, cached, out int) []string {
	chunk := func(delta, finish string) string {
		return fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,"+
			"\"model\":%s,\"system_fingerprint\":\"fp_06737a9306\",\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}],\"usage\":null}\n\n",
			q(model), delta, finish)
	}
	evs := []string{chunk(`{"role":"assistant","content":null}`, "null")}
	for i, c := range calls {
		half := len(c.Args) / 2
		evs = append(evs,
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":%s,"type":"function","function":{"name":%s,"arguments":""}}]}`, i, q(c.ID), q(c.Name)), "null"),
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, i, q(c.Args[:half])), "null"),
			chunk(fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%s}}]}`, i, q(c.Args[half:])), "null"))
	}
	evs = append(evs, chunk(`{}`, `"tool_calls"`))
	evs = append(evs, fmt.Sprintf("data: {\"id\":\"chatcmpl-abc123\",\"object\":\"chat.completion.chunk\",\"created\":1741570283,"+
		"\"model\":%s,\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"+
		"\"prompt_tokens_details\":{\"cached_tokens\":%d,\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n",
		q(model), in, out, in+out, cached))
	return append(evs, "data: [DONE]\n\n")
}

// OpenAIEmbeddings is a POST /embeddings answer: one embedding per vector,
// listed in reverse so that a client must order them by index.
func OpenAIEmbeddings(model string, vectors [][]float32, promptTokens int) string {
	items := make([]string, len(vectors))
	for i := range vectors {
		j := len(vectors) - 1 - i
		b, _ := json.Marshal(vectors[j])
		items[i] = fmt.Sprintf(`{"object":"embedding","index":%d,"embedding":%s}`, j, b)
	}
	return fmt.Sprintf(`{"object":"list","data":[%s],"model":%s,"usage":{"prompt_tokens":%d,"total_tokens":%d}}`,
		strings.Join(items, ","), q(model), promptTokens, promptTokens)
}

// AnthropicToolUse is a Messages API response whose content is a text
// block (when text is not empty) and a tool_use block per call (input an
// object), stop_reason tool_use.
func AnthropicToolUse(model, text string, calls []ToolCall, in, out int) string {
	var blocks []string
	if text != "" {
		blocks = append(blocks, fmt.Sprintf(`{"type":"text","text":%s}`, q(text)))
	}
	for _, c := range calls {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":%s,"name":%s,"input":%s}`, q(c.ID), q(c.Name), c.Args))
	}
	return fmt.Sprintf(`{"id":"msg_01Aq9w938a90dw8q","type":"message","role":"assistant","model":%s,`+
		`"content":[%s],"stop_reason":"tool_use","stop_sequence":null,`+
		`"usage":{"input_tokens":%d,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":%d,"service_tier":"standard"}}`,
		q(model), strings.Join(blocks, ","), in, out)
}

// AnthropicToolUseStream is the SSE events of a streamed message whose
// content is a tool_use block per call: content_block_start with the id and
// name, input_json_delta pieces, content_block_stop; message_start carries
// cache reads and writes.
func AnthropicToolUseStream(model string, calls []ToolCall, in, cacheRead, cacheWrite, out int) []string {
	evs := []string{
		anthropicEvent("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_014p7gG3wDgGV9EUtLvnow3U","type":"message","role":"assistant","content":[],"model":%s,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":%d,"cache_creation_input_tokens":%d,"cache_read_input_tokens":%d,"output_tokens":1}}}`, q(model), in, cacheWrite, cacheRead)),
	}
	for i, c := range calls {
		half := len(c.Args) / 2
		evs = append(evs,
			anthropicEvent("content_block_start", fmt.Sprintf(`{"type":"content_block_start","index":%d,"content_block":{"type":"tool_use","id":%s,"name":%s,"input":{}}}`, i, q(c.ID), q(c.Name))),
			anthropicEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, q(c.Args[:half]))),
			anthropicEvent("content_block_delta", fmt.Sprintf(`{"type":"content_block_delta","index":%d,"delta":{"type":"input_json_delta","partial_json":%s}}`, i, q(c.Args[half:]))),
			anthropicEvent("content_block_stop", fmt.Sprintf(`{"type":"content_block_stop","index":%d}`, i)))
	}
	return append(evs,
		anthropicEvent("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":%d}}`, out)),
		anthropicEvent("message_stop", `{"type":"message_stop"}`),
	)
}

// GeminiFunctionCalls is a generateContent response whose parts are
// functionCall parts (args an object; the first with a thoughtSignature,
// as thinking models send it). Gemini's finishReason stays STOP.
func GeminiFunctionCalls(model string, calls []ToolCall, in, out int) string {
	parts := make([]string, len(calls))
	for i, c := range calls {
		sig := ""
		if i == 0 {
			sig = `,"thoughtSignature":"CiQB0e2Kb3dRh+BYdbZvmulSN2Pwwc75DfQOwUAd"`
		}
		parts[i] = fmt.Sprintf(`{"functionCall":{"name":%s,"args":%s}%s}`, q(c.Name), c.Args, sig)
	}
	return fmt.Sprintf(`{"candidates":[{"content":{"parts":[%s],"role":"model"},"finishReason":"STOP","index":0}],`+
		`"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d},"modelVersion":%s,"responseId":"6bLbaLq0NcSxz7IPj8i5-Ao"}`,
		strings.Join(parts, ","), in, out, in+out, q(model))
}

// GeminiFunctionCallStream is streamGenerateContent's alt=sse events of an
// answer that calls tools: each call whole in its own chunk, the last with
// finishReason STOP and the usage (cachedContentTokenCount included).
func GeminiFunctionCallStream(model string, calls []ToolCall, in, cached, out int) []string {
	evs := make([]string, len(calls))
	for i, c := range calls {
		fin, usage := "", ""
		if i == len(calls)-1 {
			fin = `,"finishReason":"STOP"`
			usage = fmt.Sprintf(`,"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d,"cachedContentTokenCount":%d}`, in, out, in+out, cached)
		}
		evs[i] = fmt.Sprintf("data: {\"candidates\":[{\"content\":{\"parts\":[{\"functionCall\":{\"name\":%s,\"args\":%s}}],\"role\":\"model\"}%s,\"index\":0}]%s,\"modelVersion\":%s}\r\n\r\n",
			q(c.Name), c.Args, fin, usage, q(model))
	}
	return evs
}

// GeminiEmbedding is an embedContent answer.
func GeminiEmbedding(vector []float32) string {
	b, _ := json.Marshal(vector)
	return fmt.Sprintf(`{"embedding":{"values":%s}}`, b)
}

// GeminiEmbeddings is a batchEmbedContents answer.
func GeminiEmbeddings(vectors [][]float32) string {
	items := make([]string, len(vectors))
	for i, v := range vectors {
		b, _ := json.Marshal(v)
		items[i] = fmt.Sprintf(`{"values":%s}`, b)
	}
	return `{"embeddings":[` + strings.Join(items, ",") + `]}`
}
