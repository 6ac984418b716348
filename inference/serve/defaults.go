package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// Defaults are the sampling values of a chat completion that leaves the field out (or sends
// null): the request's value first, then these, as vLLM applies its default sampling
// parameters.
type Defaults struct {
	// Temperature 0 is greedy decoding.
	Temperature float64
	// TopP 1 keeps every token.
	TopP float64
	// TopK 0 keeps every token.
	TopK int
}

// NeutralDefaults are OpenAI's defaults and vLLM's own (its --generation-config vllm):
// temperature 1, top_p 1, no top-k cut.
var NeutralDefaults = Defaults{Temperature: 1, TopP: 1}

// String lists d as the start-up log says it: "temperature 0.7, top_p 0.8, top_k 20" ("top_k
// off" for no cut).
func (d Defaults) String() string {
	k := "off"
	if d.TopK > 0 {
		k = strconv.Itoa(d.TopK)
	}
	return fmt.Sprintf("temperature %g, top_p %g, top_k %s", d.Temperature, d.TopP, k)
}

// GenerationConfigFile is the name of a checkpoint's generation settings.
const GenerationConfigFile = "generation_config.json"

// GenerationConfig is what a checkpoint's generation_config.json recommends for sampling, read
// as vLLM's --generation-config auto reads it (with transformers 5: every field the file sets,
// null counting as unset): the fields it takes as defaults, those it takes that this server
// cannot honour, and do_sample, which it does not read.
type GenerationConfig struct {
	// Path is the file read ("" when the directory has none).
	Path string
	// Temperature, TopP and TopK are the file's, nil when it has none. A top_k of -1 (Hugging
	// Face's and vLLM's "no cut") reads as 0.
	Temperature, TopP *float64
	TopK              *int
	// MaxNewTokens is Hugging Face's name for the default max_tokens of a reply.
	MaxNewTokens *int
	// Unsupported are the fields vLLM applies that this server does not, each with its value
	// ("repetition_penalty 1.05"); a neutral value (repetition_penalty 1, min_p 0) is left out.
	Unsupported []string
	// DoSample is the file's do_sample (nil when absent): Hugging Face's generate is greedy
	// when it is false, vLLM ignores it, and so does this server.
	DoSample *bool
}

// ReadGenerationConfig reads dir's generation_config.json; a directory without one gives a
// zero GenerationConfig. A field of the wrong type or out of range is an error naming it.
func ReadGenerationConfig(dir string) (GenerationConfig, error) {
	path := filepath.Join(dir, GenerationConfigFile)
	js, err := regular.ReadJSON(path)
	if errors.Is(err, fs.ErrNotExist) {
		return GenerationConfig{}, nil
	}
	if err != nil {
		return GenerationConfig{}, fmt.Errorf("serve: %w", err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return GenerationConfig{}, fmt.Errorf("serve: %s: %w", path, err)
	}
	g := GenerationConfig{Path: path}
	field := func(name string, v any) (bool, error) {
		b, ok := raw[name]
		if !ok || string(b) == "null" {
			return false, nil
		}
		if iv, ok := v.(*int); ok { // a whole number written as 20.0 is one
			var f float64
			if err := json.Unmarshal(b, &f); err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<31 {
				*iv = int(f)
				return true, nil
			}
		}
		if err := json.Unmarshal(b, v); err != nil {
			var num json.Number
			if kind(v) != "boolean" && json.Unmarshal(b, &num) == nil {
				f, ferr := num.Float64()
				if kind(v) == "number" || ferr != nil || f == math.Trunc(f) { // past float64, or a whole number past int
					return false, fmt.Errorf("serve: %s: %s %s is out of range", path, name, b)
				}
			}
			return false, fmt.Errorf("serve: %s: %s: %s is not a %s", path, name, b, kind(v))
		}
		return true, nil
	}
	var temp, topP, rep, minP float64
	var topK, maxNew int
	var doSample bool
	for _, f := range []struct {
		name string
		v    any
		set  func()
		bad  func() bool
	}{
		{"temperature", &temp, func() { g.Temperature = &temp }, func() bool { return !(temp >= 0 && temp <= 2) }}, // a request's range
		{"top_p", &topP, func() { g.TopP = &topP }, func() bool { return !(topP > 0 && topP <= 1) }},
		{"top_k", &topK, func() { topK = max(topK, 0); g.TopK = &topK }, func() bool { return topK < -1 }},
		{"max_new_tokens", &maxNew, func() { g.MaxNewTokens = &maxNew }, func() bool { return maxNew < 1 }},
		{"repetition_penalty", &rep, func() {
			if rep != 1 {
				g.Unsupported = append(g.Unsupported, fmt.Sprintf("repetition_penalty %g", rep))
			}
		}, func() bool { return false }},
		{"min_p", &minP, func() {
			if minP != 0 {
				g.Unsupported = append(g.Unsupported, fmt.Sprintf("min_p %g", minP))
			}
		}, func() bool { return false }},
		{"do_sample", &doSample, func() { g.DoSample = &doSample }, func() bool { return false }},
	} {
		ok, err := field(f.name, f.v)
		if err != nil {
			return GenerationConfig{}, err
		}
		if !ok {
			continue
		}
		if f.bad() {
			return GenerationConfig{}, fmt.Errorf("serve: %s: %s %s is out of range", path, f.name, raw[f.name])
		}
		f.set()
	}
	return g, nil
}

// kind names the JSON type v decodes.
func kind(v any) string {
	switch v.(type) {
	case *bool:
		return "boolean"
	case *int:
		return "whole number"
	}
	return "number"
}

// Apply returns d with the fields g sets in their place.
func (g GenerationConfig) Apply(d Defaults) Defaults {
	if g.Temperature != nil {
		d.Temperature = *g.Temperature
	}
	if g.TopP != nil {
		d.TopP = *g.TopP
	}
	if g.TopK != nil {
		d.TopK = *g.TopK
	}
	return d
}

// Taken lists the fields g sets that this server takes as defaults, as "temperature 0.7"
// ("max_new_tokens 512" among them).
func (g GenerationConfig) Taken() []string {
	var out []string
	if g.Temperature != nil {
		out = append(out, fmt.Sprintf("temperature %g", *g.Temperature))
	}
	if g.TopP != nil {
		out = append(out, fmt.Sprintf("top_p %g", *g.TopP))
	}
	if g.TopK != nil {
		out = append(out, fmt.Sprintf("top_k %d", *g.TopK))
	}
	if g.MaxNewTokens != nil {
		out = append(out, fmt.Sprintf("max_new_tokens %d", *g.MaxNewTokens))
	}
	return out
}

// Note says, for the start-up log, what g gave: the file's fields taken, those not applied
// and a do_sample false, which is not read either.
func (g GenerationConfig) Note() string {
	if g.Path == "" {
		return "the model directory has no " + GenerationConfigFile
	}
	var b strings.Builder
	if taken := g.Taken(); len(taken) > 0 {
		fmt.Fprintf(&b, "from %s: %s", g.Path, strings.Join(taken, ", "))
	} else {
		fmt.Fprintf(&b, "%s sets none of temperature, top_p, top_k, max_new_tokens", g.Path)
	}
	if len(g.Unsupported) > 0 {
		fmt.Fprintf(&b, "; not applied (this server has no such setting): %s", strings.Join(g.Unsupported, ", "))
	}
	if g.DoSample != nil && !*g.DoSample {
		b.WriteString("; do_sample false is not read (nor by vLLM): a request asks for greedy decoding with temperature 0")
	}
	return b.String()
}
