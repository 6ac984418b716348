// Package oai is the OpenAI chat-completions wire format, typed once: the request, the reply (a
// completion or a stream chunk) with every provider's reasoning fields and usage extras, and the
// error body. The teacher client (teachers) encodes requests and decodes replies; student serve
// (inference/serve) and the test server (internal/oaitest) decode requests and encode replies. Optional fields are pointers or omitempty so that an
// encoder says exactly which keys a reply has: a completion's content is present even when
// null (vLLM, DeepSeek: the reasoning used the budget), a chunk's only when it carries text.
// Stdlib only; any package may import it.
package oai

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Object names.
const (
	ObjectCompletion = "chat.completion"
	ObjectChunk      = "chat.completion.chunk"
)

// StreamOptions is a request's stream_options: include_usage asks for a last chunk carrying the
// request's usage.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Request is a chat-completions request: the fields the teacher client sends and student serve
// honours. The teacher client sets Model, Messages, Stream and StreamOptions, which encode first
// and in that order, and appends its provider's fields (sampling, token limit, thinking switches:
// teachers/body.go) to the encoded object; the optional fields are absent when nil or zero.
type Request struct {
	Model         string           `json:"model"`
	Messages      []RequestMessage `json:"messages"`
	Stream        bool             `json:"stream"`
	StreamOptions *StreamOptions   `json:"stream_options,omitempty"`
	Temperature   *float64         `json:"temperature,omitempty"`
	TopP          *float64         `json:"top_p,omitempty"`
	// TopK is vLLM's extension: keep the k most likely tokens (0 or -1: no cut).
	TopK                *int            `json:"top_k,omitempty"`
	MaxTokens           *int            `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int            `json:"max_completion_tokens,omitempty"`
	Seed                *int64          `json:"seed,omitempty"`
	Stop                json.RawMessage `json:"stop,omitempty"`
	N                   *int            `json:"n,omitempty"`
	// Logprobs asks for each completion token's log-probability, TopLogprobs for that many of
	// the most likely tokens at each position besides (0 to 20 at OpenAI).
	Logprobs    *bool `json:"logprobs,omitempty"`
	TopLogprobs *int  `json:"top_logprobs,omitempty"`
	// LogitBias maps token ids, written as strings, to a bias added to their logits before
	// sampling (-100 to 100 at OpenAI).
	LogitBias map[string]float64 `json:"logit_bias,omitempty"`
	// ReturnTokensAsTokenIDs is vLLM's extension: with Logprobs, each token (and each of its
	// top_logprobs) is written as "token_id:ID" instead of its text.
	ReturnTokensAsTokenIDs *bool `json:"return_tokens_as_token_ids,omitempty"`
	// StopTokenIDs is vLLM's extension: token ids that end the reply besides the model's own
	// stops (the stop token's text is not in the reply).
	StopTokenIDs []int `json:"stop_token_ids,omitempty"`
	// IncludeStopStrInOutput is vLLM's extension: a reply a stop string ended keeps the stop
	// string in its text (here the text of every token generated, through the one that
	// completed it).
	IncludeStopStrInOutput *bool `json:"include_stop_str_in_output,omitempty"`
}

// RequestMessage is one message of a request. Content is kept as received: a string, null, or
// (from OpenAI's own clients) a list of content parts; Text reads it.
type RequestMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// NewMessage is a message whose content is the string content (written even when empty: servers
// refuse an assistant message without content).
func NewMessage(role, content string) RequestMessage {
	b, _ := json.Marshal(content) // a string always encodes
	return RequestMessage{Role: role, Content: b}
}

// Text reads a message's content: a string, null or absent (""), or a list of
// {"type":"text","text":...} parts, joined. Its errors start with "content".
func (m RequestMessage) Text() (string, error) {
	raw := strings.TrimSpace(string(m.Content))
	if raw == "" || raw == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", fmt.Errorf("content: want a string or a list of text parts")
	}
	var b strings.Builder
	for j, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("content[%d]: part type %q is not supported (only text)", j, p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// Completion is a chat completion, or one stream chunk (Object says which; a chunk's choices
// carry Delta, a completion's Message).
type Completion struct {
	ID                string   `json:"id,omitempty"`
	Object            string   `json:"object,omitempty"`
	Created           int64    `json:"created,omitempty"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint,omitempty"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
}

// Choice is one choice. FinishReason is null until the reply ends (in a stream, on its last
// content chunk). Logprobs, when set, is written as is (student serve sends null when none
// were asked for, as OpenAI does, else a Logprobs); nothing decodes it (providers' shapes
// differ).
type Choice struct {
	Index        int             `json:"index"`
	Message      *Message        `json:"message,omitempty"`
	Delta        *Delta          `json:"delta,omitempty"`
	FinishReason *string         `json:"finish_reason"`
	Logprobs     json.RawMessage `json:"logprobs,omitempty"`
}

// Logprobs is a choice's logprobs in chat completions: an entry per completion token (in a
// stream chunk, per token of that chunk). Refusal is always null here.
type Logprobs struct {
	Content []TokenLogprob  `json:"content"`
	Refusal json.RawMessage `json:"refusal"`
}

// TokenLogprob is one token of Logprobs.Content: its text, log-probability and UTF-8 bytes (a
// token that is part of a character has the bytes it holds; its text cannot show them), and
// the most likely tokens at its position (an empty list when none were asked for).
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float32      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one of the most likely tokens at a position.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// Message is a completion's message. Content is always written, null when nil; reasoning may
// come in reasoning_content (DeepSeek, SGLang, vLLM before its rename), reasoning (vLLM since
// vllm-project/vllm#27752, OpenRouter, Ollama, Together: a string, null, or an object some
// gateways send) or reasoning_details (OpenRouter).
type Message struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	Reasoning        json.RawMessage `json:"reasoning,omitempty"`
	ReasoningDetails []Detail        `json:"reasoning_details,omitempty"`
}

// Delta is a stream chunk's delta: Message's fields, with content absent when the chunk carries
// none (a reasoning delta has no content key). (*Message)(d) reads it as a Message.
type Delta struct {
	Role             string          `json:"role,omitempty"`
	Content          *string         `json:"content,omitempty"`
	ReasoningContent *string         `json:"reasoning_content,omitempty"`
	Reasoning        json.RawMessage `json:"reasoning,omitempty"`
	ReasoningDetails []Detail        `json:"reasoning_details,omitempty"`
}

// Detail is one entry of OpenRouter's reasoning_details: reasoning.text carries Text,
// reasoning.summary a Summary, reasoning.encrypted only opaque data.
type Detail struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Summary string `json:"summary,omitempty"`
	Format  string `json:"format,omitempty"`
	Index   int    `json:"index"`
}

// Usage is a request's token usage with every provider's extras. The details may be null
// (vLLM, SGLang); completion_tokens_details is always written, null when nil.
type Usage struct {
	PromptTokens            int                `json:"prompt_tokens"`
	CompletionTokens        int                `json:"completion_tokens"`
	TotalTokens             int                `json:"total_tokens"`
	CompletionTokensDetails *CompletionDetails `json:"completion_tokens_details"`
	PromptTokensDetails     *PromptDetails     `json:"prompt_tokens_details,omitempty"`
	// PromptCacheHitTokens and PromptCacheMissTokens are DeepSeek's cache counts.
	PromptCacheHitTokens  *int `json:"prompt_cache_hit_tokens,omitempty"`
	PromptCacheMissTokens *int `json:"prompt_cache_miss_tokens,omitempty"`
	// ReasoningTokens is SGLang's count of reasoning tokens, at the top of usage (its UsageInfo
	// has no completion_tokens_details).
	ReasoningTokens *int `json:"reasoning_tokens,omitempty"`
	// Cost is OpenRouter's charge for the request, in USD (credits). On a bring-your-own-key
	// request (IsBYOK) it is only OpenRouter's fee: the upstream provider bills
	// CostDetails.UpstreamInferenceCost to the user's own key.
	Cost        *float64     `json:"cost,omitempty"`
	IsBYOK      *bool        `json:"is_byok,omitempty"`
	CostDetails *CostDetails `json:"cost_details,omitempty"`
}

// UnmarshalJSON reads a usage whose numbers no Go int or float64 holds (a count past int64, in
// exponent form such as 1e400, or with a fraction; a cost past float64's range) as valid JSON
// that a provider may send, not as a malformed reply: a count is read as the int nearest it
// (fractions cut toward zero, a count beyond int as the nearest end of int's range) and such a
// cost as absent. The teachers client then bounds what it keeps (teachers.reportedTokens).
func (u *Usage) UnmarshalJSON(b []byte) error {
	type plain Usage
	var w struct {
		plain
		PromptTokens          count     `json:"prompt_tokens"`
		CompletionTokens      count     `json:"completion_tokens"`
		TotalTokens           count     `json:"total_tokens"`
		PromptCacheHitTokens  count     `json:"prompt_cache_hit_tokens"`
		PromptCacheMissTokens count     `json:"prompt_cache_miss_tokens"`
		ReasoningTokens       count     `json:"reasoning_tokens"`
		Cost                  costValue `json:"cost"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*u = Usage(w.plain)
	u.PromptTokens, u.CompletionTokens, u.TotalTokens = w.PromptTokens.n, w.CompletionTokens.n, w.TotalTokens.n
	u.PromptCacheHitTokens, u.PromptCacheMissTokens = w.PromptCacheHitTokens.ptr(), w.PromptCacheMissTokens.ptr()
	u.ReasoningTokens, u.Cost = w.ReasoningTokens.ptr(), w.Cost.v
	return nil
}

// CompletionDetails is usage.completion_tokens_details.
type CompletionDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// UnmarshalJSON reads the count as Usage.UnmarshalJSON does.
func (d *CompletionDetails) UnmarshalJSON(b []byte) error {
	var w struct {
		ReasoningTokens count `json:"reasoning_tokens"`
	}
	err := json.Unmarshal(b, &w)
	d.ReasoningTokens = w.ReasoningTokens.n
	return err
}

// PromptDetails is usage.prompt_tokens_details.
type PromptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// UnmarshalJSON reads the count as Usage.UnmarshalJSON does.
func (d *PromptDetails) UnmarshalJSON(b []byte) error {
	var w struct {
		CachedTokens count `json:"cached_tokens"`
	}
	err := json.Unmarshal(b, &w)
	d.CachedTokens = w.CachedTokens.n
	return err
}

// CostDetails is OpenRouter's usage.cost_details.
type CostDetails struct {
	UpstreamInferenceCost *float64 `json:"upstream_inference_cost"`
}

// UnmarshalJSON reads the cost as Usage.UnmarshalJSON does.
func (d *CostDetails) UnmarshalJSON(b []byte) error {
	var w struct {
		UpstreamInferenceCost costValue `json:"upstream_inference_cost"`
	}
	err := json.Unmarshal(b, &w)
	d.UpstreamInferenceCost = w.UpstreamInferenceCost.v
	return err
}

// count is a token count read from any JSON number (see Usage.UnmarshalJSON); set tells a
// present count from an absent or null one.
type count struct {
	n   int
	set bool
}

// UnmarshalJSON reads a number; null leaves c unset, anything else is an error, as for an int.
func (c *count) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	if n, err := strconv.ParseInt(string(b), 10, 0); err == nil {
		c.n, c.set = int(n), true
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("oai: token count %.40q is not a number", b)
	}
	switch {
	case f >= math.MaxInt:
		c.n = math.MaxInt
	case f <= math.MinInt:
		c.n = math.MinInt
	default:
		c.n = int(f)
	}
	c.set = true
	return nil
}

// ptr is the count as an optional field: nil when absent.
func (c count) ptr() *int {
	if !c.set {
		return nil
	}
	return &c.n
}

// costValue is a cost read from any JSON number: one past float64's range is left absent.
type costValue struct{ v *float64 }

// UnmarshalJSON reads a number; null and a number past float64 leave it absent, anything else
// is an error, as for a float64.
func (c *costValue) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("oai: cost %.40q is not a number", b)
	}
	if err == nil {
		c.v = &f
	}
	return nil
}

// ErrorBody is OpenAI's error shape, {"error": {...}}; Param and Code are null when nil.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is the body's error object.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

// Str returns a pointer to s, nil for "": an optional text field that is absent when empty.
func Str(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Text returns s as a JSON string for a raw field (reasoning), nil for "" (absent).
func Text(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	b, _ := json.Marshal(s)
	return b
}
