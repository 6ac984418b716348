package teachers

// These tests pin every form of configuration LoadConfig accepts (each YAML key, each
// environment variable and alias, the layering and the error messages), so that the way the
// configuration is read can change without changing what it reads.

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// configPath writes file to a temporary c.yaml and returns its path; "" for "" (no file).
func configPath(t *testing.T, file string) string {
	t.Helper()
	if file == "" {
		return ""
	}
	return writeFile(t, "c.yaml", file)
}

// loadForms loads the presets, file (when not "") and env.
func loadForms(t *testing.T, file string, env map[string]string) (*Config, error) {
	t.Helper()
	return loadConfig(configPath(t, file), envMap(env))
}

// mustLoad is loadForms that fails the test on an error.
func mustLoad(t *testing.T, file string, env map[string]string) *Config {
	t.Helper()
	c, err := loadForms(t, file, env)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// raw is the named endpoint as loaded, before validation (with defaults filled in).
func raw(t *testing.T, c *Config, name string) Endpoint {
	t.Helper()
	e, ok := c.endpoints[name]
	if !ok {
		t.Fatalf("no teacher %q (have %v)", name, c.Names())
	}
	return e
}

func ptr[T any](v T) *T { return &v }

// diffEndpoint reports the fields in which got and want differ.
func diffEndpoint(got, want Endpoint) string {
	var b strings.Builder
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		g, w := gv.Field(i).Interface(), wv.Field(i).Interface()
		if !reflect.DeepEqual(g, w) {
			fmt.Fprintf(&b, "\n  %s: got %s, want %s", gv.Type().Field(i).Name, show(gv.Field(i)), show(wv.Field(i)))
		}
	}
	return b.String()
}

func show(v reflect.Value) string {
	if v.Kind() == reflect.Pointer && !v.IsNil() {
		return fmt.Sprintf("&%#v", v.Elem().Interface())
	}
	return fmt.Sprintf("%#v", v.Interface())
}

func checkEndpoint(t *testing.T, what string, got, want Endpoint) {
	t.Helper()
	if d := diffEndpoint(got, want); d != "" {
		t.Errorf("%s:%s", what, d)
	}
}

// allKeysYAML sets every YAML key of an endpoint block to a value other than any default.
const allKeysYAML = `
    base_url: http://127.0.0.1:9/v1
    model: m-1
    api_key_env: MY_KEY
    provider: vllm
    stream: true
    stream_idle_timeout: 45s
    thinking: false
    template_opens_think: true
    price_cached_prompt_per_m: 0.25
    max_concurrency: 3
    rpm: 60
    tpm: 9000
    temperature: 0.7
    top_p: 0.9
    max_tokens: 512
    reasoning_effort: low
    extra_body: {top_k: 20, chat_template_kwargs: {enable_thinking: true}}
    timeout: 90s
    max_retries: 2
    backoff_base: 1s
    backoff_max: 20s
    price_prompt_per_m: 0.1
    price_completion_per_m: 0.5
    on_empty: fail
    on_length: retry
    on_content_filter: keep
`

// allKeysWant is what allKeysYAML gives a teacher named name.
func allKeysWant(name string) Endpoint {
	return Endpoint{
		Name: name, BaseURL: "http://127.0.0.1:9/v1", Model: "m-1", APIKeyEnv: "MY_KEY", Provider: ProviderVLLM,
		Stream: true, StreamIdleTimeout: 45 * time.Second, Thinking: ptr(false), TemplateOpensThink: true,
		MaxConcurrency: 3, RPM: 60, TPM: 9000, Temperature: ptr(0.7), TopP: ptr(0.9), MaxTokens: 512,
		ReasoningEffort: "low",
		ExtraBody:       map[string]any{"top_k": 20, "chat_template_kwargs": map[string]any{"enable_thinking": true}},
		Timeout:         90 * time.Second, MaxRetries: 2, BackoffBase: time.Second, BackoffMax: 20 * time.Second,
		PricePromptPerM: 0.1, PriceCachedPromptPerM: ptr(0.25), PriceCompletionPerM: 0.5,
		OnEmpty: OnFail, OnLength: OnRetry, OnContentFilter: OnKeep,
	}
}

// TestFormsEveryYAMLKey: each key of a teacher block and of the defaults block sets its field,
// for a preset and for a teacher the file adds; every configurable field has a key.
func TestFormsEveryYAMLKey(t *testing.T) {
	for _, name := range []string{"glm", "custom"} {
		c := mustLoad(t, "teachers:\n  "+name+":"+allKeysYAML, nil)
		e, err := c.Endpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		checkEndpoint(t, "teachers: "+name, e, allKeysWant(name))
	}
	c := mustLoad(t, "teachers:\n  custom:\ndefaults:"+allKeysYAML, nil)
	for _, name := range []string{"custom", "deepseek"} {
		e, err := c.Endpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		checkEndpoint(t, "defaults for "+name, e, allKeysWant(name))
	}
	// Every field but Name differs from the base endpoints', so each key above was read.
	want := allKeysWant("custom")
	for _, base := range []Endpoint{Presets()["glm"].withDefaults(), raw(t, mustLoad(t, "teachers:\n  custom:\n", nil), "custom")} {
		bv, wv := reflect.ValueOf(base), reflect.ValueOf(want)
		for i := range bv.NumField() {
			if f := bv.Type().Field(i).Name; f != "Name" && reflect.DeepEqual(bv.Field(i).Interface(), wv.Field(i).Interface()) {
				t.Errorf("field %s is not set by allKeysYAML (base %s)", f, base.Name)
			}
		}
	}
}

// TestFormsNoNameKey: the name is the block's key; `name:` is not a field.
func TestFormsNoNameKey(t *testing.T) {
	_, err := loadForms(t, "teachers:\n  glm:\n    name: other\n", nil)
	if err == nil || !strings.Contains(err.Error(), "line 3: field name not found in type teachers.") {
		t.Fatalf("name key: %v", err)
	}
}

// TestFormsEveryEnvVariable: every per-teacher CHAINEDSQL_<NAME>_<FIELD>, and every global
// CHAINEDSQL_<FIELD>, sets its field.
func TestFormsEveryEnvVariable(t *testing.T) {
	perTeacher := map[string]string{
		"BASE_URL": "http://127.0.0.1:9/v1", "MODEL": "m-1", "API_KEY_ENV": "MY_KEY", "PROVIDER": "vllm",
		"STREAM": "true", "STREAM_IDLE_TIMEOUT": "45s", "THINKING": "false", "TEMPLATE_OPENS_THINK": "true",
		"PRICE_CACHED_PROMPT_PER_M": "0.25", "MAX_CONCURRENCY": "3", "RPM": "60", "TPM": "9000",
		"TEMPERATURE": "0.7", "TOP_P": "0.9", "MAX_TOKENS": "512", "REASONING_EFFORT": "low",
		"TIMEOUT": "90s", "MAX_RETRIES": "2", "BACKOFF_BASE": "1s", "BACKOFF_MAX": "20s",
		"PRICE_PROMPT_PER_M": "0.1", "PRICE_COMPLETION_PER_M": "0.5",
		"ON_EMPTY": "fail", "ON_LENGTH": "retry", "ON_CONTENT_FILTER": "keep",
	}
	want := allKeysWant("")
	want.ExtraBody = nil // file only
	for _, name := range []string{"gpt-oss", "my.model-2"} {
		env := map[string]string{}
		for k, v := range perTeacher {
			env["CHAINEDSQL_"+EnvName(name)+"_"+k] = v
		}
		c := mustLoad(t, "teachers:\n  my.model-2:\n", env)
		e, err := c.Endpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		w := want
		w.Name = name
		checkEndpoint(t, "env for "+name, e, w)
	}

	// Globals: all but MODEL and the prices, which are per teacher only.
	env := map[string]string{}
	for k, v := range perTeacher {
		env["CHAINEDSQL_"+k] = v
	}
	c := mustLoad(t, "teachers:\n  custom:\n", env)
	for _, name := range []string{"deepseek", "custom"} {
		e := raw(t, c, name)
		w := want
		w.Name = name
		w.Model = map[string]string{"deepseek": "deepseek-ai/DeepSeek-V4-Flash", "custom": ""}[name] // vllm's id for the preset
		w.PricePromptPerM, w.PriceCompletionPerM, w.PriceCachedPromptPerM = 0, 0, nil
		checkEndpoint(t, "global env for "+name, e, w)
	}
}

// TestFormsEnvNamesRead pins the exact set of environment variables read: the globals, and
// for every teacher its fields and the API_KEY alias.
func TestFormsEnvNamesRead(t *testing.T) {
	read := map[string]bool{}
	lookup := func(k string) (string, bool) { read[k] = true; return "", false }
	if _, err := loadConfig(writeFile(t, "t.yaml", "teachers:\n  my.model-2:\n"), lookup); err != nil {
		t.Fatal(err)
	}
	fields := []string{"BASE_URL", "MODEL", "API_KEY_ENV", "PROVIDER", "STREAM", "STREAM_IDLE_TIMEOUT",
		"THINKING", "TEMPLATE_OPENS_THINK", "MAX_CONCURRENCY", "RPM", "TPM", "TEMPERATURE", "TOP_P",
		"MAX_TOKENS", "REASONING_EFFORT", "TIMEOUT", "MAX_RETRIES", "BACKOFF_BASE", "BACKOFF_MAX",
		"PRICE_PROMPT_PER_M", "PRICE_COMPLETION_PER_M", "PRICE_CACHED_PROMPT_PER_M",
		"ON_EMPTY", "ON_LENGTH", "ON_CONTENT_FILTER"}
	perTeacherOnly := map[string]bool{"MODEL": true, "PRICE_PROMPT_PER_M": true, "PRICE_COMPLETION_PER_M": true, "PRICE_CACHED_PROMPT_PER_M": true}
	var want []string
	for _, f := range fields {
		if !perTeacherOnly[f] {
			want = append(want, "CHAINEDSQL_"+f)
		}
	}
	for _, n := range []string{"DEEPSEEK", "GLM", "GPT_OSS", "QWEN", "MY_MODEL_2"} {
		for _, f := range append(slices.Clone(fields), "API_KEY") {
			want = append(want, "CHAINEDSQL_"+n+"_"+f)
		}
	}
	slices.Sort(want)
	got := slices.Sorted(func(yield func(string) bool) {
		for k := range read {
			if !yield(k) {
				return
			}
		}
	})
	if !slices.Equal(got, want) {
		t.Errorf("variables read:\n got %v\nwant %v", got, want)
	}
}

// TestFormsEnvValues: how values are read. Empty is unset; numbers, booleans and durations
// are trimmed and take strconv's and time's forms; strings are taken as they are.
func TestFormsEnvValues(t *testing.T) {
	c := mustLoad(t, "", map[string]string{
		"CHAINEDSQL_BASE_URL":             "http://x/v1",
		"CHAINEDSQL_GLM_MODEL":            "",
		"CHAINEDSQL_GLM_RPM":              " 5 ",
		"CHAINEDSQL_GLM_STREAM":           "1",
		"CHAINEDSQL_GLM_THINKING":         "F",
		"CHAINEDSQL_GLM_TEMPERATURE":      "\t1e-1\n",
		"CHAINEDSQL_GLM_TIMEOUT":          " 1m30s",
		"CHAINEDSQL_GLM_REASONING_EFFORT": " high ",
		"CHAINEDSQL_QWEN_MODEL":           " spaced ",
		"CHAINEDSQL_QWEN_STREAM":          "TRUE",
		"CHAINEDSQL_QWEN_MAX_RETRIES":     "-1",
		"chainedsql_deepseek_model":       "lower-case names are not read",
		"CHAINEDSQL_NOSUCH_MODEL":         "does not make a teacher",
	})
	g := raw(t, c, "glm")
	if g.Model != "glm-4.7-flash" || g.RPM != 5 || !g.Stream || g.Thinking == nil || *g.Thinking ||
		g.Temperature == nil || *g.Temperature != 0.1 || g.Timeout != 90*time.Second || g.ReasoningEffort != " high " {
		t.Errorf("glm = %+v", g)
	}
	q := raw(t, c, "qwen")
	if q.Model != " spaced " || !q.Stream || q.MaxRetries != -1 {
		t.Errorf("qwen = %+v", q)
	}
	if _, err := c.Endpoint("qwen"); err == nil || err.Error() != "teacher qwen: max_retries -1 is negative" {
		t.Errorf("negative max_retries from env: %v", err)
	}
	if raw(t, c, "deepseek").Model != "deepseek-v4-flash" {
		t.Error("a lower-case variable was read")
	}
	if got := strings.Join(c.Names(), ","); got != "deepseek,glm,gpt-oss,qwen" {
		t.Errorf("names = %s", got)
	}
}

// TestFormsAPIKeyAlias: CHAINEDSQL_<NAME>_API_KEY, when set and not empty, makes itself the key
// variable of NAME above the file; CHAINEDSQL_<NAME>_API_KEY_ENV wins over it. There is no
// global alias: CHAINEDSQL_API_KEY is the presets' key variable itself.
func TestFormsAPIKeyAlias(t *testing.T) {
	file := "teachers:\n  glm:\n    api_key_env: FILE_KEY\n  local:\n    api_key_env: \"\"\n  qwen:\n    api_key_env: FILE_KEY\n"
	c := mustLoad(t, file, map[string]string{
		"CHAINEDSQL_API_KEY":          "k",
		"CHAINEDSQL_GLM_API_KEY":      "k",
		"CHAINEDSQL_QWEN_API_KEY":     "k",
		"CHAINEDSQL_QWEN_API_KEY_ENV": "QWEN_ENV_KEY",
		"CHAINEDSQL_DEEPSEEK_API_KEY": "",
	})
	for name, want := range map[string]string{
		"glm": "CHAINEDSQL_GLM_API_KEY", "qwen": "QWEN_ENV_KEY", "local": "", "deepseek": DefaultAPIKeyEnv, "gpt-oss": DefaultAPIKeyEnv,
	} {
		if got := raw(t, c, name).APIKeyEnv; got != want {
			t.Errorf("%s: key variable %q, want %q", name, got, want)
		}
	}
	// An empty API_KEY_ENV is unset, so the environment cannot clear a key variable.
	c = mustLoad(t, "", map[string]string{"CHAINEDSQL_GLM_API_KEY_ENV": "", "CHAINEDSQL_API_KEY_ENV": ""})
	if got := raw(t, c, "glm").APIKeyEnv; got != DefaultAPIKeyEnv {
		t.Errorf("empty API_KEY_ENV: %q", got)
	}
}

// TestFormsPrecedence: preset < provider profile < global env < defaults < teacher block <
// per-teacher env, each layer over the one below it, field by field.
func TestFormsPrecedence(t *testing.T) {
	type layers struct {
		global, defaults, teacher, own string // a timeout in each layer, "" = not set
	}
	cases := []struct {
		l    layers
		want time.Duration
	}{
		{layers{}, DefaultTimeout},
		{layers{global: "1m"}, time.Minute},
		{layers{global: "1m", defaults: "2m"}, 2 * time.Minute},
		{layers{global: "1m", defaults: "2m", teacher: "3m"}, 3 * time.Minute},
		{layers{global: "1m", defaults: "2m", teacher: "3m", own: "4m"}, 4 * time.Minute},
		{layers{global: "1m", own: "4m"}, 4 * time.Minute},
		{layers{global: "1m", teacher: "3m"}, 3 * time.Minute},
		{layers{defaults: "2m", own: "4m"}, 4 * time.Minute},
	}
	for _, tc := range cases {
		env := map[string]string{}
		if tc.l.global != "" {
			env["CHAINEDSQL_TIMEOUT"] = tc.l.global
		}
		if tc.l.own != "" {
			env["CHAINEDSQL_GLM_TIMEOUT"] = tc.l.own
		}
		file := "defaults:\n"
		if tc.l.defaults != "" {
			file += "  timeout: " + tc.l.defaults + "\n"
		}
		file += "teachers:\n  glm:\n"
		if tc.l.teacher != "" {
			file += "    timeout: " + tc.l.teacher + "\n"
		}
		c := mustLoad(t, file, env)
		if got := raw(t, c, "glm").Timeout; got != tc.want {
			t.Errorf("%+v: timeout %v, want %v", tc.l, got, tc.want)
		}
		if got := raw(t, c, "qwen").Timeout; tc.l.teacher == "" && tc.l.own == "" && got != tc.want {
			t.Errorf("%+v: qwen timeout %v, want %v", tc.l, got, tc.want)
		}
	}
}

// TestFormsProviderLayer: the profile named by the highest layer that names one applies below
// every explicit field, whichever layer set that field; its model ids apply to presets only.
func TestFormsProviderLayer(t *testing.T) {
	// The highest layer naming a provider picks it.
	for _, tc := range []struct {
		env         map[string]string
		file        string
		provider    string
		base, model string
	}{
		{map[string]string{"CHAINEDSQL_PROVIDER": "vllm"}, "", ProviderVLLM, "http://127.0.0.1:8000/v1", "zai-org/GLM-4.7-Flash"},
		{map[string]string{"CHAINEDSQL_PROVIDER": "vllm"}, "defaults:\n  provider: sglang\n", ProviderSGLang, "http://127.0.0.1:30000/v1", "zai-org/GLM-4.7-Flash"},
		{map[string]string{"CHAINEDSQL_PROVIDER": "vllm"}, "defaults:\n  provider: sglang\nteachers:\n  glm:\n    provider: zai\n", ProviderZAI, "https://api.z.ai/api/paas/v4", "glm-4.7-flash"},
		{map[string]string{"CHAINEDSQL_PROVIDER": "vllm", "CHAINEDSQL_GLM_PROVIDER": "openrouter"}, "teachers:\n  glm:\n    provider: zai\n", ProviderOpenRouter, "https://openrouter.ai/api/v1", "z-ai/glm-4.7-flash"},
		// An explicit "" is no profile, over a lower layer's.
		{nil, "defaults:\n  provider: vllm\n  base_url: http://d/v1\nteachers:\n  glm:\n    provider: \"\"\n", "", "http://d/v1", "glm-4.7-flash"},
	} {
		c := mustLoad(t, tc.file, tc.env)
		g := raw(t, c, "glm")
		if g.Provider != tc.provider || g.BaseURL != tc.base || g.Model != tc.model {
			t.Errorf("%v %q: provider %q base %q model %q, want %q %q %q", tc.env, tc.file, g.Provider, g.BaseURL, g.Model, tc.provider, tc.base, tc.model)
		}
	}
	// Explicit fields in a layer below the one naming the provider still win over the profile.
	c := mustLoad(t, "defaults:\n  base_url: http://d/v1\n  model: any\n  api_key_env: D_KEY\n  stream: false\nteachers:\n  qwen:\n    provider: dashscope\n", nil)
	q := raw(t, c, "qwen")
	if q.Provider != ProviderDashScope || q.BaseURL != "http://d/v1" || q.Model != "any" || q.APIKeyEnv != "D_KEY" || q.Stream {
		t.Errorf("explicit lower fields over the profile: %+v", q)
	}
	c = mustLoad(t, "teachers:\n  qwen:\n    provider: dashscope\n", map[string]string{"CHAINEDSQL_BASE_URL": "http://g/v1", "CHAINEDSQL_API_KEY_ENV": "G_KEY", "CHAINEDSQL_STREAM": "false"})
	q = raw(t, c, "qwen")
	if q.BaseURL != "http://g/v1" || q.APIKeyEnv != "G_KEY" || q.Stream || q.Model != "qwen3.5-35b-a3b" {
		t.Errorf("global env over the profile: %+v", q)
	}
	// The profile's key variable replaces the preset's, even when it is none; its stream default applies.
	c = mustLoad(t, "defaults:\n  provider: vllm\nteachers:\n  custom:\n    model: mine\n  ds:\n    provider: dashscope\n", nil)
	for name, want := range map[string]Endpoint{
		"gpt-oss": {Provider: ProviderVLLM, BaseURL: "http://127.0.0.1:8000/v1", Model: "openai/gpt-oss-120b", APIKeyEnv: ""},
		"custom":  {Provider: ProviderVLLM, BaseURL: "http://127.0.0.1:8000/v1", Model: "mine", APIKeyEnv: ""},
		"ds":      {Provider: ProviderDashScope, BaseURL: "https://dashscope-intl.aliyuncs.com/compatible-mode/v1", APIKeyEnv: "DASHSCOPE_API_KEY", Stream: true},
	} {
		e := raw(t, c, name)
		if e.Provider != want.Provider || e.BaseURL != want.BaseURL || e.Model != want.Model || e.APIKeyEnv != want.APIKeyEnv || e.Stream != want.Stream {
			t.Errorf("%s: %+v", name, e)
		}
	}
}

// TestFormsBaseEndpoints: the presets as loaded with nothing set, and what a teacher the file
// adds starts from (the presets' key variable and retries; the rest New's defaults).
func TestFormsBaseEndpoints(t *testing.T) {
	c := mustLoad(t, "teachers:\n  custom:\n", nil)
	for name, p := range Presets() {
		checkEndpoint(t, "preset "+name, raw(t, c, name), p.withDefaults())
	}
	checkEndpoint(t, "file teacher", raw(t, c, "custom"), Endpoint{
		Name: "custom", APIKeyEnv: DefaultAPIKeyEnv, MaxRetries: DefaultMaxRetries,
		MaxConcurrency: DefaultMaxConcurrency, Timeout: DefaultTimeout, BackoffBase: DefaultBackoffBase,
		BackoffMax: DefaultBackoffMax, StreamIdleTimeout: DefaultStreamIdleTimeout,
		OnEmpty: DefaultOnEmpty, OnLength: DefaultOnLength, OnContentFilter: DefaultOnContentFilter,
		Thinking: ptr(true), // asks for thinking like the presets
	})
	q := raw(t, c, "qwen")
	if !q.TemplateOpensThink || q.Thinking == nil || !*q.Thinking {
		t.Errorf("qwen preset: %+v", q)
	}
}

// TestFormsNullsAndEmpty: a key with a null or empty value is not set (the layer below
// stays); "" is a value; extra_body merges key by key over the layers, a null deleting one.
func TestFormsNullsAndEmpty(t *testing.T) {
	c := mustLoad(t, `
defaults:
  temperature: 0.5
  rpm: 7
  extra_body: {a: 1, b: 2, k: {x: 1}, n: {x: 1}}
teachers:
  glm:
    model: ~
    api_key_env:
    temperature: null
    thinking: ~
    rpm:
    extra_body: {b: null, c: 3, k: {y: 2}, n: {x: null}}
  qwen:
    api_key_env: ""
    extra_body: null
  gpt-oss:
    extra_body: {}
`, nil)
	g := raw(t, c, "glm")
	if g.Model != "glm-4.7-flash" || g.APIKeyEnv != DefaultAPIKeyEnv || g.Temperature == nil || *g.Temperature != 0.5 ||
		g.Thinking == nil || !*g.Thinking || g.RPM != 7 {
		t.Errorf("glm = %+v", g)
	}
	if want := map[string]any{"a": 1, "c": 3, "k": map[string]any{"y": 2}, "n": map[string]any{"x": nil}}; !reflect.DeepEqual(g.ExtraBody, want) {
		t.Errorf("glm extra body %#v, want %#v", g.ExtraBody, want)
	}
	q := raw(t, c, "qwen")
	if q.APIKeyEnv != "" {
		t.Errorf("qwen api_key_env %q", q.APIKeyEnv)
	}
	for _, name := range []string{"qwen", "gpt-oss", "deepseek"} {
		if want := map[string]any{"a": 1, "b": 2, "k": map[string]any{"x": 1}, "n": map[string]any{"x": 1}}; !reflect.DeepEqual(raw(t, c, name).ExtraBody, want) {
			t.Errorf("%s extra body %#v", name, raw(t, c, name).ExtraBody)
		}
	}
	// A teacher block may be empty or null; both add the teacher.
	c = mustLoad(t, "teachers:\n  a:\n  b: {}\n  c: ~\n", nil)
	if got := strings.Join(c.Names(), ","); got != "a,b,c,deepseek,glm,gpt-oss,qwen" {
		t.Errorf("names = %s", got)
	}
}

// TestFormsYAMLForms: the YAML shapes accepted besides plain blocks: anchors, aliases and
// merge keys; YAML 1.1 booleans; integers for numbers, numbers truncated for integers; JSON; empty documents; only the first
// document of several; names that are not strings.
func TestFormsYAMLForms(t *testing.T) {
	c := mustLoad(t, `
defaults:
  temperature: 0.25
teachers:
  a: &base
    base_url: http://a/v1
    model: ma
    rpm: 5
    temperature: 0.5
  b:
    <<: *base
    model: mb
    temperature: ~
  c: *base
  d:
    stream: yes
    thinking: off
    template_opens_think: on
    temperature: 1
    price_prompt_per_m: 2
    max_tokens: 1.5
  123:
    model: numeric
`, nil)
	for name, want := range map[string]struct {
		base, model string
		rpm         int
		temp        *float64
	}{
		"a": {"http://a/v1", "ma", 5, ptr(0.5)},
		"b": {"http://a/v1", "mb", 5, ptr(0.25)}, // the null is not set, as in a plain block
		"c": {"http://a/v1", "ma", 5, ptr(0.5)},
	} {
		e := raw(t, c, name)
		if e.BaseURL != want.base || e.Model != want.model || e.RPM != want.rpm || !reflect.DeepEqual(e.Temperature, want.temp) {
			t.Errorf("%s = %+v", name, e)
		}
	}
	d := raw(t, c, "d")
	if !d.Stream || d.Thinking == nil || *d.Thinking || !d.TemplateOpensThink || *d.Temperature != 1 || d.PricePromptPerM != 2 || d.MaxTokens != 1 {
		t.Errorf("d = %+v", d)
	}
	if raw(t, c, "123").Model != "numeric" {
		t.Errorf("123 = %+v", raw(t, c, "123"))
	}

	c = mustLoad(t, `{"defaults": {"base_url": "http://j/v1", "extra_body": {"k": [1, "two"]}}, "teachers": {"glm": {"rpm": 7, "stream": true}}}`, nil)
	g := raw(t, c, "glm")
	if g.BaseURL != "http://j/v1" || g.RPM != 7 || !g.Stream || !reflect.DeepEqual(g.ExtraBody, map[string]any{"k": []any{1, "two"}}) {
		t.Errorf("JSON: %+v", g)
	}

	for _, file := range []string{"\n", "# only a comment\n", "defaults:\nteachers:\n", "---\n", "---\n---\nteachers:\n  x: {}\n"} {
		c := mustLoad(t, file, nil)
		if got := strings.Join(c.Names(), ","); got != "deepseek,glm,gpt-oss,qwen" {
			t.Errorf("%q: names = %s", file, got)
		}
	}
	c = mustLoad(t, "teachers:\n  x: {}\n---\nteachers:\n  y: {}\n", nil)
	if got := strings.Join(c.Names(), ","); got != "deepseek,glm,gpt-oss,qwen,x" {
		t.Errorf("two documents: names = %s", got)
	}

	for _, name := range []string{"t.yml", "t.json", "teachers", "t.conf"} {
		path := writeFile(t, name, "teachers:\n  x: {}\n")
		c, err := loadConfig(path, envMap(nil))
		if err != nil || c.Path != path || !slices.Contains(c.Names(), "x") {
			t.Errorf("%s: %v", name, err)
		}
	}
	if c, err := loadConfig("", envMap(nil)); err != nil || c.Path != "" {
		t.Errorf("no file: %v", err)
	}
}

// TestFormsErrorMessages pins the message of every kind of bad configuration. yaml.v3 names the
// Go type it decodes into; that name is not part of the contract, so those messages are
// pinned up to it.
func TestFormsErrorMessages(t *testing.T) {
	const P = "PATH"
	cases := []struct {
		name, file string
		env        map[string]string
		want       string // the whole message; a trailing "…" pins a prefix
	}{
		{"unknown teacher key", "teachers:\n  x:\n    modle: m\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: field modle not found in type teachers.…"},
		{"unknown defaults key", "defaults:\n  rmp: 5\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 2: field rmp not found in type teachers.…"},
		{"unknown top-level key", "teacher:\n  x: {}\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 1: field teacher not found in type teachers.…"},
		{"block not a map", "defaults: 5\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 1: cannot unmarshal !!int `5` into teachers.…"},
		{"bad duration", "defaults:\n  timeout: soon\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!str `soon` into time.Duration"},
		{"duration without unit", "defaults:\n  backoff_max: 90\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!int `90` into time.Duration"},
		{"bad int", "teachers:\n  glm:\n    rpm: fast\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `fast` into int"},
		{"quoted int", "teachers:\n  glm:\n    rpm: \"600\"\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `600` into int"},
		{"bad bool", "teachers:\n  glm:\n    stream: maybe\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `maybe` into bool"},
		{"bad optional bool", "teachers:\n  glm:\n    thinking: maybe\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `maybe` into bool"},
		{"bad float", "teachers:\n  glm:\n    temperature: hot\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `hot` into float64"},
		{"bad plain float", "teachers:\n  glm:\n    price_prompt_per_m: cheap\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!str `cheap` into float64"},
		{"map for string", "teachers:\n  glm:\n    model: {a: 1}\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!map into string"},
		{"extra_body not a map", "teachers:\n  glm:\n    extra_body: [1]\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 3: cannot unmarshal !!seq into map[string]interface {}"},
		{"several errors", "defaults:\n  timeout: soon\nteachers:\n  glm:\n    rpm: fast\n    modle: m\n", nil,
			"teachers config PATH: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!str `soon` into time.Duration\n  line 5: cannot unmarshal !!str `fast` into int\n  line 6: field modle not found in type teachers.…"},
		{"duplicate key", "teachers:\n  glm:\n    model: a\n    model: b\n", nil, "teachers config PATH: yaml: unmarshal errors:\n  line 4: mapping key \"model\" already defined at line 3"},
		{"syntax", "teachers:\n  glm:\n    model: [a\n", nil, "teachers config PATH: yaml: line 2: did not find expected ',' or ']'"},
		{"tab indent", "teachers:\n\tglm: {}\n", nil, "teachers config PATH: yaml: line 2: found character that cannot start any token"},
		{"empty name", "teachers:\n  \" \":\n    model: m\n", nil, "teachers config PATH: a teacher has an empty name"},
		{"bad env int", "", map[string]string{"CHAINEDSQL_GLM_RPM": "fast"}, `environment variable CHAINEDSQL_GLM_RPM: want an integer, got "fast"`},
		{"bad env bool", "", map[string]string{"CHAINEDSQL_GLM_THINKING": "maybe"}, `environment variable CHAINEDSQL_GLM_THINKING: want true or false, got "maybe"`},
		{"bad env float", "", map[string]string{"CHAINEDSQL_GLM_TOP_P": "x"}, `environment variable CHAINEDSQL_GLM_TOP_P: want a number, got "x"`},
		{"bad env duration", "", map[string]string{"CHAINEDSQL_GLM_BACKOFF_BASE": "10"}, `environment variable CHAINEDSQL_GLM_BACKOFF_BASE: want a Go duration such as 90s or 10m, got "10"`},
		{"bad global env", "", map[string]string{"CHAINEDSQL_MAX_TOKENS": " 1k "}, `environment variable CHAINEDSQL_MAX_TOKENS: want an integer, got " 1k "`},
		{"bad file teacher env", "teachers:\n  my.t:\n", map[string]string{"CHAINEDSQL_MY_T_STREAM": "yes"}, `environment variable CHAINEDSQL_MY_T_STREAM: want true or false, got "yes"`},
		{"unknown provider", "teachers:\n  qwen:\n    provider: nosuch\n", nil, `teacher qwen: unknown provider "nosuch" (known: dashscope, deepseek, fireworks, ollama, openai, openrouter, sglang, together, vllm, zai)`},
		{"unknown provider env", "", map[string]string{"CHAINEDSQL_GLM_PROVIDER": "Vllm"}, `teacher glm: unknown provider "Vllm" (known: dashscope, deepseek, fireworks, ollama, openai, openrouter, sglang, together, vllm, zai)`},
		// Which error comes first: the file, then the global environment, then the teacher's.
		{"file before env", "defaults:\n  timeout: soon\n", map[string]string{"CHAINEDSQL_RPM": "x"}, "teachers config PATH: yaml: unmarshal errors:\n  line 2: cannot unmarshal !!str `soon` into time.Duration"},
		{"global before teacher", "", map[string]string{"CHAINEDSQL_RPM": "x", "CHAINEDSQL_GLM_RPM": "y"}, `environment variable CHAINEDSQL_RPM: want an integer, got "x"`},
		{"env before provider", "teachers:\n  glm:\n    provider: nosuch\n", map[string]string{"CHAINEDSQL_GLM_RPM": "y"}, `environment variable CHAINEDSQL_GLM_RPM: want an integer, got "y"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := configPath(t, tc.file)
			_, err := loadConfig(path, envMap(tc.env))
			if err == nil {
				t.Fatalf("no error, want %q", tc.want)
			}
			got := err.Error()
			if path != "" {
				got = strings.ReplaceAll(got, path, P)
			}
			if prefix, ok := strings.CutSuffix(tc.want, "…"); ok {
				if !strings.HasPrefix(got, prefix) {
					t.Fatalf("error\n %q\nwant a prefix\n %q", got, prefix)
				}
			} else if got != tc.want {
				t.Fatalf("error\n %q\nwant\n %q", got, tc.want)
			}
		})
	}

	// Two names with one environment form: named in either order.
	path := writeFile(t, "c.yaml", "teachers:\n  gpt_oss:\n    model: m\n")
	_, err := loadConfig(path, envMap(nil))
	a := fmt.Sprintf("teachers config %s: teachers %q and %q share the environment name GPT_OSS; rename one", path, "gpt-oss", "gpt_oss")
	b := fmt.Sprintf("teachers config %s: teachers %q and %q share the environment name GPT_OSS; rename one", path, "gpt_oss", "gpt-oss")
	if err == nil || (err.Error() != a && err.Error() != b) {
		t.Errorf("env name clash: %v", err)
	}
	for _, name := range []string{"t.toml", "T.TOML"} {
		path := filepath.Join(t.TempDir(), name)
		_, err := loadConfig(path, envMap(nil))
		if want := "teachers config " + path + ": TOML is not supported; write the same keys as YAML (see teachers/example.yaml)"; err == nil || err.Error() != want {
			t.Errorf("%s: %v", name, err)
		}
	}
	path = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := loadConfig(path, envMap(nil)); err == nil || err.Error() != "teachers config: open "+path+": no such file or directory" {
		t.Errorf("missing file: %v", err)
	}

	// Endpoint's errors: an unknown name, and validation naming the field and where to set it.
	c := mustLoad(t, "", nil)
	if _, err := c.Endpoint("nope"); err == nil || err.Error() != `unknown teacher "nope" (known from presets: deepseek, glm, gpt-oss, qwen)` {
		t.Errorf("unknown teacher: %v", err)
	}
	if _, err := c.Endpoint("gpt-oss"); err == nil || err.Error() != "teacher gpt-oss: no base URL: set base_url in the config file or CHAINEDSQL_BASE_URL / CHAINEDSQL_GPT_OSS_BASE_URL" {
		t.Errorf("no base URL: %v", err)
	}
	path = writeFile(t, "c.yaml", "defaults:\n  base_url: http://x/v1\nteachers:\n  x:\n    on_empty: later\n")
	c, err = loadConfig(path, envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Endpoint("nope"); err == nil || err.Error() != `unknown teacher "nope" (known from presets and `+path+`: deepseek, glm, gpt-oss, qwen, x)` {
		t.Errorf("unknown teacher with a file: %v", err)
	}
	if _, err := c.Endpoint("x"); err == nil || err.Error() != "teacher x: no model id: set model in the config file or CHAINEDSQL_X_MODEL" {
		t.Errorf("no model: %v", err)
	}
	c = mustLoad(t, "defaults:\n  base_url: http://x/v1\nteachers:\n  x:\n    model: m\n    on_empty: later\n", nil)
	if _, err := c.Endpoint("x"); err == nil || err.Error() != `teacher x: on_empty "later": want keep, retry or fail` {
		t.Errorf("bad policy: %v", err)
	}
}

// TestFormsEndpointCopies: each Endpoint call returns its own copy of ExtraBody, Thinking,
// Temperature and TopP, and teachers never share them.
func TestFormsEndpointCopies(t *testing.T) {
	c := mustLoad(t, "defaults:\n  base_url: http://x/v1\n  temperature: 0.5\n  extra_body: {a: 1}\n", nil)
	e, err := c.Endpoint("glm")
	if err != nil {
		t.Fatal(err)
	}
	e.ExtraBody["a"] = 2
	*e.Thinking = false
	*e.Temperature = 9
	e2, _ := c.Endpoint("glm")
	if e2.ExtraBody["a"] != 1 || !*e2.Thinking || *e2.Temperature != 0.5 {
		t.Errorf("Endpoint shares memory between calls: %+v", e2)
	}
	d, _ := c.Endpoint("deepseek")
	if d.ExtraBody["a"] != 1 || *d.Temperature != 0.5 || !*d.Thinking {
		t.Errorf("teachers share memory: %+v", d)
	}
}

// TestFormsExampleValues: example.yaml loads with the values it shows.
func TestFormsExampleValues(t *testing.T) {
	c, err := loadConfig("example.yaml", envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	base := Endpoint{
		BaseURL: "https://api.example-provider.com/v1", APIKeyEnv: DefaultAPIKeyEnv, Timeout: 10 * time.Minute,
		MaxRetries: 6, BackoffBase: 500 * time.Millisecond, BackoffMax: 30 * time.Second,
		OnEmpty: OnRetry, OnLength: OnKeep, OnContentFilter: OnFail,
		MaxConcurrency: DefaultMaxConcurrency, StreamIdleTimeout: DefaultStreamIdleTimeout, Thinking: ptr(true),
	}
	g := base
	g.Name, g.Model, g.MaxConcurrency, g.RPM, g.TPM, g.ReasoningEffort = "gpt-oss", "gpt-oss-120b", 32, 600, 2000000, "high"
	g.Temperature, g.PricePromptPerM, g.PriceCompletionPerM = ptr(1.0), 0.10, 0.50
	ds := base
	ds.Name, ds.Model, ds.MaxTokens = "deepseek", "deepseek-v4-flash", 8192
	glm := base
	glm.Name, glm.Model, glm.TopP = "glm", "glm-4.7-flash", ptr(0.95)
	q := base
	q.Name, q.Model, q.TemplateOpensThink = "qwen", "qwen3.5-35b-a3b", true
	l := base
	l.Name, l.BaseURL, l.Model, l.APIKeyEnv, l.MaxConcurrency, l.Temperature, l.Thinking = "local-vllm", "http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B", "", 64, ptr(0.6), ptr(true)
	l.ExtraBody = map[string]any{"top_k": 20, "chat_template_kwargs": map[string]any{"enable_thinking": true}}
	for _, want := range []Endpoint{g, ds, glm, q, l} {
		e, err := c.Endpoint(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		checkEndpoint(t, "example.yaml "+want.Name, e, want)
	}
}
