// Package chat holds the vocabulary shared by teachers, the student runtime and the distill loop:
// messages, replies, token usage and the Policy interface. It imports nothing of this module.
package chat

import (
	"context"
	"time"
)

// Roles used in Message.Role.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Message is one turn of a conversation. Its parquet tags make it the element of every Parquet
// messages column (curate's datasets, student rollout's table, the env's prompt export):
// list<struct<role: string, content: string>>, the conversational format TRL's trainers read.
type Message struct {
	Role    string `parquet:"role" json:"role"`
	Content string `parquet:"content" json:"content"`
}

// Usage counts tokens of one request or of many.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// ReasoningTokens is the part of CompletionTokens the provider reports as reasoning (0 when
	// it reports none).
	ReasoningTokens int `json:"reasoning_tokens,omitempty"`
	// CachedTokens is the part of PromptTokens served from the provider's prompt cache.
	CachedTokens int `json:"cached_tokens,omitempty"`
	// CostUSD is what the tokens cost: the provider's own figure when it reports one
	// (OpenRouter's usage.cost), else computed from the endpoint's prices; 0 when neither.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// Add returns the element-wise sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + o.PromptTokens,
		CompletionTokens: u.CompletionTokens + o.CompletionTokens,
		ReasoningTokens:  u.ReasoningTokens + o.ReasoningTokens,
		CachedTokens:     u.CachedTokens + o.CachedTokens,
		CostUSD:          u.CostUSD + o.CostUSD,
	}
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int { return u.PromptTokens + u.CompletionTokens }

// Finish reasons reported in Reply.FinishReason. Providers' own names for the same thing are
// mapped onto these (Zhipu's "sensitive" is FinishContentFilter); other values pass through.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "content_filter"
)

// Names of the response fields a separate reasoning text can come from (Reply.ReasoningSource).
const (
	// SourceReasoningContent is message.reasoning_content (DeepSeek, SGLang, older vLLM, DashScope,
	// Z.ai, Fireworks).
	SourceReasoningContent = "reasoning_content"
	// SourceReasoning is message.reasoning (vLLM since the 2025 rename, OpenRouter, Ollama,
	// Together).
	SourceReasoning = "reasoning"
	// SourceReasoningDetails is the text of OpenRouter's message.reasoning_details array.
	SourceReasoningDetails = "reasoning_details"
)

// Reply is one answer of a policy, as received.
type Reply struct {
	// Content is the message content exactly as received ("" for a null content). Reasoning the
	// model wrote inline as <think>…</think> stays here.
	Content string `json:"content"`
	// Reasoning is the separate reasoning text exactly as received, "" when the reply had none;
	// ReasoningSource names the field it came from (a Source* constant).
	Reasoning       string `json:"reasoning,omitempty"`
	ReasoningSource string `json:"reasoning_source,omitempty"`
	// FinishReason is the finish reason in this package's vocabulary (Finish*, or the provider's
	// value when it has no equivalent); ProviderFinishReason is the provider's own value when it
	// differs ("sensitive").
	FinishReason         string        `json:"finish_reason,omitempty"`
	ProviderFinishReason string        `json:"provider_finish_reason,omitempty"`
	Usage                Usage         `json:"usage"`
	Latency              time.Duration `json:"latency_ns"`
	// Model is the model id that answered, when known.
	Model string `json:"model,omitempty"`
	// Attempts is how many requests it took (1 without retries).
	Attempts int `json:"attempts,omitempty"`
	// ThinkOpened reports that the policy's chat template ended the prompt with an opening
	// <think> (Qwen3.5's, QwQ's, DeepSeek-R1's thinking templates): Content begins inside the
	// reasoning, and a reply cut before its </think> carries no tag at all.
	ThinkOpened bool `json:"think_opened,omitempty"`
}

// Options are per-request sampling settings. Zero values mean "the policy's default".
type Options struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	// TopK keeps the k most likely tokens; a negative TopK asks for no top-k cut, whatever the
	// policy's default (the student runtime honours it; a teacher is sent no top_k).
	TopK      int      `json:"top_k,omitempty"`
	MaxTokens int      `json:"max_tokens,omitempty"`
	Seed      *int64   `json:"seed,omitempty"`
	Stop      []string `json:"stop,omitempty"`
}

// Float returns a pointer to v, for Options fields.
func Float(v float64) *float64 { return &v }

// Int64 returns a pointer to v, for Options fields.
func Int64(v int64) *int64 { return &v }

// Policy answers a conversation with the next assistant turn. Implementations must be safe for
// concurrent use.
type Policy interface {
	Chat(ctx context.Context, msgs []Message, opts Options) (Reply, error)
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(ctx context.Context, msgs []Message, opts Options) (Reply, error)

// Chat calls f.
func (f PolicyFunc) Chat(ctx context.Context, msgs []Message, opts Options) (Reply, error) {
	return f(ctx, msgs, opts)
}
