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
	// DeepSeekCache reports cached prompt tokens as prompt_cache_hit_tokens and
	// prompt_cache_miss_tokens instead of prompt_tokens_details.cached_tokens.
	DeepSeekCache bool
	// CostPerToken adds usage.cost (OpenRouter) at this many USD per token; 0 sends none.
	CostPerToken float64
	// KeepAlive is an SSE comment line (": keep-alive") sent before the first chunk and between
	// chunks of a stream; BlankLines sends empty lines before a plain reply's JSON (DeepSeek's
	// queueing behaviour).
	KeepAlive  string
	BlankLines bool
	// UsageOnFinish puts a stream's usage on its finish chunk (DeepSeek, Z.ai) rather than in a
	// separate chunk with no choices after it, and sends it even without stream_options.
	UsageOnFinish bool
	// StrictModels answers 404 for a model id not in the server's models (WithModels), in the
	// provider's error shape (NotFoundVLLM: vLLM's {"object":"error",...}).
	StrictModels bool
	NotFoundVLLM bool
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
)

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

// Personalities are the providers' wire shapes, by the teachers package's provider names. Where
// each shape comes from (providers' documentation and issue trackers, 2025-2026):
//
//   - vllm: message.reasoning since vllm-project/vllm#27752 (the RFC vllm#27755 removed
//     reasoning_content later); usage details null; content null when the reasoning used the
//     budget; 404 {"object":"error","type":"NotFoundError",...} for an unknown model; thinking
//     through chat_template_kwargs. "vllm-legacy" is a vLLM before the rename
//     (reasoning_content), "vllm-transition" one sending both fields, "vllm-inline" one started
//     without --reasoning-parser (the <think> block stays in the content).
//   - sglang: reasoning_content, null usage details, chat_template_kwargs.
//   - deepseek: reasoning_content; prompt_cache_hit_tokens / prompt_cache_miss_tokens; ": keep-alive"
//     SSE comments and empty lines before a plain body while queued (DeepSeek API docs, rate
//     limit page); finish reason insufficient_system_resource; usage on the last chunk.
//   - zai: reasoning_content; thinking.type; finish reasons sensitive and network_error; usage
//     on the last chunk.
//   - dashscope: reasoning_content; top-level enable_thinking, and 400 "parameter.enable_thinking
//     must be set to false for non-streaming calls" (as reported against Alibaba Model Studio
//     in coze-dev/coze-studio#324 and others).
//   - openrouter: message.reasoning plus reasoning_details ([{type: reasoning.text, text}]);
//     usage.cost; ": OPENROUTER PROCESSING" comments; finish reason error on upstream failure.
//   - together, ollama: message.reasoning; fireworks: reasoning_content; reasoning_effort "none"
//     turns thinking off on Fireworks and Ollama.
//   - openai: x-ratelimit-limit/remaining/reset-requests and -tokens headers, 429 with
//     retry-after-ms, strict model ids, no reasoning text in chat completions.
var Personalities = map[string]Personality{
	"vllm": {Name: "vllm", ReasoningField: FieldReasoning, NullContent: true, NullUsageDetails: true,
		StrictModels: true, NotFoundVLLM: true, Thinking: templateThinking, FaultFinish: "abort"},
	"vllm-legacy": {Name: "vllm", ReasoningField: FieldReasoningContent, NullContent: true, NullUsageDetails: true,
		StrictModels: true, NotFoundVLLM: true, Thinking: templateThinking},
	"vllm-transition": {Name: "vllm", ReasoningField: FieldBoth, NullContent: true, NullUsageDetails: true,
		StrictModels: true, NotFoundVLLM: true, Thinking: templateThinking},
	"vllm-inline": {Name: "vllm", ReasoningField: FieldInline, NullUsageDetails: true,
		StrictModels: true, NotFoundVLLM: true, Thinking: templateThinking},
	"sglang": {Name: "sglang", ReasoningField: FieldReasoningContent, NullContent: true, NullUsageDetails: true,
		Thinking: templateThinking},
	"deepseek": {Name: "deepseek", ReasoningField: FieldReasoningContent, NullContent: true, DeepSeekCache: true,
		KeepAlive: ": keep-alive", BlankLines: true, UsageOnFinish: true, StrictModels: true, Thinking: typeThinking,
		FaultFinish: "insufficient_system_resource"},
	"zai": {Name: "zai", ReasoningField: FieldReasoningContent, UsageOnFinish: true, StrictModels: true, Thinking: typeThinking,
		FilterFinish: "sensitive", FaultFinish: "network_error"},
	"dashscope": {Name: "dashscope", ReasoningField: FieldReasoningContent, StrictModels: true, Thinking: dashScopeThinking},
	"openrouter": {Name: "openrouter", ReasoningField: FieldDetails, CostPerToken: 2e-7, KeepAlive: ": OPENROUTER PROCESSING",
		StrictModels: true, Thinking: openRouterThinking, FaultFinish: "error"},
	"together":  {Name: "together", ReasoningField: FieldReasoning, StrictModels: true},
	"fireworks": {Name: "fireworks", ReasoningField: FieldReasoningContent, StrictModels: true, Thinking: effortThinking},
	"ollama":    {Name: "ollama", ReasoningField: FieldReasoning, NullUsageDetails: true, Thinking: effortThinking},
	"openai":    {Name: "openai", ReasoningField: "", StrictModels: true, RateLimit: 600, RateWindow: time.Minute},
}

// notFound writes the provider's answer to an unknown model id.
func (s *Server) notFound(w http.ResponseWriter, model string) {
	if s.p.NotFoundVLLM {
		writeJSON(w, http.StatusNotFound, map[string]any{"object": "error", "message": fmt.Sprintf("The model `%s` does not exist.", model),
			"type": "NotFoundError", "param": nil, "code": http.StatusNotFound})
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
