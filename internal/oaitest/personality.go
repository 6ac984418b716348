package oaitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Personality makes the server answer in one provider's wire shape. The zero value is the plain
// OpenAI shape the server always spoke: reasoning only where a Response sets ReasoningContent or
// Reasoning, usage details present, any model id accepted.
//
// Response.Think is the reply's reasoning in the abstract; the personality decides where it goes
// on the wire (ReasoningField), and whether the request asked for it (Thinking).
type Personality struct {
	// Name is the provider's name (the teachers package's provider names).
	Name string
	// ReasoningField places Response.Think: FieldReasoningContent, FieldReasoning, FieldBoth,
	// FieldDetails, FieldInline, or "" (FieldReasoningContent).
	ReasoningField string
	// NullContent sends "content": null when the content is empty (vLLM, DeepSeek, Z.ai when the
	// reasoning used the budget).
	NullContent bool
	// NullUsageDetails sends prompt_tokens_details and completion_tokens_details as null (vLLM,
	// SGLang).
	NullUsageDetails bool
	// TopLevelReasoningTokens reports the reasoning tokens as usage.reasoning_tokens, beside the
	// null details (SGLang's UsageInfo, python/sglang/srt/entrypoints/openai/protocol.py, has
	// reasoning_tokens at the top and no completion_tokens_details).
	TopLevelReasoningTokens bool
	// DeepSeekCache reports cached prompt tokens as prompt_cache_hit_tokens and
	// prompt_cache_miss_tokens instead of prompt_tokens_details.cached_tokens.
	DeepSeekCache bool
	// CostPerToken adds usage.cost (OpenRouter) at this many USD per token; 0 sends none.
	// OpenRouter also sends usage.is_byok and usage.cost_details.upstream_inference_cost (equal
	// to cost on its own credits). BYOK makes it a bring-your-own-key request: then cost is only
	// OpenRouter's fee (BYOKFee of the upstream charge) and the upstream provider bills the
	// rest, upstream_inference_cost (openrouter.ai/docs usage accounting; the fee is 5%).
	CostPerToken float64
	BYOK         bool
	// KeepAlive is an SSE comment line (": keep-alive") sent before the first chunk and between
	// chunks of a stream; BlankLines sends empty lines before a plain reply's JSON (DeepSeek's
	// queueing behaviour).
	KeepAlive  string
	BlankLines bool
	// UsageOnFinish puts a stream's usage on its finish chunk (DeepSeek, Z.ai) rather than in a
	// separate chunk with no choices after it, and sends it even without stream_options.
	UsageOnFinish bool
	// StrictModels refuses a model id not in the server's models (WithModels), with the
	// provider's status and error shape (NotFound: one of the NotFound* values, "" for OpenAI's
	// 404 model_not_found).
	StrictModels bool
	NotFound     string
	// Thinking reads the request: whether the reply reasons (false strips Response.Think), and a
	// refusal (status and message) when the request breaks the provider's rule. nil: always on.
	Thinking func(r Request) (on bool, refuse int, msg string)
	// FilterFinish is the finish reason of a ContentFilter fault ("" = content_filter);
	// FaultFinish the one of a ProviderFault fault ("" = error).
	FilterFinish, FaultFinish string
	// RateLimit, when > 0, allows that many requests per RateWindow and sends OpenAI's
	// x-ratelimit-* headers; a request beyond it gets 429 with retry-after-ms.
	RateLimit  int
	RateWindow time.Duration
	// SnapshotOnFinish repeats the whole reply as a "message" beside the finish chunk's empty
	// delta, as some OpenAI-compatible gateways end a stream (reported in
	// abundantbeing/hermes-browser-extension#11 and HybridAIOne/hybridclaw#1325): a client that
	// appends it duplicates the reply.
	SnapshotOnFinish bool
	// ChunkBytes is the size of a stream's content and reasoning deltas (default 8, about two
	// tokens); ChunkDelay is waited before each chunk (a model's decode speed).
	ChunkBytes int
	ChunkDelay time.Duration
}

// Values of Personality.ReasoningField.
const (
	FieldReasoningContent = "reasoning_content"
	FieldReasoning        = "reasoning"
	FieldBoth             = "both"    // reasoning_content and reasoning, the same text (vLLM during the rename)
	FieldDetails          = "details" // reasoning and reasoning_details (OpenRouter)
	FieldInline           = "inline"  // <think>…</think> in front of the content (no reasoning parser)
	// FieldOpened is the reasoning then </think> in front of the content, without the opening
	// tag: no reasoning parser, and a chat template that ended the prompt with <think>
	// (Qwen3.5's). With FieldInline and FieldOpened, a reply whose reasoning used the budget
	// (no content, finish length) ends inside the reasoning: no </think>.
	FieldOpened = "opened"
)

// Values of Personality.NotFound: how a provider answers an unknown model id.
const (
	// NotFoundVLLM is vLLM's and SGLang's 404 {"object":"error","type":"NotFoundError",...}.
	NotFoundVLLM = "vllm"
	// NotFoundDeepSeek is DeepSeek's 400 {"error":{"message":"Model Not Exist",...}} (as
	// reported against api.deepseek.com in many client trackers, e.g. ConardLi/easy-dataset#9).
	NotFoundDeepSeek = "deepseek"
	// NotFoundZhipu is Z.ai's 400 {"error":{"code":"1211","message":...}} (Zhipu's error code
	// 1211, "the model does not exist"; esengine/DeepSeek-Reasonix#6858 shows the body).
	NotFoundZhipu = "zai"
	// NotFoundOllama is Ollama's 404 {"error":{"type":"not_found_error",...}}
	// (ollama/ollama openai/openai.go NewError).
	NotFoundOllama = "ollama"
)

// BYOKFee is OpenRouter's fee on a bring-your-own-key request, as a fraction of the upstream
// charge.
const BYOKFee = 0.05

// WithPersonality makes the server speak p's wire shape.
func WithPersonality(p Personality) Option { return func(s *Server) { s.p = p } }

// boolField reads a boolean at a path of a request's JSON body; ok is false when absent.
func boolField(r Request, path ...string) (v, ok bool) {
	var cur any
	if json.Unmarshal(r.Body, &cur) != nil {
		return false, false
	}
	for _, k := range path {
		m, isMap := cur.(map[string]any)
		if !isMap {
			return false, false
		}
		if cur, ok = m[k]; !ok {
			return false, false
		}
	}
	b, isBool := cur.(bool)
	return b, isBool
}

// stringField reads a string at a path of a request's JSON body.
func stringField(r Request, path ...string) string {
	var cur any
	if json.Unmarshal(r.Body, &cur) != nil {
		return ""
	}
	for _, k := range path {
		m, isMap := cur.(map[string]any)
		if !isMap {
			return ""
		}
		cur = m[k]
	}
	s, _ := cur.(string)
	return s
}

// templateThinking is vLLM's and SGLang's rule: the chat template's enable_thinking (or, for
// DeepSeek templates, thinking) switch, on by default.
func templateThinking(r Request) (bool, int, string) {
	if v, ok := boolField(r, "chat_template_kwargs", "enable_thinking"); ok {
		return v, 0, ""
	}
	if v, ok := boolField(r, "chat_template_kwargs", "thinking"); ok {
		return v, 0, ""
	}
	return true, 0, ""
}

// typeThinking is Z.ai's and DeepSeek's rule: thinking: {"type": "enabled"|"disabled"}.
func typeThinking(r Request) (bool, int, string) {
	return stringField(r, "thinking", "type") != "disabled", 0, ""
}

// DashScopeNonStreamMessage is DashScope's refusal of a non-streaming call that thinks.
const DashScopeNonStreamMessage = "parameter.enable_thinking must be set to false for non-streaming calls"

// dashScopeThinking is DashScope's rule for the open Qwen3 models: they think unless
// enable_thinking (top level; chat_template_kwargs is ignored) is false, and a call that thinks
// must stream.
func dashScopeThinking(r Request) (bool, int, string) {
	on := true
	if v, ok := boolField(r, "enable_thinking"); ok {
		on = v
	}
	if on && !r.Stream {
		return on, http.StatusBadRequest, DashScopeNonStreamMessage
	}
	return on, 0, ""
}

// openRouterThinking: reasoning: {"enabled": false} or {"exclude": true} turns it off.
func openRouterThinking(r Request) (bool, int, string) {
	if v, ok := boolField(r, "reasoning", "enabled"); ok && !v {
		return false, 0, ""
	}
	if v, ok := boolField(r, "reasoning", "exclude"); ok && v {
		return false, 0, ""
	}
	return true, 0, ""
}

// effortThinking: reasoning_effort "none" turns thinking off (Fireworks, Ollama).
func effortThinking(r Request) (bool, int, string) {
	return stringField(r, "reasoning_effort") != "none", 0, ""
}

// togetherThinking: Together's hybrid models turn thinking off with reasoning: {"enabled":
// false} (docs.together.ai, Reasoning: "Hybrid: reasoning={"enabled": True/False}").
func togetherThinking(r Request) (bool, int, string) {
	if v, ok := boolField(r, "reasoning", "enabled"); ok && !v {
		return false, 0, ""
	}
	return true, 0, ""
}

// OllamaEffortMessage is Ollama's refusal of a reasoning effort it does not know.
const OllamaEffortMessage = `invalid reasoning value: '%s' (must be "high", "medium", "low", or "none")`

// ollamaThinking is Ollama's OpenAI-compatible rule (ollama/ollama openai/openai.go
// FromChatRequest): reasoning.effort, else reasoning_effort, must be high, medium, low or
// none (400 otherwise); none turns thinking off.
func ollamaThinking(r Request) (bool, int, string) {
	effort := stringField(r, "reasoning", "effort")
	if effort == "" {
		effort = stringField(r, "reasoning_effort")
	}
	switch effort {
	case "", "high", "medium", "low":
		return true, 0, ""
	case "none":
		return false, 0, ""
	}
	return true, http.StatusBadRequest, fmt.Sprintf(OllamaEffortMessage, effort)
}

// OpenAIMaxTokensMessage is OpenAI's refusal of max_tokens by its reasoning models.
const OpenAIMaxTokensMessage = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."

// openAIRule is OpenAI's rule for its reasoning models: max_tokens is refused with 400
// unsupported_parameter (as many client trackers report for o1, o3, gpt-5, e.g.
// teilomillet/gollm#33); max_completion_tokens is the budget.
func openAIRule(r Request) (bool, int, string) {
	if r.Field("max_tokens") != nil {
		return true, http.StatusBadRequest, OpenAIMaxTokensMessage
	}
	return true, 0, ""
}

// Personalities are the providers' wire shapes, by the teachers package's provider names. Where
// each shape comes from (providers' documentation and issue trackers, 2025-2026):
//
//   - vllm: message.reasoning since vllm-project/vllm#27752 (the RFC vllm#27755 removed
//     reasoning_content later); usage details null; content null when the reasoning used the
//     budget; 404 {"object":"error","type":"NotFoundError",...} for an unknown model; thinking
//     through chat_template_kwargs. "vllm-legacy" is a vLLM before the rename
//     (reasoning_content), "vllm-transition" one sending both fields with the same text in
//     every message and delta (its DeltaMessage copied reasoning into reasoning_content),
//     "vllm-inline" one started without --reasoning-parser (the <think> block stays in the
//     content), "vllm-opened" one without a parser serving a template that opens <think> in
//     the prompt (Qwen3.5's chat_template.jinja: the content starts inside the reasoning).
//   - sglang: reasoning_content, null usage details with the reasoning tokens in
//     usage.reasoning_tokens, chat_template_kwargs, any model id served, finish reason abort.
//   - deepseek: reasoning_content; prompt_cache_hit_tokens / prompt_cache_miss_tokens; ": keep-alive"
//     SSE comments and empty lines before a plain body while queued (DeepSeek API docs, rate
//     limit page); finish reason insufficient_system_resource; usage on the last chunk; 400
//     "Model Not Exist" for an unknown model.
//   - zai: reasoning_content; thinking.type; finish reasons sensitive and network_error; usage
//     on the last chunk; 400 with code "1211" for an unknown model.
//   - dashscope: reasoning_content; top-level enable_thinking, and 400 "parameter.enable_thinking
//     must be set to false for non-streaming calls" (as reported against Alibaba Model Studio
//     in coze-dev/coze-studio#324 and others).
//   - openrouter: message.reasoning plus reasoning_details ([{type: reasoning.text, text}]);
//     usage.cost, is_byok and cost_details.upstream_inference_cost; ": OPENROUTER PROCESSING"
//     comments; finish reason error on upstream failure.
//   - together, ollama: message.reasoning; fireworks: reasoning_content; reasoning_effort "none"
//     turns thinking off on Fireworks and Ollama, reasoning.enabled false on Together. Ollama
//     refuses an effort other than high, medium, low and none with 400, has no usage details
//     and answers an unknown model with 404 not_found_error (ollama/ollama openai/openai.go).
//   - openai: x-ratelimit-limit/remaining/reset-requests and -tokens headers, 429 with
//     retry-after-ms, strict model ids, no reasoning text in chat completions, 400 for
//     max_tokens (its reasoning models take max_completion_tokens only).
var Personalities = map[string]Personality{
	"vllm": {Name: "vllm", ReasoningField: FieldReasoning, NullContent: true, NullUsageDetails: true,
		StrictModels: true, NotFound: NotFoundVLLM, Thinking: templateThinking, FaultFinish: "abort"},
	"vllm-legacy": {Name: "vllm", ReasoningField: FieldReasoningContent, NullContent: true, NullUsageDetails: true,
		StrictModels: true, NotFound: NotFoundVLLM, Thinking: templateThinking},
	"vllm-transition": {Name: "vllm", ReasoningField: FieldBoth, NullContent: true, NullUsageDetails: true,
		StrictModels: true, NotFound: NotFoundVLLM, Thinking: templateThinking},
	"vllm-inline": {Name: "vllm", ReasoningField: FieldInline, NullUsageDetails: true,
		StrictModels: true, NotFound: NotFoundVLLM, Thinking: templateThinking},
	"vllm-opened": {Name: "vllm", ReasoningField: FieldOpened, NullUsageDetails: true,
		StrictModels: true, NotFound: NotFoundVLLM, Thinking: templateThinking},
	"sglang": {Name: "sglang", ReasoningField: FieldReasoningContent, NullContent: true, NullUsageDetails: true,
		TopLevelReasoningTokens: true, Thinking: templateThinking, FaultFinish: "abort"},
	"deepseek": {Name: "deepseek", ReasoningField: FieldReasoningContent, NullContent: true, DeepSeekCache: true,
		KeepAlive: ": keep-alive", BlankLines: true, UsageOnFinish: true, StrictModels: true, NotFound: NotFoundDeepSeek,
		Thinking: typeThinking, FaultFinish: "insufficient_system_resource"},
	"zai": {Name: "zai", ReasoningField: FieldReasoningContent, UsageOnFinish: true, StrictModels: true, NotFound: NotFoundZhipu,
		Thinking: typeThinking, FilterFinish: "sensitive", FaultFinish: "network_error"},
	"dashscope": {Name: "dashscope", ReasoningField: FieldReasoningContent, StrictModels: true, Thinking: dashScopeThinking},
	"openrouter": {Name: "openrouter", ReasoningField: FieldDetails, CostPerToken: 2e-7, KeepAlive: ": OPENROUTER PROCESSING",
		StrictModels: true, Thinking: openRouterThinking, FaultFinish: "error"},
	"together":  {Name: "together", ReasoningField: FieldReasoning, StrictModels: true, Thinking: togetherThinking},
	"fireworks": {Name: "fireworks", ReasoningField: FieldReasoningContent, StrictModels: true, Thinking: effortThinking},
	"ollama": {Name: "ollama", ReasoningField: FieldReasoning, NullUsageDetails: true, StrictModels: true, NotFound: NotFoundOllama,
		Thinking: ollamaThinking},
	"openai": {Name: "openai", ReasoningField: "", StrictModels: true, RateLimit: 600, RateWindow: time.Minute, Thinking: openAIRule},
}

// notFound writes the provider's answer to an unknown model id.
func (s *Server) notFound(w http.ResponseWriter, model string) {
	switch s.p.NotFound {
	case NotFoundVLLM:
		writeJSON(w, http.StatusNotFound, map[string]any{"object": "error", "message": fmt.Sprintf("The model `%s` does not exist.", model),
			"type": "NotFoundError", "param": nil, "code": http.StatusNotFound})
		return
	case NotFoundDeepSeek:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"message": "Model Not Exist",
			"type": "invalid_request_error", "param": nil, "code": "invalid_request_error"}})
		return
	case NotFoundZhipu:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{"code": "1211", "message": "Unknown Model, please check the model code."}})
		return
	case NotFoundOllama:
		writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{"message": fmt.Sprintf("model %q not found, try pulling it first", model),
			"type": "not_found_error", "param": nil, "code": nil}})
		return
	}
	writeJSON(w, http.StatusNotFound, map[string]any{"error": map[string]any{
		"message": fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model),
		"type":    "invalid_request_error", "param": nil, "code": "model_not_found"}})
}

// rateLimit applies the personality's request budget: it sets the x-ratelimit-* headers and
// reports false (after writing the 429) when the window's budget is spent.
func (s *Server) rateLimit(w http.ResponseWriter) bool {
	if s.p.RateLimit <= 0 {
		return true
	}
	window := s.p.RateWindow
	if window <= 0 {
		window = time.Minute
	}
	s.mu.Lock()
	now := time.Now()
	if s.windowStart.IsZero() || now.Sub(s.windowStart) >= window {
		s.windowStart, s.windowUsed = now, 0
	}
	over := s.windowUsed >= s.p.RateLimit
	if over {
		s.limited++
	} else {
		s.windowUsed++
	}
	left := s.p.RateLimit - s.windowUsed
	reset := s.windowStart.Add(window).Sub(now)
	s.mu.Unlock()
	h := w.Header()
	h.Set("X-Ratelimit-Limit-Requests", fmt.Sprint(s.p.RateLimit))
	h.Set("X-Ratelimit-Remaining-Requests", fmt.Sprint(left))
	h.Set("X-Ratelimit-Reset-Requests", reset.Round(time.Millisecond).String())
	h.Set("X-Ratelimit-Limit-Tokens", "10000000")
	h.Set("X-Ratelimit-Remaining-Tokens", "10000000")
	h.Set("X-Ratelimit-Reset-Tokens", "0s")
	if over {
		h.Set("Retry-After-Ms", fmt.Sprint(reset.Milliseconds()+1))
		writeError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "Rate limit reached for requests (oaitest).")
		return false
	}
	return true
}

// RateLimited counts the requests the personality's rate limit answered with 429.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limited
}
