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

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
	// Reasoning is the model's separate reasoning text, when the endpoint returns one
	// (reasoning_content / reasoning fields). It is never sent back to a policy.
	Reasoning string `json:"reasoning,omitempty"`
}

// Usage counts tokens of one request or of many.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	ReasoningTokens  int `json:"reasoning_tokens,omitempty"`
	CachedTokens     int `json:"cached_tokens,omitempty"`
}

// Add returns the element-wise sum of u and o.
func (u Usage) Add(o Usage) Usage {
	return Usage{
		PromptTokens:     u.PromptTokens + o.PromptTokens,
		CompletionTokens: u.CompletionTokens + o.CompletionTokens,
		ReasoningTokens:  u.ReasoningTokens + o.ReasoningTokens,
		CachedTokens:     u.CachedTokens + o.CachedTokens,
	}
}

// Total is prompt plus completion tokens.
func (u Usage) Total() int { return u.PromptTokens + u.CompletionTokens }

// Finish reasons reported in Reply.FinishReason.
const (
	FinishStop          = "stop"
	FinishLength        = "length"
	FinishContentFilter = "content_filter"
)

// Reply is one answer of a policy.
type Reply struct {
	Content      string        `json:"content"`
	Reasoning    string        `json:"reasoning,omitempty"`
	FinishReason string        `json:"finish_reason,omitempty"`
	Usage        Usage         `json:"usage"`
	Latency      time.Duration `json:"latency_ns"`
	// Model is the model id that answered, when known.
	Model string `json:"model,omitempty"`
	// Attempts is how many requests it took (1 without retries).
	Attempts int `json:"attempts,omitempty"`
}

// Options are per-request sampling settings. Zero values mean "the policy's default".
type Options struct {
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	TopK        int      `json:"top_k,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Seed        *int64   `json:"seed,omitempty"`
	Stop        []string `json:"stop,omitempty"`
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
