package teachers

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// The shapes of the replies as the client decodes them (scan.go): internal/oai's Completion
// with its members by their JSON names, and the error object beside it (a stream's error
// event, a 200 without choices). A member the client decodes but never reads (id, object,
// system_fingerprint, role, a detail's format) is kept for its type only. A choice's logprobs
// is dropped: it is raw JSON nothing reads.
var (
	reasoningObject = objectShape(member{"text", leafShape}, member{"content", leafShape}, member{"summary", leafShape})
	detailShape     = objectShape(member{"type", leafShape}, member{"text", leafShape}, member{"summary", leafShape},
		member{"format", blankShape}, member{"index", leafShape})
	messageShape = objectShape(member{"role", blankShape}, member{"content", leafShape}, member{"reasoning_content", leafShape},
		member{"reasoning", reasoningObject}, member{"reasoning_details", arrayShape(detailShape)})
	choiceShape = objectShape(member{"index", leafShape}, member{"message", messageShape}, member{"delta", messageShape},
		member{"finish_reason", leafShape})
	usageShape = objectShape(member{"prompt_tokens", leafShape}, member{"completion_tokens", leafShape},
		member{"total_tokens", leafShape},
		member{"completion_tokens_details", objectShape(member{"reasoning_tokens", leafShape})},
		member{"prompt_tokens_details", objectShape(member{"cached_tokens", leafShape})},
		member{"prompt_cache_hit_tokens", leafShape}, member{"prompt_cache_miss_tokens", leafShape},
		member{"reasoning_tokens", leafShape}, member{"cost", leafShape}, member{"is_byok", leafShape},
		member{"cost_details", objectShape(member{"upstream_inference_cost", leafShape})})
	errorObject = objectShape(member{"message", leafShape})
	// chunkShape is a completion or a stream chunk, with its error object.
	chunkShape = objectShape(member{"id", blankShape}, member{"object", blankShape}, member{"created", leafShape},
		member{"model", leafShape}, member{"system_fingerprint", blankShape}, member{"choices", arrayShape(choiceShape)},
		member{"usage", usageShape}, member{"error", errorObject})
	// completionShape is a plain completion: the same members.
	completionShape = chunkShape
	// errorBodyShape is a failure response's body.
	errorBodyShape = objectShape(member{"error", errorObject})
)

// assembly gathers one reply: a whole completion, or a stream's chunks in order.
type assembly struct {
	model     string
	choices   int // choices seen (0: the response has none)
	content   strings.Builder
	reasoning [3]strings.Builder // by fieldOrder index
	finish    string
	finished  bool // a finish_reason arrived
	usage     *oai.Usage
	// limit bounds each text (content, each reasoning field) in bytes, 0 none; over names the
	// first text a completion or chunk would have taken past it (what it brought is dropped).
	limit int
	over  string
}

// write appends s to the text b (named field) within a.limit.
func (a *assembly) write(b *strings.Builder, s, field string) {
	if s == "" || a.over != "" {
		return
	}
	if a.limit > 0 && b.Len()+len(s) > a.limit {
		a.over = field
		return
	}
	b.WriteString(s)
}

// fold adds r to a and holds the texts' room in m; a *tooLongError once a text would pass
// a.limit.
func (a *assembly) fold(r *oai.Completion, m *meter) error {
	a.add(r)
	if a.over != "" {
		return &tooLongError{fmt.Sprintf("the reply's %s is over %d bytes, more than a trajectory keeps", a.over, a.limit)}
	}
	n := a.content.Cap()
	for i := range a.reasoning {
		n += a.reasoning[i].Cap()
	}
	return m.need(slotText, n)
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
				a.write(&a.content, *m.Content, "content")
			}
			if m.ReasoningContent != nil {
				a.write(&a.reasoning[0], *m.ReasoningContent, fieldOrder[0])
			}
			a.write(&a.reasoning[1], reasoningText(m.Reasoning), fieldOrder[1])
			for _, d := range m.ReasoningDetails {
				switch d.Type {
				case "reasoning.text":
					a.write(&a.reasoning[2], d.Text, fieldOrder[2])
				case "reasoning.summary":
					a.write(&a.reasoning[2], d.Summary, fieldOrder[2])
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
