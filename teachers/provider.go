package teachers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
)

// Provider names (Endpoint.Provider, the `provider:` key).
const (
	ProviderVLLM       = "vllm"
	ProviderSGLang     = "sglang"
	ProviderOpenRouter = "openrouter"
	ProviderDeepSeek   = "deepseek"
	ProviderZAI        = "zai"
	ProviderDashScope  = "dashscope"
	ProviderTogether   = "together"
	ProviderFireworks  = "fireworks"
	ProviderOllama     = "ollama"
	ProviderOpenAI     = "openai"
)

// Profile is one provider's conventions: where it lives, the key variable it is used with, the
// ids of the preset models on it, whether it must stream, how a request asks for thinking and
// for a reasoning effort, and which response field carries the reasoning. A teacher's
// `provider:` key applies a profile below its explicit fields: base_url, model, api_key_env,
// stream and extra_body set in the config or the environment still win.
//
// Where each convention comes from (checked against the providers' public documentation and
// issue trackers in 2025-2026; the model ids follow each provider's naming scheme and should be
// checked against its model list):
//
//   - vLLM: reasoning in message.reasoning since vllm-project/vllm#27752 (reasoning_content
//     before it, both during the transition), completion_tokens_details and
//     prompt_tokens_details null, content null when the reasoning used the budget, 404 with
//     {"object":"error",...} for an unknown model; Qwen3 and GLM templates take
//     chat_template_kwargs.enable_thinking, DeepSeek V3.1+ templates chat_template_kwargs.thinking;
//     gpt-oss takes reasoning_effort.
//   - SGLang: the same request conventions, reasoning in reasoning_content.
//   - DeepSeek: reasoning_content; cache hits in usage.prompt_cache_hit_tokens; finish reason
//     insufficient_system_resource when the request was cut for lack of capacity; ": keep-alive"
//     SSE comments while a streamed request waits, empty lines before a plain one's body.
//   - Z.ai (Zhipu): thinking: {"type": "enabled"|"disabled"}; reasoning_content; finish reasons
//     sensitive (content filter) and network_error.
//   - DashScope (Alibaba Model Studio, compatible mode): top-level enable_thinking; Qwen3 open
//     models think by default and refuse non-streaming calls that think ("parameter.enable_thinking
//     must be set to false for non-streaming calls"), so the profile streams.
//   - OpenRouter: reasoning: {"effort": …} or {"enabled": …}; message.reasoning (string) and
//     message.reasoning_details (typed array); usage.cost in credits (USD); ": OPENROUTER
//     PROCESSING" SSE comments.
//   - Together, Fireworks, Ollama: OpenAI-compatible with reasoning_effort; Together and Ollama
//     answer in message.reasoning, Fireworks in reasoning_content.
//   - OpenAI: reasoning_effort; x-ratelimit-* headers and retry-after-ms; no reasoning text.
type Profile struct {
	Name string
	// BaseURL is the provider's OpenAI-compatible base URL ("" keeps the endpoint's).
	BaseURL string
	// APIKeyEnv is the key variable used with the provider ("" for local servers without keys).
	APIKeyEnv string
	// Models maps preset names to the provider's ids of those models; a preset missing here
	// keeps its own id.
	Models map[string]string
	// Stream makes the provider's endpoints stream by default.
	Stream bool
	// ReasoningOrder is the order in which response fields are tried for the reasoning text.
	ReasoningOrder []string
	// thinking renders thinking on or off for a model family ("" = nothing to send).
	thinking func(family string, on bool) map[string]any
	// effort renders a reasoning effort; nil sends top-level reasoning_effort.
	effort func(effort string) map[string]any
}

// Model families, from the preset name or the model id.
const (
	familyGPTOSS   = "gpt-oss"
	familyDeepSeek = "deepseek"
	familyGLM      = "glm"
	familyQwen     = "qwen"
)

// family guesses the model family of a preset name or model id ("" when unknown).
func family(preset, model string) string {
	for _, s := range []string{preset, strings.ToLower(model)} {
		for _, f := range []string{familyGPTOSS, familyDeepSeek, familyGLM, familyQwen} {
			if strings.Contains(s, f) {
				return f
			}
		}
	}
	return ""
}

var fieldOrder = []string{chat.SourceReasoningContent, chat.SourceReasoning, chat.SourceReasoningDetails}

// templateKwargs is the vLLM/SGLang way: the chat template's own switch.
func templateKwargs(fam string, on bool) map[string]any {
	switch fam {
	case familyQwen, familyGLM:
		return map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": on}}
	case familyDeepSeek:
		return map[string]any{"chat_template_kwargs": map[string]any{"thinking": on}}
	}
	return nil // gpt-oss always reasons; its depth is reasoning_effort
}

func thinkingType(_ string, on bool) map[string]any {
	t := "disabled"
	if on {
		t = "enabled"
	}
	return map[string]any{"thinking": map[string]any{"type": t}}
}

// effortNoneWhenOff: providers whose thinking models think by default and are turned off with
// reasoning_effort "none".
func effortNoneWhenOff(_ string, on bool) map[string]any {
	if on {
		return nil
	}
	return map[string]any{"reasoning_effort": "none"}
}

func hfModels() map[string]string {
	return map[string]string{
		PresetGPTOSS:   "openai/gpt-oss-120b",
		PresetDeepSeek: "deepseek-ai/DeepSeek-V4-Flash",
		PresetGLM:      "zai-org/GLM-4.7-Flash",
		PresetQwen:     "Qwen/Qwen3.5-35B-A3B",
	}
}

var profiles = map[string]Profile{
	ProviderVLLM: {Name: ProviderVLLM, BaseURL: "http://127.0.0.1:8000/v1", Models: hfModels(),
		ReasoningOrder: fieldOrder, thinking: templateKwargs},
	ProviderSGLang: {Name: ProviderSGLang, BaseURL: "http://127.0.0.1:30000/v1", Models: hfModels(),
		ReasoningOrder: fieldOrder, thinking: templateKwargs},
	ProviderOpenRouter: {Name: ProviderOpenRouter, BaseURL: "https://openrouter.ai/api/v1", APIKeyEnv: "OPENROUTER_API_KEY",
		Models: map[string]string{
			PresetGPTOSS: "openai/gpt-oss-120b", PresetDeepSeek: "deepseek/deepseek-v4-flash",
			PresetGLM: "z-ai/glm-4.7-flash", PresetQwen: "qwen/qwen3.5-35b-a3b",
		},
		ReasoningOrder: []string{chat.SourceReasoning, chat.SourceReasoningDetails, chat.SourceReasoningContent},
		thinking: func(_ string, on bool) map[string]any {
			return map[string]any{"reasoning": map[string]any{"enabled": on}}
		},
		effort: func(e string) map[string]any { return map[string]any{"reasoning": map[string]any{"effort": e}} }},
	ProviderDeepSeek: {Name: ProviderDeepSeek, BaseURL: "https://api.deepseek.com/v1", APIKeyEnv: "DEEPSEEK_API_KEY",
		Models:         map[string]string{PresetDeepSeek: "deepseek-v4-flash"},
		ReasoningOrder: fieldOrder, thinking: thinkingType},
	ProviderZAI: {Name: ProviderZAI, BaseURL: "https://api.z.ai/api/paas/v4", APIKeyEnv: "ZAI_API_KEY",
		Models:         map[string]string{PresetGLM: "glm-4.7-flash"},
		ReasoningOrder: fieldOrder, thinking: thinkingType},
	ProviderDashScope: {Name: ProviderDashScope, BaseURL: "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", APIKeyEnv: "DASHSCOPE_API_KEY",
		Models: map[string]string{PresetQwen: "qwen3.5-35b-a3b"}, Stream: true,
		ReasoningOrder: fieldOrder,
		thinking:       func(_ string, on bool) map[string]any { return map[string]any{"enable_thinking": on} }},
	ProviderTogether: {Name: ProviderTogether, BaseURL: "https://api.together.xyz/v1", APIKeyEnv: "TOGETHER_API_KEY",
		Models: hfModels(), ReasoningOrder: []string{chat.SourceReasoning, chat.SourceReasoningContent, chat.SourceReasoningDetails},
		thinking: func(fam string, on bool) map[string]any {
			if fam == familyGPTOSS {
				return nil
			}
			return map[string]any{"reasoning": map[string]any{"enabled": on}}
		}},
	ProviderFireworks: {Name: ProviderFireworks, BaseURL: "https://api.fireworks.ai/inference/v1", APIKeyEnv: "FIREWORKS_API_KEY",
		Models: map[string]string{
			PresetGPTOSS: "accounts/fireworks/models/gpt-oss-120b", PresetDeepSeek: "accounts/fireworks/models/deepseek-v4-flash",
			PresetGLM: "accounts/fireworks/models/glm-4p7-flash", PresetQwen: "accounts/fireworks/models/qwen3p5-35b-a3b",
		},
		ReasoningOrder: fieldOrder, thinking: effortNoneWhenOff},
	ProviderOllama: {Name: ProviderOllama, BaseURL: "http://127.0.0.1:11434/v1",
		Models: map[string]string{
			PresetGPTOSS: "gpt-oss:120b", PresetDeepSeek: "deepseek-v4-flash",
			PresetGLM: "glm-4.7-flash", PresetQwen: "qwen3.5:35b-a3b",
		},
		ReasoningOrder: []string{chat.SourceReasoning, chat.SourceReasoningContent, chat.SourceReasoningDetails},
		thinking:       effortNoneWhenOff},
	ProviderOpenAI: {Name: ProviderOpenAI, BaseURL: "https://api.openai.com/v1", APIKeyEnv: "OPENAI_API_KEY",
		Models: map[string]string{}, ReasoningOrder: fieldOrder},
}

// genericProfile is used without a provider: no thinking fields, reasoning_effort at the top.
var genericProfile = Profile{ReasoningOrder: fieldOrder}

// Providers lists the known provider names in order.
func Providers() []string { return sortedNames(profiles) }

// ProfileOf returns the named provider's profile; "" is the generic one (no provider).
func ProfileOf(name string) (Profile, error) {
	if name == "" {
		return genericProfile, nil
	}
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("unknown provider %q (known: %s)", name, strings.Join(Providers(), ", "))
	}
	p.Models = clonedModels(p.Models)
	p.ReasoningOrder = slices.Clone(p.ReasoningOrder)
	return p, nil
}

func clonedModels(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// applyDefaults fills e with the profile's conventions for the teacher named name (a preset
// name picks the provider's model id). Explicit fields are applied after it by the caller.
func (p Profile) applyDefaults(e *Endpoint, name string) {
	if p.Name == "" {
		return
	}
	e.Provider = p.Name
	if p.BaseURL != "" {
		e.BaseURL = p.BaseURL
	}
	e.APIKeyEnv = p.APIKeyEnv
	if id, ok := p.Models[name]; ok {
		e.Model = id
	}
	e.Stream = p.Stream
}

// thinkingFields are the request fields asking for thinking on or off when e.Thinking is set.
func (p Profile) thinkingFields(e Endpoint) map[string]any {
	if e.Thinking == nil || p.thinking == nil {
		return nil
	}
	return p.thinking(family(e.Name, e.Model), *e.Thinking)
}

// effortFields are the request fields carrying e.ReasoningEffort in the provider's form.
func (p Profile) effortFields(e Endpoint) map[string]any {
	if e.ReasoningEffort == "" {
		return nil
	}
	if p.effort != nil {
		return p.effort(e.ReasoningEffort)
	}
	return map[string]any{"reasoning_effort": e.ReasoningEffort}
}
