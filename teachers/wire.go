package teachers

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oai"
)

// The response shapes are internal/oai's, with every provider's reasoning fields and usage
// extras: message.reasoning_content (DeepSeek, SGLang), message.reasoning (vLLM since its 2025
// rename, OpenRouter, Ollama, Together), reasoning_details (OpenRouter),
// usage.prompt_cache_hit_tokens (DeepSeek) and usage.cost (OpenRouter), in plain responses and
// in stream deltas alike. oai.Completion serves both: a completion's choices carry "message",
// a stream chunk's carry "delta".

// assembly gathers one reply: a whole completion, or a stream's chunks in order.
type assembly struct {
	model     string
	choices   int // choices seen (0: the response has none)
	content   strings.Builder
	reasoning [3]strings.Builder // by fieldOrder index
	finish    string
	finished  bool // a finish_reason arrived
	usage     *oai.Usage
}

// add folds one completion or chunk into a.
func (a *assembly) add(r *oai.Completion) {
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
		// A stream chunk's text is its delta. Some gateways end a stream with the whole reply
		// again as a "message" beside an empty delta: appending that would double the reply.
		m := (*oai.Message)(ch.Delta)
		if m == nil {
			m = ch.Message
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

// Bounds on the usage a provider reports for one response, so that the sums of a run (a
// trajectory's, usage.json's, Stats) stay finite and within int: a count outside [0,
// maxReportedTokens] is cut into it, and a cost outside [0, maxReportedCost] USD is not
// believed (the endpoint's prices apply). Before them, "cost": 1e308 on two replies summed to
// +Inf, which JSON cannot hold: every trajectory failed to encode and usage.json could not be
// written, ending the run; token counts of 2^63-1 wrapped the run's totals negative.
const (
	maxReportedTokens = 1<<31 - 1 // an int on every GOARCH
	maxReportedCost   = 1e6
)

// reportedTokens is a provider's token count cut into [0, maxReportedTokens].
func reportedTokens(n int) int { return max(0, min(n, maxReportedTokens)) }

// chatUsage converts the wire usage; cached prompt tokens come from prompt_tokens_details or
// DeepSeek's prompt_cache_hit_tokens, reasoning tokens from completion_tokens_details or
// SGLang's usage.reasoning_tokens. reported is OpenRouter's usage.cost when present, its
// upstream charge added on a BYOK request. Every count and the cost are bounded (see
// maxReportedTokens).
func (a *assembly) chatUsage() (u chat.Usage, reported *float64) {
	w := a.usage
	if w == nil {
		return u, nil
	}
	u.PromptTokens, u.CompletionTokens = reportedTokens(w.PromptTokens), reportedTokens(w.CompletionTokens)
	if d := w.CompletionTokensDetails; d != nil {
		u.ReasoningTokens = reportedTokens(d.ReasoningTokens)
	}
	if w.ReasoningTokens != nil && u.ReasoningTokens == 0 {
		u.ReasoningTokens = reportedTokens(*w.ReasoningTokens)
	}
	if d := w.PromptTokensDetails; d != nil {
		u.CachedTokens = reportedTokens(d.CachedTokens)
	}
	if w.PromptCacheHitTokens != nil && u.CachedTokens == 0 {
		u.CachedTokens = reportedTokens(*w.PromptCacheHitTokens)
	}
	cost := w.Cost
	if cost != nil && w.IsBYOK != nil && *w.IsBYOK && w.CostDetails != nil && w.CostDetails.UpstreamInferenceCost != nil {
		// What the request cost the user: OpenRouter's fee plus the upstream charge to the
		// user's key (on OpenRouter's own credits upstream_inference_cost repeats cost).
		total := *w.Cost + *w.CostDetails.UpstreamInferenceCost
		cost = &total
	}
	if cost != nil && !(*cost >= 0 && *cost <= maxReportedCost) {
		return u, nil
	}
	return u, cost
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
