package teachers

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
)

// The response shapes below are decoded by this package rather than through go-openai's types:
// go-openai v1.43 knows message.reasoning_content only, so it drops message.reasoning (vLLM
// since its 2025 rename, OpenRouter, Ollama, Together), reasoning_details (OpenRouter),
// usage.prompt_cache_hit_tokens (DeepSeek) and usage.cost (OpenRouter), in plain responses and
// in stream deltas alike. One set of structs serves both: a completion's choices carry
// "message", a stream chunk's carry "delta".

// wireMessage is a choice's message or delta. Content is null in replies whose reasoning used
// the whole budget (vLLM, DeepSeek); reasoning may be a string, null or an object.
type wireMessage struct {
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        json.RawMessage `json:"reasoning"`
	ReasoningDetails []wireDetail    `json:"reasoning_details"`
}

// wireDetail is one entry of OpenRouter's reasoning_details: reasoning.text carries text,
// reasoning.summary a summary, reasoning.encrypted only opaque data (no text to keep).
type wireDetail struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Summary string `json:"summary"`
}

type wireChoice struct {
	Index        int          `json:"index"`
	Message      *wireMessage `json:"message"`
	Delta        *wireMessage `json:"delta"`
	FinishReason *string      `json:"finish_reason"`
}

// wireUsage is usage with every provider's extras; details may be null (vLLM, SGLang).
type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
	// PromptCacheHitTokens is DeepSeek's count of cached prompt tokens.
	PromptCacheHitTokens *int `json:"prompt_cache_hit_tokens"`
	// Cost is OpenRouter's charge for the request, in USD (credits).
	Cost *float64 `json:"cost"`
}

// wireResponse is a chat completion or one stream chunk.
type wireResponse struct {
	Model   string       `json:"model"`
	Choices []wireChoice `json:"choices"`
	Usage   *wireUsage   `json:"usage"`
}

// assembly gathers one reply: a whole completion, or a stream's chunks in order.
type assembly struct {
	model     string
	choices   int // choices seen (0: the response has none)
	content   strings.Builder
	reasoning [3]strings.Builder // by fieldOrder index
	finish    string
	finished  bool // a finish_reason arrived
	usage     *wireUsage
}

// add folds one completion or chunk into a.
func (a *assembly) add(r *wireResponse) {
	if r.Model != "" {
		a.model = r.Model
	}
	if r.Usage != nil {
		a.usage = r.Usage // streams may repeat usage; the last one is the whole request's
	}
	for i := range r.Choices {
		ch := &r.Choices[i]
		if ch.Index != 0 {
			continue // n > 1 is never requested
		}
		a.choices++
		m := ch.Message
		if m == nil {
			m = ch.Delta
		}
		if m != nil {
			if m.Content != nil {
				a.content.WriteString(*m.Content)
			}
			if m.ReasoningContent != nil {
				a.reasoning[0].WriteString(*m.ReasoningContent)
			}
			a.reasoning[1].WriteString(reasoningText(m.Reasoning))
			for _, d := range m.ReasoningDetails {
				switch d.Type {
				case "reasoning.text":
					a.reasoning[2].WriteString(d.Text)
				case "reasoning.summary":
					a.reasoning[2].WriteString(d.Summary)
				}
			}
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			a.finish = *ch.FinishReason
			a.finished = true
		}
	}
}

// reasoningText reads message.reasoning: a string, null, or an object carrying its text in
// "text", "content" or "summary" (some gateways wrap it); anything else has no text.
func reasoningText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] == 'n' {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return ""
	}
	var o struct {
		Text    *string `json:"text"`
		Content *string `json:"content"`
		Summary *string `json:"summary"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &o) != nil {
		return ""
	}
	for _, s := range []*string{o.Text, o.Content, o.Summary} {
		if s != nil {
			return *s
		}
	}
	return ""
}

// pickReasoning returns the first non-blank reasoning text in the profile's order and its
// field. Servers sending the same text in two fields (vLLM during the rename, OpenRouter's
// reasoning and reasoning_details) therefore yield it once.
func (a *assembly) pickReasoning(order []string) (text, source string) {
	for _, src := range order {
		for i, f := range fieldOrder {
			if f == src {
				if s := a.reasoning[i].String(); strings.TrimSpace(s) != "" {
					return s, src
				}
			}
		}
	}
	return "", ""
}

// usage converts the wire usage; cached prompt tokens come from prompt_tokens_details or
// DeepSeek's prompt_cache_hit_tokens. reported is OpenRouter's usage.cost when present.
func (a *assembly) chatUsage() (u chat.Usage, reported *float64) {
	w := a.usage
	if w == nil {
		return u, nil
	}
	u.PromptTokens, u.CompletionTokens = w.PromptTokens, w.CompletionTokens
	if d := w.CompletionTokensDetails; d != nil {
		u.ReasoningTokens = d.ReasoningTokens
	}
	if d := w.PromptTokensDetails; d != nil {
		u.CachedTokens = d.CachedTokens
	}
	if w.PromptCacheHitTokens != nil && u.CachedTokens == 0 {
		u.CachedTokens = *w.PromptCacheHitTokens
	}
	return u, w.Cost
}

// finishRule is how a provider's finish reason is treated.
type finishRule struct {
	norm   string // the chat vocabulary's name for it
	reason string // when set, the reply is a fault of this reason, retried, never kept
}

// finishRules maps finish reasons beyond OpenAI's (stop, length, content_filter, tool_calls).
var finishRules = map[string]finishRule{
	// Zhipu (Z.ai): the content was blocked by its safety system.
	"sensitive": {norm: chat.FinishContentFilter},
	// Zhipu: the reply ran into the model's context window.
	"model_context_window_exceeded": {norm: chat.FinishLength},
	// DeepSeek: the inference system ran out of capacity and cut the reply.
	"insufficient_system_resource": {reason: ReasonProviderFault},
	// Zhipu: an error inside its inference service.
	"network_error": {reason: ReasonProviderFault},
	// vLLM aborts a request it had to drop; OpenRouter reports an upstream failure as "error".
	"abort": {reason: ReasonProviderFault},
	"error": {reason: ReasonProviderFault},
}
