// Package teachers talks to teacher LLMs behind OpenAI-compatible chat-completions endpoints
// (hosted APIs, vLLM, SGLang, `student serve`) over net/http: a POST to
// {base_url}/chat/completions (transport.go), the reply decoded as internal/oai's types, a
// stream read by the package's own SSE reader (sse.go); every reply is read as it arrives,
// only what the client reads of it kept, within the limits of budget.go (scan.go).
//
// A Client implements chat.Policy. It limits itself (a concurrency semaphore, RPM and TPM rate
// limiters, and the provider's x-ratelimit-* headers), retries transient faults with exponential
// backoff and full jitter (honouring Retry-After and retry-after-ms up to MaxServerWait), sends plain or streamed
// (SSE) requests, returns each reply as received (content, the separate reasoning text and the
// field it came from, the finish reason), applies the configured policy to empty replies and to
// finish_reason length/content_filter, and accounts usage and cost. Provider profiles (Profile)
// carry each provider's conventions. API keys are read from the environment when a Client is built and never appear in
// an error, a log line, an Endpoint or Stats.
//
// # Configuration
//
// Endpoints come from four built-in presets (see Presets), a YAML file and environment variables,
// layered from general to specific:
//
//  1. the preset (gpt-oss, deepseek, glm, qwen), or an empty endpoint for other names;
//  2. global environment defaults: CHAINEDSQL_BASE_URL, CHAINEDSQL_API_KEY_ENV, CHAINEDSQL_TIMEOUT, … ;
//  3. the file's `defaults:` block;
//  4. the file's `teachers: NAME:` block;
//  5. per-teacher environment variables CHAINEDSQL_<NAME>_<FIELD>, where NAME is the teacher name
//     upper-cased with every non-alphanumeric character replaced by '_' (gpt-oss → GPT_OSS).
//
// The presets read their key from CHAINEDSQL_API_KEY, so one hosted key and one
// CHAINEDSQL_BASE_URL serve all four. The field names (YAML key, environment suffix):
//
//	base_url            BASE_URL            OpenAI-compatible base URL, up to and including /v1 (a query is kept)
//	model               MODEL               model id sent in the request (per-teacher env only)
//	api_key_env         API_KEY_ENV         name of the env var holding the key; "" = no key
//	                    API_KEY             (env only) if CHAINEDSQL_<NAME>_API_KEY is set, that
//	                                        variable becomes the key variable of NAME
//	max_concurrency     MAX_CONCURRENCY     requests in flight at once
//	rpm, tpm            RPM, TPM            requests / tokens per minute; 0 = unlimited
//	temperature, top_p  TEMPERATURE, TOP_P  sampling; unset = the server's default
//	max_tokens          MAX_TOKENS          completion budget; 0 = the server's default
//	provider            PROVIDER            provider profile: vllm, sglang, openrouter, deepseek, zai,
//	                                        dashscope, together, fireworks, ollama, openai (see Profile)
//	stream              STREAM              true: stream every request (SSE)
//	stream_idle_timeout STREAM_IDLE_TIMEOUT longest silence inside a stream (default 2m)
//	thinking            THINKING            true (default)/false: ask for thinking in the provider's way
//	template_opens_think TEMPLATE_OPENS_THINK true: the model's chat template ends the prompt with
//	                                        <think> (the qwen preset's default; see Endpoint)
//	reasoning_effort    REASONING_EFFORT    sent as reasoning_effort (OpenRouter: reasoning.effort)
//	extra_body          (file only)         fields merged into the request JSON
//	timeout             TIMEOUT             per attempt, Go duration ("90s", "10m")
//	max_retries         MAX_RETRIES         retries after the first attempt
//	backoff_base        BACKOFF_BASE        first backoff ceiling (doubles per retry)
//	backoff_max         BACKOFF_MAX         backoff ceiling
//	price_prompt_per_m  PRICE_PROMPT_PER_M  USD per 1M prompt tokens (per-teacher env only)
//	price_cached_prompt_per_m PRICE_CACHED_PROMPT_PER_M  USD per 1M cached prompt tokens
//	price_completion_per_m PRICE_COMPLETION_PER_M  USD per 1M completion tokens (per-teacher env only)
//	on_empty, on_length, on_content_filter  ON_EMPTY, ON_LENGTH, ON_CONTENT_FILTER: keep|retry|fail
//
// See example.yaml in this directory for a complete file.
package teachers

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Policies for an unwanted reply (Endpoint.OnEmpty, OnLength, OnContentFilter).
const (
	// OnKeep returns the reply as it is; Stats.Kept records it.
	OnKeep = "keep"
	// OnRetry retries like a transient fault; when retries run out, Chat fails with that reason.
	OnRetry = "retry"
	// OnFail fails at once with that reason.
	OnFail = "fail"
)

// Defaults applied by New (and by Config.Endpoint) to zero fields of an Endpoint.
const (
	DefaultMaxConcurrency = 16
	DefaultTimeout        = 10 * time.Minute
	DefaultBackoffBase    = 500 * time.Millisecond
	DefaultBackoffMax     = 30 * time.Second
	DefaultMaxRetries     = 6 // the presets' value; an Endpoint built by hand keeps its own (0 = no retries)
	// DefaultStreamIdleTimeout is the longest silence a streamed attempt waits through.
	DefaultStreamIdleTimeout = 2 * time.Minute
	DefaultOnEmpty           = OnRetry
	DefaultOnLength          = OnKeep
	DefaultOnContentFilter   = OnFail
	// DefaultAPIKeyEnv is the key variable of the presets and of the file's defaults.
	DefaultAPIKeyEnv = "CHAINEDSQL_API_KEY"
)

// Endpoint is one named teacher endpoint. It holds the name of the environment variable with the
// API key, never the key, so it is safe to write into a manifest.
//
// The struct tags declare the configuration (LoadConfig): a field's yaml tag is its key in the
// file, and that key upper-cased its environment suffix, read per teacher and as a global
// default; env:"teacher" reads a field per teacher only, env:"-" from the file only.
type Endpoint struct {
	// Name identifies the teacher in run dirs, stats and errors.
	Name string `json:"name" yaml:"-"`
	// BaseURL is the OpenAI-compatible base URL including /v1, e.g. http://127.0.0.1:8000/v1;
	// requests go to its path's /chat/completions, its query (an api-version) kept.
	BaseURL string `json:"base_url" yaml:"base_url"`
	// Model is the model id sent with every request.
	Model string `json:"model" yaml:"model" env:"teacher"`
	// APIKeyEnv names the environment variable holding the API key; "" means no key (a local
	// server). The variable is read by New.
	APIKeyEnv string `json:"api_key_env,omitempty" yaml:"api_key_env"`
	// Provider names the provider profile whose conventions apply (Providers lists them; ""
	// for none): how thinking and reasoning effort are requested and which response field
	// carries the reasoning. Config loading also takes the profile's base URL, key variable,
	// model ids and streaming default below the explicit fields.
	Provider string `json:"provider,omitempty" yaml:"provider"`
	// Stream makes every request stream (SSE), usage included through stream_options.
	Stream bool `json:"stream,omitempty" yaml:"stream"`
	// StreamIdleTimeout fails a streamed attempt that receives nothing for this long, keep-alive
	// comments included (0 → DefaultStreamIdleTimeout). Timeout still bounds the whole attempt.
	StreamIdleTimeout time.Duration `json:"stream_idle_timeout_ns,omitempty" yaml:"stream_idle_timeout"`
	// Thinking asks the model to think (or not) in the provider's way, sent only where the
	// provider says how (Profile). Unset means true, for every teacher, a preset or one of the
	// config's own names: `thinking: false` turns it off.
	Thinking *bool `json:"thinking,omitempty" yaml:"thinking"`
	// TemplateOpensThink declares that the model's chat template ends the generation prompt with
	// an opening <think> when it thinks (Qwen3.5's, QwQ's, DeepSeek-R1's templates), so that a
	// server without a reasoning parser returns the reasoning without that tag. Replies then carry
	// chat.Reply.ThinkOpened (unless Thinking is false), and a reply the token limit cut inside
	// that reasoning, which has no tag at all, is read as truncated rather than as a format
	// violation (distill.CutInOpenedThink). The qwen preset sets it.
	TemplateOpensThink bool `json:"template_opens_think,omitempty" yaml:"template_opens_think"`

	// MaxConcurrency bounds requests in flight (0 → DefaultMaxConcurrency).
	MaxConcurrency int `json:"max_concurrency" yaml:"max_concurrency"`
	// RPM and TPM bound requests and tokens per minute; 0 means unlimited. Retries count.
	RPM int `json:"rpm,omitempty" yaml:"rpm"`
	TPM int `json:"tpm,omitempty" yaml:"tpm"`

	// Temperature and TopP are sent when set (a chat.Options value wins).
	Temperature *float64 `json:"temperature,omitempty" yaml:"temperature"`
	TopP        *float64 `json:"top_p,omitempty" yaml:"top_p"`
	// MaxTokens is sent as max_tokens when > 0 (a chat.Options value wins). A stream may take
	// 2 KiB for each token it allows (streamLimit; 256 Ki tokens when none is sent).
	MaxTokens int `json:"max_tokens,omitempty" yaml:"max_tokens"`
	// ReasoningEffort is sent when set ("low", "medium", "high", …): as reasoning_effort, or
	// in the provider's own form (OpenRouter: reasoning.effort).
	ReasoningEffort string `json:"reasoning_effort,omitempty" yaml:"reasoning_effort"`
	// ExtraBody fields are merged into the request JSON (e.g. chat_template_kwargs). They may not
	// name model, messages or stream.
	ExtraBody map[string]any `json:"extra_body,omitempty" yaml:"extra_body" env:"-"`

	// Timeout bounds one attempt, reading the whole body included (0 → DefaultTimeout).
	Timeout time.Duration `json:"timeout_ns" yaml:"timeout"`
	// MaxRetries is the number of retries after the first attempt.
	MaxRetries int `json:"max_retries" yaml:"max_retries"`
	// BackoffBase and BackoffMax shape the backoff: attempt n sleeps a uniform random duration in
	// [0, min(BackoffMax, BackoffBase·2^n)), or at least what Retry-After asks (at most
	// MaxServerWait).
	BackoffBase time.Duration `json:"backoff_base_ns" yaml:"backoff_base"`
	BackoffMax  time.Duration `json:"backoff_max_ns" yaml:"backoff_max"`

	// PricePromptPerM and PriceCompletionPerM are USD per 1M tokens, for Stats.CostUSD;
	// PriceCachedPromptPerM prices prompt tokens served from the provider's cache (nil: at
	// PricePromptPerM). A provider-reported cost (OpenRouter's usage.cost) is used instead when
	// there is one.
	PricePromptPerM       float64  `json:"price_prompt_per_m,omitempty" yaml:"price_prompt_per_m" env:"teacher"`
	PriceCachedPromptPerM *float64 `json:"price_cached_prompt_per_m,omitempty" yaml:"price_cached_prompt_per_m" env:"teacher"`
	PriceCompletionPerM   float64  `json:"price_completion_per_m,omitempty" yaml:"price_completion_per_m" env:"teacher"`

	// OnEmpty applies to a reply whose content is blank ("" → DefaultOnEmpty, retry).
	// OnLength applies to finish_reason "length" ("" → DefaultOnLength, keep).
	// OnContentFilter applies to finish_reason "content_filter" ("" → DefaultOnContentFilter, fail).
	// Finish reasons are checked first: an empty reply cut by length falls under OnLength.
	OnEmpty         string `json:"on_empty,omitempty" yaml:"on_empty"`
	OnLength        string `json:"on_length,omitempty" yaml:"on_length"`
	OnContentFilter string `json:"on_content_filter,omitempty" yaml:"on_content_filter"`
}

// Preset names.
const (
	PresetGPTOSS   = "gpt-oss"
	PresetDeepSeek = "deepseek"
	PresetGLM      = "glm"
	PresetQwen     = "qwen"
)

// Presets returns the built-in teachers: gpt-oss (gpt-oss-120b), deepseek (deepseek-v4-flash),
// glm (glm-4.7-flash) and qwen (qwen3.5-35b-a3b). They have no base URL of their own (set
// CHAINEDSQL_BASE_URL or base_url, or a provider), read their key from CHAINEDSQL_API_KEY
// unless a provider names another, ask for thinking (sent only where a provider says how), and
// carry no prices (set price_*_per_m to get costs). The map is a fresh copy.
func Presets() map[string]Endpoint {
	mk := func(name, model string) Endpoint {
		on := true
		return Endpoint{
			Thinking:       &on,
			Name:           name,
			Model:          model,
			APIKeyEnv:      DefaultAPIKeyEnv,
			MaxConcurrency: DefaultMaxConcurrency,
			Timeout:        DefaultTimeout,
			MaxRetries:     DefaultMaxRetries,
			BackoffBase:    DefaultBackoffBase,
			BackoffMax:     DefaultBackoffMax,
		}
	}
	// Qwen3.5's thinking template (35B-A3B ships it) ends the generation prompt with "<think>\n".
	qwen := mk(PresetQwen, "qwen3.5-35b-a3b")
	qwen.TemplateOpensThink = true
	return map[string]Endpoint{
		PresetGPTOSS:   mk(PresetGPTOSS, "gpt-oss-120b"),
		PresetDeepSeek: mk(PresetDeepSeek, "deepseek-v4-flash"),
		PresetGLM:      mk(PresetGLM, "glm-4.7-flash"),
		PresetQwen:     qwen,
	}
}

// reservedBodyKeys are request fields ExtraBody may not replace: the client sets them itself.
var reservedBodyKeys = []string{"model", "messages", "stream", "stream_options"}

// withDefaults returns e with defaults filled into zero fields.
func (e Endpoint) withDefaults() Endpoint {
	if e.MaxConcurrency == 0 {
		e.MaxConcurrency = DefaultMaxConcurrency
	}
	if e.Timeout == 0 {
		e.Timeout = DefaultTimeout
	}
	if e.BackoffBase == 0 {
		e.BackoffBase = DefaultBackoffBase
	}
	if e.BackoffMax == 0 {
		e.BackoffMax = DefaultBackoffMax
	}
	if e.OnEmpty == "" {
		e.OnEmpty = DefaultOnEmpty
	}
	if e.OnLength == "" {
		e.OnLength = DefaultOnLength
	}
	if e.OnContentFilter == "" {
		e.OnContentFilter = DefaultOnContentFilter
	}
	if e.StreamIdleTimeout == 0 {
		e.StreamIdleTimeout = DefaultStreamIdleTimeout
	}
	if e.ExtraBody != nil {
		e.ExtraBody = maps.Clone(e.ExtraBody)
	}
	if e.Thinking == nil {
		on := true // a reasoning-distillation teacher thinks unless told not to
		e.Thinking = &on
	}
	e.Thinking = clonePtr(e.Thinking)
	e.Temperature = clonePtr(e.Temperature)
	e.TopP = clonePtr(e.TopP)
	e.PriceCachedPromptPerM = clonePtr(e.PriceCachedPromptPerM)
	return e
}

// clonePtr returns a pointer to a copy of *p, nil for nil, so that copies of an Endpoint do not
// share their optional fields.
func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// Validate reports the first problem of e (after defaults), naming the teacher and the field.
func (e Endpoint) Validate() error {
	e = e.withDefaults()
	name := e.Name
	if name == "" {
		return fmt.Errorf("teacher endpoint has no name")
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("teacher %s: %s", name, fmt.Sprintf(format, a...))
	}
	if e.BaseURL == "" {
		return bad("no base URL: set base_url in the config file or CHAINEDSQL_BASE_URL / CHAINEDSQL_%s_BASE_URL", EnvName(name))
	}
	u, err := url.Parse(e.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return bad("base URL %q is not an http(s) URL", redactURL(e.BaseURL))
	}
	if e.Model == "" {
		return bad("no model id: set model in the config file or CHAINEDSQL_%s_MODEL", EnvName(name))
	}
	switch {
	case e.MaxConcurrency < 0:
		return bad("max_concurrency %d is negative", e.MaxConcurrency)
	case e.RPM < 0:
		return bad("rpm %d is negative", e.RPM)
	case e.TPM < 0:
		return bad("tpm %d is negative", e.TPM)
	case e.MaxTokens < 0:
		return bad("max_tokens %d is negative", e.MaxTokens)
	case e.Timeout < 0:
		return bad("timeout %v is negative", e.Timeout)
	case e.MaxRetries < 0:
		return bad("max_retries %d is negative", e.MaxRetries)
	case e.BackoffBase < 0 || e.BackoffMax < 0:
		return bad("backoff durations must not be negative")
	case e.PricePromptPerM < 0 || e.PriceCompletionPerM < 0 || (e.PriceCachedPromptPerM != nil && *e.PriceCachedPromptPerM < 0):
		return bad("prices must not be negative")
	case e.StreamIdleTimeout < 0:
		return bad("stream_idle_timeout %v is negative", e.StreamIdleTimeout)
	}
	if _, err := ProfileOf(e.Provider); err != nil {
		return bad("%v", err)
	}
	for field, v := range map[string]string{"on_empty": e.OnEmpty, "on_length": e.OnLength, "on_content_filter": e.OnContentFilter} {
		if v != OnKeep && v != OnRetry && v != OnFail {
			return bad("%s %q: want keep, retry or fail", field, v)
		}
	}
	for _, k := range reservedBodyKeys {
		if _, ok := e.ExtraBody[k]; ok {
			return bad("extra_body may not set %q", k)
		}
	}
	return nil
}

// EnvName is the form of a teacher name used in environment variable names: upper case, every
// character other than A-Z and 0-9 replaced by '_' (gpt-oss → GPT_OSS).
func EnvName(name string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(name) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// completionsURL is the chat completions URL of a base URL: /chat/completions appended to its
// path, its query kept (Azure's api-version, a gateway's key), its fragment (never sent)
// dropped. Appended to the whole string, the path went into the query or the fragment.
func completionsURL(base string) string {
	u, err := url.Parse(base)
	if err != nil {
		return strings.TrimRight(base, "/") + "/chat/completions" // New's checks refuse it first
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/chat/completions"
	if u.RawPath != "" {
		u.RawPath = strings.TrimRight(u.RawPath, "/") + "/chat/completions"
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// redactURL drops user info and the query from a URL for messages (some providers put keys there).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User = nil
	u.RawQuery = ""
	u.Fragment = ""
	return u.String()
}

// sortedNames returns the keys of m in order.
func sortedNames[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}
