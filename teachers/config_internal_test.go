package teachers

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/internal/oai"
)

func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPresets(t *testing.T) {
	want := map[string]string{"gpt-oss": "gpt-oss-120b", "deepseek": "deepseek-v4-flash", "glm": "glm-4.7-flash", "qwen": "qwen3.5-35b-a3b"}
	p := Presets()
	if len(p) != len(want) {
		t.Fatalf("presets: got %d, want %d", len(p), len(want))
	}
	for name, model := range want {
		e, ok := p[name]
		if !ok || e.Model != model || e.Name != name || e.APIKeyEnv != DefaultAPIKeyEnv {
			t.Errorf("preset %s = %+v, want model %s, key env %s", name, e, model, DefaultAPIKeyEnv)
		}
	}
	p["gpt-oss"] = Endpoint{}
	if Presets()["gpt-oss"].Model != "gpt-oss-120b" {
		t.Fatal("Presets must return a fresh copy")
	}
}

func TestConfigOnlyEnvOneKeyServesAll(t *testing.T) {
	c, err := loadConfig("", envMap(map[string]string{
		"CHAINEDSQL_BASE_URL":        "https://hosted.example/v1",
		"CHAINEDSQL_GLM_MODEL":       "zai/glm-4.7-flash",
		"CHAINEDSQL_GPT_OSS_API_KEY": "x",
		"CHAINEDSQL_QWEN_RPM":        "120",
		"CHAINEDSQL_TIMEOUT":         "90s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Names(), ","); got != "deepseek,glm,gpt-oss,qwen" {
		t.Fatalf("names = %s", got)
	}
	for _, n := range c.Names() {
		e, err := c.Endpoint(n)
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		if e.BaseURL != "https://hosted.example/v1" || e.Timeout != 90*time.Second {
			t.Errorf("%s: base %s timeout %v", n, e.BaseURL, e.Timeout)
		}
	}
	glm, _ := c.Endpoint("glm")
	if glm.Model != "zai/glm-4.7-flash" {
		t.Errorf("glm model = %s", glm.Model)
	}
	gpt, _ := c.Endpoint("gpt-oss")
	if gpt.APIKeyEnv != "CHAINEDSQL_GPT_OSS_API_KEY" {
		t.Errorf("gpt-oss key env = %s, want its own CHAINEDSQL_GPT_OSS_API_KEY", gpt.APIKeyEnv)
	}
	ds, _ := c.Endpoint("deepseek")
	if ds.APIKeyEnv != DefaultAPIKeyEnv {
		t.Errorf("deepseek key env = %s", ds.APIKeyEnv)
	}
	q, _ := c.Endpoint("qwen")
	if q.RPM != 120 {
		t.Errorf("qwen rpm = %d", q.RPM)
	}
}

func TestConfigNoBaseURL(t *testing.T) {
	c, err := loadConfig("", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Endpoint("deepseek")
	if err == nil || !strings.Contains(err.Error(), "CHAINEDSQL_BASE_URL") || !strings.Contains(err.Error(), "CHAINEDSQL_DEEPSEEK_BASE_URL") {
		t.Fatalf("want an error naming the base URL variables, got %v", err)
	}
}

const testYAML = `
defaults:
  base_url: https://file-default.example/v1
  max_retries: 2
  on_length: retry
teachers:
  gpt-oss:
    model: openai/gpt-oss-120b
    rpm: 600
    temperature: 0
    reasoning_effort: high
    extra_body: {provider: {order: [a, b]}}
    price_prompt_per_m: 0.1
    price_completion_per_m: 0.5
  local:
    base_url: http://127.0.0.1:8000/v1
    model: Qwen/Qwen3-8B
    api_key_env: ""
    timeout: 45s
    extra_body:
      chat_template_kwargs: {enable_thinking: false}
`

func TestConfigFileAndEnvLayers(t *testing.T) {
	p := writeFile(t, "teachers.yaml", testYAML)
	c, err := loadConfig(p, envMap(map[string]string{
		"CHAINEDSQL_BASE_URL":              "https://global-env.example/v1", // below the file
		"CHAINEDSQL_GPT_OSS_RPM":           "900",                           // above the file
		"CHAINEDSQL_LOCAL_MAX_CONCURRENCY": "4",
	}))
	if err != nil {
		t.Fatal(err)
	}
	g, err := c.Endpoint("gpt-oss")
	if err != nil {
		t.Fatal(err)
	}
	if g.BaseURL != "https://file-default.example/v1" || g.Model != "openai/gpt-oss-120b" || g.RPM != 900 ||
		g.MaxRetries != 2 || g.OnLength != OnRetry || g.Temperature == nil || *g.Temperature != 0 ||
		g.ReasoningEffort != "high" || g.PricePromptPerM != 0.1 || g.PriceCompletionPerM != 0.5 {
		t.Errorf("gpt-oss = %+v", g)
	}
	if _, ok := g.ExtraBody["provider"]; !ok {
		t.Errorf("gpt-oss extra body = %v", g.ExtraBody)
	}
	l, err := c.Endpoint("local")
	if err != nil {
		t.Fatal(err)
	}
	if l.BaseURL != "http://127.0.0.1:8000/v1" || l.APIKeyEnv != "" || l.Timeout != 45*time.Second || l.MaxConcurrency != 4 || l.MaxRetries != 2 {
		t.Errorf("local = %+v", l)
	}
	if got := strings.Join(c.Names(), ","); got != "deepseek,glm,gpt-oss,local,qwen" {
		t.Errorf("names = %s", got)
	}
	_, err = c.Endpoint("nope")
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "deepseek, glm, gpt-oss, local, qwen") {
		t.Errorf("unknown teacher error = %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown field", "teachers:\n  x:\n    modle: m\n", nil, "modle"},
		{"bad duration", "defaults:\n  timeout: soon\n", nil, "soon"},
		{"bad env int", "", map[string]string{"CHAINEDSQL_GLM_RPM": "fast"}, "CHAINEDSQL_GLM_RPM"},
		{"bad env duration", "", map[string]string{"CHAINEDSQL_TIMEOUT": "10"}, "CHAINEDSQL_TIMEOUT"},
		{"env name clash", "teachers:\n  gpt_oss:\n    model: m\n", nil, "GPT_OSS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadConfig(configPath(t, tc.file), envMap(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error mentioning %q, got %v", tc.want, err)
			}
		})
	}
	if _, err := loadConfig(writeFile(t, "c.toml", "x = 1"), envMap(nil)); err == nil || !strings.Contains(err.Error(), "TOML") {
		t.Errorf("toml: %v", err)
	}
	if _, err := loadConfig(filepath.Join(t.TempDir(), "missing.yaml"), envMap(nil)); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	// Validation problems surface from Endpoint, naming teacher and field.
	c, err := loadConfig(writeFile(t, "c.yaml", "defaults:\n  base_url: http://x/v1\nteachers:\n  glm:\n    on_length: maybe\n  qwen:\n    extra_body: {model: other}\n"), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Endpoint("glm"); err == nil || !strings.Contains(err.Error(), "on_length") || !strings.Contains(err.Error(), "glm") {
		t.Errorf("bad policy: %v", err)
	}
	if _, err := c.Endpoint("qwen"); err == nil || !strings.Contains(err.Error(), `"model"`) {
		t.Errorf("reserved extra body key: %v", err)
	}
}

func TestExampleYAML(t *testing.T) {
	c, err := loadConfig("example.yaml", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gpt-oss", "deepseek", "glm", "qwen", "local-vllm"} {
		if _, err := c.Endpoint(n); err != nil {
			t.Errorf("example.yaml %s: %v", n, err)
		}
	}
}

func TestLoadConfigRealEnv(t *testing.T) {
	t.Setenv("CHAINEDSQL_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("CHAINEDSQL_DEEPSEEK_MODEL", "deepseek-chat")
	c, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.Endpoint("deepseek")
	if err != nil || e.Model != "deepseek-chat" || e.BaseURL != "http://127.0.0.1:1/v1" {
		t.Fatalf("deepseek = %+v, %v", e, err)
	}
}

func TestWireReasoningForms(t *testing.T) {
	cases := []struct {
		name, body, order, want, source string
	}{
		{"deepseek reasoning_content", `{"choices":[{"message":{"content":"<sql>S</sql>","reasoning_content":"R1"}}]}`, "", "R1", chat.SourceReasoningContent},
		{"vllm reasoning, content null", `{"choices":[{"message":{"content":null,"reasoning":"R2"}}]}`, "", "R2", chat.SourceReasoning},
		{"both fields, same text", `{"choices":[{"message":{"content":"x","reasoning_content":"R3","reasoning":"R3"}}]}`, "", "R3", chat.SourceReasoningContent},
		{"reasoning null, content only", `{"choices":[{"message":{"content":"<think>i</think>x","reasoning":null,"reasoning_content":null}}]}`, "", "", ""},
		{"reasoning object", `{"choices":[{"message":{"content":"x","reasoning":{"text":"R4"}}}]}`, "", "R4", chat.SourceReasoning},
		{"openrouter details only", `{"choices":[{"message":{"content":"x","reasoning":null,"reasoning_details":[{"type":"reasoning.text","text":"R5a"},{"type":"reasoning.encrypted","data":"zz"},{"type":"reasoning.text","text":"R5b"}]}}]}`, "openrouter", "R5aR5b", chat.SourceReasoningDetails},
		{"openrouter both", `{"choices":[{"message":{"content":"x","reasoning":"R6","reasoning_details":[{"type":"reasoning.text","text":"R6"}]}}]}`, "openrouter", "R6", chat.SourceReasoning},
		{"blank field ignored", `{"choices":[{"message":{"content":"x","reasoning_content":"  ","reasoning":"R7"}}]}`, "", "R7", chat.SourceReasoning},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w oai.Completion
			if err := json.Unmarshal([]byte(c.body), &w); err != nil {
				t.Fatal(err)
			}
			var a assembly
			a.add(&w, literalPiece)
			prof, _ := ProfileOf(c.order)
			got, src := a.pickReasoning(prof.ReasoningOrder)
			if got != c.want || src != c.source {
				t.Errorf("reasoning %q from %q, want %q from %q", got, src, c.want, c.source)
			}
		})
	}
}

func TestWireUsageForms(t *testing.T) {
	cases := []struct {
		name, usage string
		want        chat.Usage
		cost        float64
	}{
		{"null details (vLLM)", `{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":null,"completion_tokens_details":null}`, chat.Usage{PromptTokens: 10, CompletionTokens: 5}, -1},
		{"openai details", `{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}`, chat.Usage{PromptTokens: 10, CompletionTokens: 5, CachedTokens: 4, ReasoningTokens: 3}, -1},
		{"deepseek cache fields", `{"prompt_tokens":10,"completion_tokens":5,"prompt_cache_hit_tokens":6,"prompt_cache_miss_tokens":4,"completion_tokens_details":{"reasoning_tokens":2}}`, chat.Usage{PromptTokens: 10, CompletionTokens: 5, CachedTokens: 6, ReasoningTokens: 2}, -1},
		{"openrouter cost", `{"prompt_tokens":10,"completion_tokens":5,"cost":0.00042}`, chat.Usage{PromptTokens: 10, CompletionTokens: 5}, 0.00042},
	}
	for _, c := range cases {
		var w oai.Completion
		if err := json.Unmarshal([]byte(`{"choices":[],"usage":`+c.usage+`}`), &w); err != nil {
			t.Fatal(err)
		}
		var a assembly
		a.add(&w, literalPiece)
		u, cost := a.chatUsage()
		if u != c.want || (cost == nil) != (c.cost < 0) || (cost != nil && *cost != c.cost) {
			t.Errorf("%s: usage %+v cost %v", c.name, u, cost)
		}
	}
}

func TestPrice(t *testing.T) {
	cached := 0.1
	c := &Client{ep: Endpoint{PricePromptPerM: 1, PriceCompletionPerM: 2, PriceCachedPromptPerM: &cached}}
	u := chat.Usage{PromptTokens: 1_000_000, CachedTokens: 400_000, CompletionTokens: 500_000}
	if got, want := c.price(u), 0.6+0.04+1.0; math.Abs(got-want) > 1e-12 {
		t.Errorf("price %v, want %v", got, want)
	}
	c.ep.PriceCachedPromptPerM = nil
	if got := c.price(u); math.Abs(got-2.0) > 1e-12 {
		t.Errorf("cached at the prompt price: %v", got)
	}
	if got := c.Cost(chat.Usage{PromptTokens: 5, CostUSD: 0.5}); got != 0.5 {
		t.Errorf("reported cost must win: %v", got)
	}
}

func TestRateLimitHeaders(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("X-Ratelimit-Reset-Requests", "1m30.5s")
	if at, ok := headerReset(h, now, "X-Ratelimit-Reset-Requests"); !ok || at != now.Add(90500*time.Millisecond) {
		t.Errorf("Go duration: %v %v", at, ok)
	}
	h.Set("X-Ratelimit-Reset-Requests", "20ms")
	if at, _ := headerReset(h, now, "X-Ratelimit-Reset-Requests"); at != now.Add(20*time.Millisecond) {
		t.Errorf("ms: %v", at)
	}
	h.Set("X-Ratelimit-Reset", "2.5")
	if at, _ := headerReset(h, now, "X-Ratelimit-Reset"); at != now.Add(2500*time.Millisecond) {
		t.Errorf("seconds: %v", at)
	}
	h.Set("X-Ratelimit-Reset", "1767323045000")
	if at, _ := headerReset(h, now, "X-Ratelimit-Reset"); !at.Equal(time.UnixMilli(1767323045000)) {
		t.Errorf("epoch ms: %v", at)
	}
	if _, ok := headerReset(http.Header{"X-Ratelimit-Reset": {"soon"}}, now, "X-Ratelimit-Reset"); ok {
		t.Error("garbage accepted")
	}
}

func TestPacerBlockNeedsHeaders(t *testing.T) {
	var p pacer
	p.block(time.Now().Add(time.Hour)) // a 429 from a server without rate-limit headers
	if w, err := p.wait(context.Background(), 1); err != nil || w != 0 {
		t.Fatalf("blocked without rate-limit headers: %v %v", w, err)
	}
	h := http.Header{}
	h.Set("X-Ratelimit-Remaining-Requests", "50")
	h.Set("X-Ratelimit-Reset-Requests", "1s")
	p.observe(h, time.Now())
	p.block(time.Now().Add(120 * time.Millisecond))
	if w, err := p.wait(context.Background(), 1); err != nil || w < 100*time.Millisecond {
		t.Fatalf("a 429's Retry-After from a provider with rate-limit headers must hold the others: %v %v", w, err)
	}
}

func TestPacerHoldsBackAtZero(t *testing.T) {
	var p pacer
	h := http.Header{}
	h.Set("X-Ratelimit-Remaining-Requests", "1")
	h.Set("X-Ratelimit-Reset-Requests", "150ms")
	p.observe(h, time.Now())
	ctx := context.Background()
	if w, err := p.wait(ctx, 10); err != nil || w != 0 {
		t.Fatalf("first request must go at once: %v %v", w, err)
	}
	start := time.Now()
	w, err := p.wait(ctx, 10) // the budget is spent: wait for the reset
	if err != nil || w < 100*time.Millisecond || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("second request waited %v (%v)", w, err)
	}
	h = http.Header{}
	h.Set("X-Ratelimit-Remaining-Tokens", "100")
	h.Set("X-Ratelimit-Reset-Tokens", "10s")
	p.observe(h, time.Now())
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.wait(cctx, 500); err == nil {
		t.Fatal("a request larger than the token budget went before the reset")
	}
	if w, err := p.wait(ctx, 50); err != nil || w != 0 {
		t.Fatalf("a request within the token budget must go: %v %v", w, err)
	}
}

func TestProviderLayering(t *testing.T) {
	env := map[string]string{"CHAINEDSQL_GLM_MODEL": "glm-custom"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	path := filepath.Join(t.TempDir(), "t.yaml")
	os.WriteFile(path, []byte(`
defaults:
  provider: vllm
teachers:
  qwen:
    provider: dashscope
  deepseek:
    provider: deepseek
    base_url: http://127.0.0.1:9/v1
    stream: true
  glm:
    provider: zai
  gpt-oss:
    thinking: false
    extra_body:
      chat_template_kwargs: {custom: 1}
`), 0o644)
	c, err := loadConfig(path, lookup)
	if err != nil {
		t.Fatal(err)
	}
	q, _ := c.Endpoint("qwen")
	if q.Provider != ProviderDashScope || q.Model != "qwen3.5-35b-a3b" || !q.Stream || q.APIKeyEnv != "DASHSCOPE_API_KEY" || !strings.Contains(q.BaseURL, "dashscope") {
		t.Errorf("qwen on dashscope: %+v", q)
	}
	d, _ := c.Endpoint("deepseek")
	if d.BaseURL != "http://127.0.0.1:9/v1" || d.Model != "deepseek-v4-flash" || !d.Stream || d.APIKeyEnv != "DEEPSEEK_API_KEY" {
		t.Errorf("explicit fields must win over the profile: %+v", d)
	}
	g, _ := c.Endpoint("glm")
	if g.Model != "glm-custom" || g.Provider != ProviderZAI {
		t.Errorf("per-teacher env must win: %+v", g)
	}
	o, _ := c.Endpoint("gpt-oss")
	if o.Provider != ProviderVLLM || o.Model != "openai/gpt-oss-120b" || o.APIKeyEnv != "" || o.Stream || o.BaseURL != "http://127.0.0.1:8000/v1" {
		t.Errorf("gpt-oss on vllm from defaults: %+v", o)
	}
	os.WriteFile(path, []byte("teachers:\n  qwen:\n    provider: nosuch\n"), 0o644)
	if _, err := loadConfig(path, lookup); err == nil || !strings.Contains(err.Error(), "nosuch") || !strings.Contains(err.Error(), "dashscope") {
		t.Errorf("unknown provider: %v", err)
	}
}

func TestThinkingFields(t *testing.T) {
	on, off := true, false
	cases := []struct {
		provider, name, model, effort string
		thinking                      *bool
		want                          string
	}{
		{ProviderVLLM, "qwen", "Qwen/Qwen3.5-35B-A3B", "", &on, `{"chat_template_kwargs":{"enable_thinking":true}}`},
		{ProviderSGLang, "deepseek", "deepseek-ai/DeepSeek-V4-Flash", "", &on, `{"chat_template_kwargs":{"thinking":true}}`},
		{ProviderVLLM, "gpt-oss", "openai/gpt-oss-120b", "high", &on, `{"reasoning_effort":"high"}`},
		{ProviderDashScope, "qwen", "qwen3.5-35b-a3b", "", &on, `{"enable_thinking":true}`},
		{ProviderZAI, "glm", "glm-4.7-flash", "", &off, `{"thinking":{"type":"disabled"}}`},
		{ProviderDeepSeek, "deepseek", "deepseek-v4-flash", "", &on, `{"thinking":{"type":"enabled"}}`},
		{ProviderOpenRouter, "gpt-oss", "openai/gpt-oss-120b", "low", &on, `{"reasoning":{"effort":"low","enabled":true}}`},
		{ProviderOpenRouter, "glm", "z-ai/glm-4.7-flash", "low", &off, `{"reasoning":{"effort":"low","enabled":false}}`},
		{ProviderFireworks, "qwen", "q", "high", &on, `{"reasoning_effort":"high"}`},
		{ProviderOllama, "qwen", "q", "none", &off, `{"reasoning_effort":"none"}`},
		{ProviderOpenRouter, "glm", "z-ai/glm-4.7-flash", "", &on, `{"reasoning":{"enabled":true}}`},
		{"", "qwen", "x", "medium", &on, `{"reasoning_effort":"medium"}`},
		// A teacher of one's own thinks unless told not to (thinking: false).
		{ProviderVLLM, "my-model", "Qwen/Qwen3-8B", "", nil, `{"chat_template_kwargs":{"enable_thinking":true}}`},
		{ProviderDashScope, "mine", "qwen3-235b-a22b", "", nil, `{"enable_thinking":true}`},
		{ProviderDashScope, "mine", "qwen3-235b-a22b", "", &off, `{"enable_thinking":false}`},
	}
	for _, c := range cases {
		e := Endpoint{Name: c.name, BaseURL: "http://x/v1", Model: c.model, Provider: c.provider, Thinking: c.thinking, ReasoningEffort: c.effort}
		cl := &Client{ep: e.withDefaults()}
		if err := cl.encodeBaseExtra(); err != nil {
			t.Fatal(err)
		}
		if got := "{" + string(cl.baseJoin) + "}"; got != c.want {
			t.Errorf("%s/%s: %s, want %s", c.provider, c.name, got, c.want)
		}
	}
}

func TestRetryAfterParsing(t *testing.T) {
	h := func(kv ...string) map[string][]string {
		m := map[string][]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = []string{kv[i+1]}
		}
		return m
	}
	if d := retryAfter(h("Retry-After", "2")); d != 2*time.Second {
		t.Errorf("seconds: %v", d)
	}
	if d := retryAfter(h("Retry-After", "0.5")); d != 500*time.Millisecond {
		t.Errorf("fractional: %v", d)
	}
	if d := retryAfter(h("Retry-After-Ms", "250", "Retry-After", "9")); d != 250*time.Millisecond {
		t.Errorf("ms header wins: %v", d)
	}
	date := time.Now().Add(3 * time.Second).UTC().Format("Mon, 02 Jan 2006 15:04:05 GMT")
	if d := retryAfter(h("Retry-After", date)); d < time.Second || d > 3*time.Second {
		t.Errorf("date: %v", d)
	}
	if d := retryAfter(h("Retry-After", "garbage")); d != 0 {
		t.Errorf("garbage: %v", d)
	}
}

func TestBackoffBounds(t *testing.T) {
	c := &Client{ep: Endpoint{BackoffBase: 10 * time.Millisecond, BackoffMax: 80 * time.Millisecond}}
	for n := 1; n <= 50; n++ {
		ceil := min(80*time.Millisecond, 10*time.Millisecond<<min(n-1, 20))
		for range 20 {
			if d := c.backoff(n, 0); d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v, want within [0, %v]", n, d, ceil)
			}
		}
	}
	if d := c.backoff(1, time.Second); d != time.Second {
		t.Errorf("Retry-After must win: %v", d)
	}
}

// FuzzWireResponse feeds arbitrary bytes to the response decoding of plain bodies and stream
// chunks: it never panics, and what it picks as reasoning is one of the fields' texts.
func FuzzWireResponse(f *testing.F) {
	f.Add([]byte(`{"choices":[{"delta":{"reasoning":"a","reasoning_details":[{"type":"reasoning.text","text":"b"}]},"finish_reason":null}],"usage":null}`))
	f.Add([]byte(`{"choices":[{"message":{"content":null,"reasoning":{"text":"x"}},"finish_reason":"length"}],"usage":{"prompt_cache_hit_tokens":3,"cost":1e-9}}`))
	f.Add([]byte(`{"choices":[{"index":1,"message":{"content":"skip"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var w oai.Completion
		if json.Unmarshal(data, &w) != nil {
			return
		}
		var a assembly
		a.add(&w, literalPiece)
		a.add(&w, literalPiece)
		text, src := a.pickReasoning(fieldOrder)
		if (text == "") != (src == "") {
			t.Fatalf("reasoning %q from %q", text, src)
		}
		a.chatUsage()
	})
}

// TestTemplateOpensThink: the qwen preset declares that its template opens <think> in the
// prompt, the file and the environment set it for any teacher, and a reply carries
// chat.Reply.ThinkOpened unless thinking is turned off.
func TestTemplateOpensThink(t *testing.T) {
	path := writeFile(t, "t.yaml", "teachers:\n  glm:\n    template_opens_think: true\n  qwen:\n    thinking: false\n")
	c, err := loadConfig(path, envMap(map[string]string{"CHAINEDSQL_DEEPSEEK_TEMPLATE_OPENS_THINK": "true", "CHAINEDSQL_BASE_URL": "http://x/v1"}))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"gpt-oss": false, "deepseek": true, "glm": true, "qwen": true}
	opened := map[string]bool{"gpt-oss": false, "deepseek": true, "glm": true, "qwen": false} // qwen: thinking off
	for name, w := range want {
		e, err := c.Endpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		if e.TemplateOpensThink != w {
			t.Errorf("%s: template_opens_think %v, want %v", name, e.TemplateOpensThink, w)
		}
		srv := httpReply(t, `{"choices":[{"message":{"content":"cut inside the reasoning"},"finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
		e.BaseURL, e.APIKeyEnv, e.MaxRetries = srv, "", 0
		cl, err := New(e)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := cl.Chat(context.Background(), []chat.Message{{Role: chat.RoleUser, Content: "q"}}, chat.Options{})
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		if rep.ThinkOpened != opened[name] {
			t.Errorf("%s: reply think_opened %v, want %v", name, rep.ThinkOpened, opened[name])
		}
	}
	if _, err := loadConfig("", envMap(map[string]string{"CHAINEDSQL_GLM_TEMPLATE_OPENS_THINK": "maybe"})); err == nil || !strings.Contains(err.Error(), "TEMPLATE_OPENS_THINK") {
		t.Errorf("bad TEMPLATE_OPENS_THINK: %v", err)
	}
}

// httpReply serves body to every request and returns the server's base URL.
func httpReply(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}
