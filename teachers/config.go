package teachers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// EnvPrefix starts every environment variable the configuration reads.
const EnvPrefix = "CHAINEDSQL_"

// Config is the set of known teacher endpoints: the presets, overridden and extended by a YAML
// file and environment variables (see the package documentation for the layering).
type Config struct {
	// Path is the file the config was read from; "" when there was none.
	Path      string
	endpoints map[string]Endpoint
}

// patch is one layer of overrides: nil fields leave the value below unchanged.
type patch struct {
	BaseURL               *string        `yaml:"base_url"`
	Model                 *string        `yaml:"model"`
	APIKeyEnv             *string        `yaml:"api_key_env"`
	Provider              *string        `yaml:"provider"`
	Stream                *bool          `yaml:"stream"`
	StreamIdleTimeout     *time.Duration `yaml:"stream_idle_timeout"`
	Thinking              *bool          `yaml:"thinking"`
	TemplateOpensThink    *bool          `yaml:"template_opens_think"`
	PriceCachedPromptPerM *float64       `yaml:"price_cached_prompt_per_m"`
	MaxConcurrency        *int           `yaml:"max_concurrency"`
	RPM                   *int           `yaml:"rpm"`
	TPM                   *int           `yaml:"tpm"`
	Temperature           *float64       `yaml:"temperature"`
	TopP                  *float64       `yaml:"top_p"`
	MaxTokens             *int           `yaml:"max_tokens"`
	ReasoningEffort       *string        `yaml:"reasoning_effort"`
	ExtraBody             map[string]any `yaml:"extra_body"`
	Timeout               *time.Duration `yaml:"timeout"`
	MaxRetries            *int           `yaml:"max_retries"`
	BackoffBase           *time.Duration `yaml:"backoff_base"`
	BackoffMax            *time.Duration `yaml:"backoff_max"`
	PricePromptPerM       *float64       `yaml:"price_prompt_per_m"`
	PriceCompletionPerM   *float64       `yaml:"price_completion_per_m"`
	OnEmpty               *string        `yaml:"on_empty"`
	OnLength              *string        `yaml:"on_length"`
	OnContentFilter       *string        `yaml:"on_content_filter"`
}

// fileConfig is the YAML document.
type fileConfig struct {
	Defaults patch            `yaml:"defaults"`
	Teachers map[string]patch `yaml:"teachers"`
}

// apply overrides e with the set fields of p. ExtraBody keys are merged (a null value deletes).
func (p *patch) apply(e *Endpoint) {
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	seti := func(dst *int, src *int) {
		if src != nil {
			*dst = *src
		}
	}
	setd := func(dst *time.Duration, src *time.Duration) {
		if src != nil {
			*dst = *src
		}
	}
	setf := func(dst *float64, src *float64) {
		if src != nil {
			*dst = *src
		}
	}
	set(&e.BaseURL, p.BaseURL)
	set(&e.Model, p.Model)
	set(&e.APIKeyEnv, p.APIKeyEnv)
	set(&e.Provider, p.Provider)
	if p.Stream != nil {
		e.Stream = *p.Stream
	}
	setd(&e.StreamIdleTimeout, p.StreamIdleTimeout)
	if p.TemplateOpensThink != nil {
		e.TemplateOpensThink = *p.TemplateOpensThink
	}
	for _, f := range []struct{ dst, src **bool }{{&e.Thinking, &p.Thinking}} {
		if *f.src != nil {
			*f.dst = clonePtr(*f.src)
		}
	}
	for _, f := range []struct{ dst, src **float64 }{{&e.PriceCachedPromptPerM, &p.PriceCachedPromptPerM}, {&e.Temperature, &p.Temperature}, {&e.TopP, &p.TopP}} {
		if *f.src != nil {
			*f.dst = clonePtr(*f.src)
		}
	}
	seti(&e.MaxConcurrency, p.MaxConcurrency)
	seti(&e.RPM, p.RPM)
	seti(&e.TPM, p.TPM)
	seti(&e.MaxTokens, p.MaxTokens)
	set(&e.ReasoningEffort, p.ReasoningEffort)
	if len(p.ExtraBody) > 0 {
		merged := make(map[string]any, len(e.ExtraBody)+len(p.ExtraBody))
		for k, v := range e.ExtraBody {
			merged[k] = v
		}
		for k, v := range p.ExtraBody {
			if v == nil {
				delete(merged, k)
			} else {
				merged[k] = v
			}
		}
		e.ExtraBody = merged
	}
	setd(&e.Timeout, p.Timeout)
	seti(&e.MaxRetries, p.MaxRetries)
	setd(&e.BackoffBase, p.BackoffBase)
	setd(&e.BackoffMax, p.BackoffMax)
	setf(&e.PricePromptPerM, p.PricePromptPerM)
	setf(&e.PriceCompletionPerM, p.PriceCompletionPerM)
	set(&e.OnEmpty, p.OnEmpty)
	set(&e.OnLength, p.OnLength)
	set(&e.OnContentFilter, p.OnContentFilter)
}

// merge sets into p every field o sets (o wins), so that one patch stands for a stack of
// layers. ExtraBody keys are merged, a nil value kept so that apply still deletes the key.
func (p *patch) merge(o patch) {
	eb := p.ExtraBody
	if len(o.ExtraBody) > 0 {
		merged := make(map[string]any, len(eb)+len(o.ExtraBody))
		for k, v := range eb {
			merged[k] = v
		}
		for k, v := range o.ExtraBody {
			merged[k] = v
		}
		eb = merged
	}
	pv, ov := reflect.ValueOf(p).Elem(), reflect.ValueOf(o)
	for i := 0; i < ov.NumField(); i++ {
		if f := ov.Field(i); f.Kind() == reflect.Pointer && !f.IsNil() {
			pv.Field(i).Set(f)
		}
	}
	p.ExtraBody = eb
}

// envField is one field settable from the environment.
type envField struct {
	suffix string
	set    func(p *patch, v string) error
	global bool // also read as CHAINEDSQL_<SUFFIX> (a default for every teacher)
}

func envString(dst func(p *patch) **string) func(*patch, string) error {
	return func(p *patch, v string) error { *dst(p) = &v; return nil }
}

func envInt(dst func(p *patch) **int) func(*patch, string) error {
	return func(p *patch, v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		*dst(p) = &n
		return nil
	}
}

func envBool(dst func(p *patch) **bool) func(*patch, string) error {
	return func(p *patch, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		*dst(p) = &b
		return nil
	}
}

func envFloat(dst func(p *patch) **float64) func(*patch, string) error {
	return func(p *patch, v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", v)
		}
		*dst(p) = &f
		return nil
	}
}

func envDuration(dst func(p *patch) **time.Duration) func(*patch, string) error {
	return func(p *patch, v string) error {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return fmt.Errorf("want a Go duration such as 90s or 10m, got %q", v)
		}
		*dst(p) = &d
		return nil
	}
}

var envFields = []envField{
	{"BASE_URL", envString(func(p *patch) **string { return &p.BaseURL }), true},
	{"MODEL", envString(func(p *patch) **string { return &p.Model }), false},
	{"API_KEY_ENV", envString(func(p *patch) **string { return &p.APIKeyEnv }), true},
	{"PROVIDER", envString(func(p *patch) **string { return &p.Provider }), true},
	{"STREAM", envBool(func(p *patch) **bool { return &p.Stream }), true},
	{"STREAM_IDLE_TIMEOUT", envDuration(func(p *patch) **time.Duration { return &p.StreamIdleTimeout }), true},
	{"THINKING", envBool(func(p *patch) **bool { return &p.Thinking }), true},
	{"TEMPLATE_OPENS_THINK", envBool(func(p *patch) **bool { return &p.TemplateOpensThink }), true},
	{"MAX_CONCURRENCY", envInt(func(p *patch) **int { return &p.MaxConcurrency }), true},
	{"RPM", envInt(func(p *patch) **int { return &p.RPM }), true},
	{"TPM", envInt(func(p *patch) **int { return &p.TPM }), true},
	{"TEMPERATURE", envFloat(func(p *patch) **float64 { return &p.Temperature }), true},
	{"TOP_P", envFloat(func(p *patch) **float64 { return &p.TopP }), true},
	{"MAX_TOKENS", envInt(func(p *patch) **int { return &p.MaxTokens }), true},
	{"REASONING_EFFORT", envString(func(p *patch) **string { return &p.ReasoningEffort }), true},
	{"TIMEOUT", envDuration(func(p *patch) **time.Duration { return &p.Timeout }), true},
	{"MAX_RETRIES", envInt(func(p *patch) **int { return &p.MaxRetries }), true},
	{"BACKOFF_BASE", envDuration(func(p *patch) **time.Duration { return &p.BackoffBase }), true},
	{"BACKOFF_MAX", envDuration(func(p *patch) **time.Duration { return &p.BackoffMax }), true},
	{"PRICE_PROMPT_PER_M", envFloat(func(p *patch) **float64 { return &p.PricePromptPerM }), false},
	{"PRICE_COMPLETION_PER_M", envFloat(func(p *patch) **float64 { return &p.PriceCompletionPerM }), false},
	{"PRICE_CACHED_PROMPT_PER_M", envFloat(func(p *patch) **float64 { return &p.PriceCachedPromptPerM }), false},
	{"ON_EMPTY", envString(func(p *patch) **string { return &p.OnEmpty }), true},
	{"ON_LENGTH", envString(func(p *patch) **string { return &p.OnLength }), true},
	{"ON_CONTENT_FILTER", envString(func(p *patch) **string { return &p.OnContentFilter }), true},
}

// envPatch reads the variables prefix+SUFFIX into a patch. Empty values count as unset.
func envPatch(prefix string, global bool, lookup func(string) (string, bool)) (patch, error) {
	var p patch
	for _, f := range envFields {
		if global && !f.global {
			continue
		}
		name := prefix + f.suffix
		v, ok := lookup(name)
		if !ok || v == "" {
			continue
		}
		if err := f.set(&p, v); err != nil {
			return p, fmt.Errorf("environment variable %s: %w", name, err)
		}
	}
	return p, nil
}

// LoadConfig builds the configuration from the presets, the YAML file at path ("" = none) and the
// environment. A path ending in .toml is refused (TOML is not supported; YAML and JSON are).
func LoadConfig(path string) (*Config, error) {
	return loadConfig(path, os.LookupEnv)
}

func loadConfig(path string, lookup func(string) (string, bool)) (*Config, error) {
	var fc fileConfig
	if path != "" {
		if strings.EqualFold(filepath.Ext(path), ".toml") {
			return nil, fmt.Errorf("teachers config %s: TOML is not supported; write the same keys as YAML (see teachers/example.yaml)", path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("teachers config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("teachers config %s: %w", path, err)
		}
		for name := range fc.Teachers {
			if strings.TrimSpace(name) == "" {
				return nil, fmt.Errorf("teachers config %s: a teacher has an empty name", path)
			}
		}
	}
	global, err := envPatch(EnvPrefix, true, lookup)
	if err != nil {
		return nil, err
	}
	base := Presets()
	eps := make(map[string]Endpoint, len(base)+len(fc.Teachers))
	names := make(map[string]bool)
	for n := range base {
		names[n] = true
	}
	for n := range fc.Teachers {
		names[n] = true
	}
	envNames := make(map[string]string) // EnvName → teacher, to refuse ambiguous names
	for n := range names {
		en := EnvName(n)
		if other, dup := envNames[en]; dup {
			return nil, fmt.Errorf("teachers config %s: teachers %q and %q share the environment name %s; rename one", path, other, n, en)
		}
		envNames[en] = n
		e, ok := base[n]
		if !ok {
			e = Endpoint{Name: n, APIKeyEnv: DefaultAPIKeyEnv, MaxRetries: DefaultMaxRetries}
		}
		prefix := EnvPrefix + en + "_"
		own, err := envPatch(prefix, false, lookup)
		if err != nil {
			return nil, err
		}
		if own.APIKeyEnv == nil {
			if v, ok := lookup(prefix + "API_KEY"); ok && v != "" {
				keyVar := prefix + "API_KEY"
				own.APIKeyEnv = &keyVar
			}
		}
		// The layers are merged first so that the provider profile (named by any of them) goes
		// under all explicit fields, whichever layer set them.
		var layers patch
		layers.merge(global)
		layers.merge(fc.Defaults)
		if p, ok := fc.Teachers[n]; ok {
			layers.merge(p)
		}
		layers.merge(own)
		if layers.Provider != nil {
			prof, err := ProfileOf(*layers.Provider)
			if err != nil {
				return nil, fmt.Errorf("teacher %s: %w", n, err)
			}
			prof.applyDefaults(&e, n)
		}
		layers.apply(&e)
		e.Name = n
		eps[n] = e.withDefaults()
	}
	return &Config{Path: path, endpoints: eps}, nil
}

// Names lists the known teachers in order.
func (c *Config) Names() []string { return sortedNames(c.endpoints) }

// Endpoint returns the named teacher, validated, with defaults filled in. An unknown name is an
// error listing the known ones.
func (c *Config) Endpoint(name string) (Endpoint, error) {
	e, ok := c.endpoints[name]
	if !ok {
		where := "presets"
		if c.Path != "" {
			where = "presets and " + c.Path
		}
		return Endpoint{}, fmt.Errorf("unknown teacher %q (known from %s: %s)", name, where, strings.Join(c.Names(), ", "))
	}
	if err := e.Validate(); err != nil {
		return Endpoint{}, err
	}
	return e.withDefaults(), nil
}
