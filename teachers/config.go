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

// fileConfig is the YAML document.
type fileConfig struct {
	Defaults layer            `yaml:"defaults"`
	Teachers map[string]layer `yaml:"teachers"`
}

// A layer is one source of an endpoint's settings (the environment's globals, the file's
// defaults, a teacher's block, the teacher's environment): the values it gives, held in an
// Endpoint, and which fields it gives. A field it does not give leaves the layer below.
type layer struct {
	values Endpoint
	set    []bool // by index into fields; nil: sets nothing
}

// field is one configurable Endpoint field as its struct tags declare it (see Endpoint).
type field struct {
	index  int    // in Endpoint
	key    string // the YAML key
	env    string // the environment suffix, the key upper-cased; "" for a file-only field
	global bool   // also read as CHAINEDSQL_<SUFFIX>, a default for every teacher
}

// fields are the configurable fields in Endpoint's order, read once from its tags;
// providerField and apiKeyEnvField index the two that loadConfig handles itself.
var (
	fields         = endpointFields()
	providerField  = fieldIndex("provider")
	apiKeyEnvField = fieldIndex("api_key_env")
)

// endpointFields reads the fields from Endpoint's tags.
func endpointFields() []field {
	t := reflect.TypeFor[Endpoint]()
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		key, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		f := field{index: i, key: key, env: strings.ToUpper(key), global: true}
		switch sf.Tag.Get("env") {
		case "-":
			f.env, f.global = "", false
		case "teacher":
			f.global = false
		case "":
		default:
			panic("teachers: Endpoint." + sf.Name + ": unknown env tag " + sf.Tag.Get("env"))
		}
		if f.env != "" {
			// A type parseEnv cannot read fails here, at start-up, rather than on use.
			if err := parseEnv(reflect.New(sf.Type).Elem(), "0"); errors.Is(err, errUnsupported) {
				panic("teachers: Endpoint." + sf.Name + ": " + err.Error())
			}
		}
		fs = append(fs, f)
	}
	return fs
}

// fieldIndex is the index in fields of the field with YAML key key.
func fieldIndex(key string) int {
	for i, f := range fields {
		if f.key == key {
			return i
		}
	}
	panic("teachers: no Endpoint field with yaml key " + key)
}

// has reports whether l gives fields[i].
func (l *layer) has(i int) bool { return i < len(l.set) && l.set[i] }

// mark records that l gives fields[i].
func (l *layer) mark(i int) {
	if l.set == nil {
		l.set = make([]bool, len(fields))
	}
	l.set[i] = true
}

// UnmarshalYAML decodes a block straight onto l.values and records which keys it gives a value:
// not a key whose value is null (nor one a merge key brings in under an explicit null, which
// yaml.v3 lets win). It is yaml.v3's older form of the hook on purpose: its unmarshal runs in the
// file's own decoder, so an unknown key is still refused (KnownFields) and reported with its
// line, where a yaml.Node's Decode would accept any key.
func (l *layer) UnmarshalYAML(unmarshal func(any) error) error {
	if err := unmarshal(&l.values); err != nil {
		return err
	}
	var keys map[string]yaml.Node // the block's keys, merge keys resolved as for l.values
	if err := unmarshal(&keys); err != nil {
		return err
	}
	for i, f := range fields {
		if v, ok := keys[f.key]; ok && !isNull(&v) {
			l.mark(i)
		}
	}
	return nil
}

// isNull reports whether n, followed through aliases, is a null.
func isNull(n *yaml.Node) bool {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n.ShortTag() == "!!null"
}

// apply overrides e with the fields l gives. ExtraBody keys are merged (a null value deletes
// one); pointer fields are copied, so that endpoints never share them.
func (l *layer) apply(e *Endpoint) {
	dst, src := reflect.ValueOf(e).Elem(), reflect.ValueOf(&l.values).Elem()
	for i, f := range fields {
		if !l.has(i) {
			continue
		}
		d, s := dst.Field(f.index), src.Field(f.index)
		switch {
		case s.Kind() == reflect.Map:
			if s.Len() == 0 {
				continue
			}
			merged := reflect.MakeMapWithSize(d.Type(), d.Len()+s.Len())
			for it := d.MapRange(); it.Next(); {
				merged.SetMapIndex(it.Key(), it.Value())
			}
			for it := s.MapRange(); it.Next(); {
				if v := it.Value(); v.IsNil() {
					merged.SetMapIndex(it.Key(), reflect.Value{})
				} else {
					merged.SetMapIndex(it.Key(), v)
				}
			}
			d.Set(merged)
		case s.Kind() == reflect.Pointer && !s.IsNil():
			c := reflect.New(s.Type().Elem())
			c.Elem().Set(s.Elem())
			d.Set(c)
		default:
			d.Set(s)
		}
	}
}

// errUnsupported marks a field type parseEnv cannot read.
var errUnsupported = errors.New("type not readable from the environment")

// parseEnv sets dst from the environment value v: strings as they are; numbers, booleans and
// durations trimmed; pointers to a new value.
func parseEnv(dst reflect.Value, v string) error {
	if dst.Kind() == reflect.Pointer {
		p := reflect.New(dst.Type().Elem())
		if err := parseEnv(p.Elem(), v); err != nil {
			return err
		}
		dst.Set(p)
		return nil
	}
	t := strings.TrimSpace(v)
	switch {
	case dst.Type() == reflect.TypeFor[time.Duration]():
		d, err := time.ParseDuration(t)
		if err != nil {
			return fmt.Errorf("want a Go duration such as 90s or 10m, got %q", v)
		}
		dst.SetInt(int64(d))
	case dst.Kind() == reflect.String:
		dst.SetString(v)
	case dst.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(t)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		dst.SetBool(b)
	case dst.Kind() == reflect.Int:
		n, err := strconv.Atoi(t)
		if err != nil {
			return fmt.Errorf("want an integer, got %q", v)
		}
		dst.SetInt(int64(n))
	case dst.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return fmt.Errorf("want a number, got %q", v)
		}
		dst.SetFloat(f)
	default:
		return fmt.Errorf("%w: %s", errUnsupported, dst.Type())
	}
	return nil
}

// envLayer reads the variables prefix+SUFFIX of the fields (only the global ones when global).
// Empty values count as unset.
func envLayer(prefix string, global bool, lookup func(string) (string, bool)) (layer, error) {
	var l layer
	dst := reflect.ValueOf(&l.values).Elem()
	for i, f := range fields {
		if f.env == "" || (global && !f.global) {
			continue
		}
		name := prefix + f.env
		v, ok := lookup(name)
		if !ok || v == "" {
			continue
		}
		if err := parseEnv(dst.Field(f.index), v); err != nil {
			return l, fmt.Errorf("environment variable %s: %w", name, err)
		}
		l.mark(i)
	}
	return l, nil
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
	global, err := envLayer(EnvPrefix, true, lookup)
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
		own, err := envLayer(prefix, false, lookup)
		if err != nil {
			return nil, err
		}
		if !own.has(apiKeyEnvField) {
			if v, ok := lookup(prefix + "API_KEY"); ok && v != "" {
				own.values.APIKeyEnv = prefix + "API_KEY"
				own.mark(apiKeyEnvField)
			}
		}
		layers := []layer{global, fc.Defaults, fc.Teachers[n], own} // general to specific
		// The provider profile, named by the most specific layer that names one, goes under
		// all explicit fields, whichever layer set them.
		for i := len(layers) - 1; i >= 0; i-- {
			if layers[i].has(providerField) {
				prof, err := ProfileOf(layers[i].values.Provider)
				if err != nil {
					return nil, fmt.Errorf("teacher %s: %w", n, err)
				}
				prof.applyDefaults(&e, n)
				break
			}
		}
		for i := range layers {
			layers[i].apply(&e)
		}
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
