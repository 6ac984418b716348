package teachers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
			path := ""
			if tc.file != "" {
				path = writeFile(t, "c.yaml", tc.file)
			}
			_, err := loadConfig(path, envMap(tc.env))
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

func TestInlineThink(t *testing.T) {
	cases := map[string]string{
		"<think>a b</think>\n<sql>SELECT 1</sql>": "a b",
		"pre <think>\nx\n</think> post":           "x",
		"<think>cut off mid-thought":              "cut off mid-thought",
		"template opened it</think><sql>S</sql>":  "template opened it",
		"<sql>SELECT 1</sql>":                     "",
	}
	for in, want := range cases {
		if got := InlineThink(in); got != want {
			t.Errorf("InlineThink(%q) = %q, want %q", in, got, want)
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
