// Package qwen2 is the Qwen2 causal language model (Qwen2ForCausalLM) on the CPU backend: it loads
// a Hugging Face model directory and runs batched prefill and decode over per-sequence KV caches.
package qwen2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// Config is the part of config.json the model needs (Hugging Face Qwen2Config field names).
type Config struct {
	Architectures         []string        `json:"architectures"`
	ModelType             string          `json:"model_type"`
	HiddenSize            int             `json:"hidden_size"`
	IntermediateSize      int             `json:"intermediate_size"`
	NumHiddenLayers       int             `json:"num_hidden_layers"`
	NumAttentionHeads     int             `json:"num_attention_heads"`
	NumKeyValueHeads      int             `json:"num_key_value_heads"`
	HeadDim               int             `json:"head_dim"` // optional; hidden_size/num_attention_heads when 0
	VocabSize             int             `json:"vocab_size"`
	MaxPositionEmbeddings int             `json:"max_position_embeddings"`
	RMSNormEps            float64         `json:"rms_norm_eps"`
	RopeTheta             float64         `json:"rope_theta"`
	TieWordEmbeddings     bool            `json:"tie_word_embeddings"`
	HiddenAct             string          `json:"hidden_act"`
	UseSlidingWindow      bool            `json:"use_sliding_window"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	BOSTokenID            *int            `json:"bos_token_id"`
	EOSTokenID            TokenIDs        `json:"eos_token_id"`
}

// TokenIDs is a token id field that JSON may give as one number or a list.
type TokenIDs []int

// UnmarshalJSON accepts null, a number or an array of numbers.
func (t *TokenIDs) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*t = nil
		return nil
	}
	if len(b) > 0 && b[0] == '[' {
		var ids []int
		if err := json.Unmarshal(b, &ids); err != nil {
			return err
		}
		*t = ids
		return nil
	}
	var id int
	if err := json.Unmarshal(b, &id); err != nil {
		return fmt.Errorf("token id %s is neither a number nor a list: %w", b, err)
	}
	*t = TokenIDs{id}
	return nil
}

// ReadConfig reads and checks config.json at path, filling Hugging Face defaults (rope_theta
// 10000, rms_norm_eps 1e-6, max_position_embeddings 32768, head_dim hidden/heads).
func ReadConfig(path string) (*Config, error) { return readConfig(path, nil) }

// readConfig is ReadConfig reading path through o (nil: plainly).
func readConfig(path string, o *regular.Opener) (*Config, error) {
	js, err := o.ReadJSON(path)
	if err != nil {
		return nil, fmt.Errorf("qwen2: %w", err)
	}
	var c Config
	if err := json.Unmarshal(js, &c); err != nil {
		return nil, fmt.Errorf("qwen2 %s: %w", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("qwen2 %s: %w", path, err)
	}
	return &c, nil
}

func (c *Config) check() error {
	if !slices.Contains(c.Architectures, "Qwen2ForCausalLM") && !(len(c.Architectures) == 0 && c.ModelType == "qwen2") {
		return fmt.Errorf("architectures %v (model_type %q) is not Qwen2ForCausalLM", c.Architectures, c.ModelType)
	}
	if c.HiddenAct != "" && c.HiddenAct != "silu" {
		return fmt.Errorf("hidden_act %q is not supported (only silu)", c.HiddenAct)
	}
	if c.UseSlidingWindow {
		return errors.New("use_sliding_window true is not supported")
	}
	if s := bytes.TrimSpace(c.RopeScaling); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		return fmt.Errorf("rope_scaling %s is not supported", s)
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"hidden_size", c.HiddenSize}, {"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers}, {"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads}, {"vocab_size", c.VocabSize},
	} {
		if f.v <= 0 {
			return fmt.Errorf("%s is %d, want a positive number", f.name, f.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fmt.Errorf("num_key_value_heads %d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim == 0 {
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			return fmt.Errorf("num_attention_heads %d does not divide hidden_size %d", c.NumAttentionHeads, c.HiddenSize)
		}
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
	}
	if c.HeadDim < 0 || c.HeadDim%2 != 0 {
		return fmt.Errorf("head_dim %d is not a positive even number (RoPE rotates pairs)", c.HeadDim)
	}
	if c.RopeTheta == 0 {
		c.RopeTheta = 10000
	}
	if c.RopeTheta < 0 {
		return fmt.Errorf("rope_theta %v is negative", c.RopeTheta)
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.RMSNormEps < 0 {
		return fmt.Errorf("rms_norm_eps %v is negative", c.RMSNormEps)
	}
	if c.MaxPositionEmbeddings == 0 {
		c.MaxPositionEmbeddings = 32768
	}
	if c.MaxPositionEmbeddings < 0 {
		return fmt.Errorf("max_position_embeddings %d is negative", c.MaxPositionEmbeddings)
	}
	return nil
}

// GenerationConfig is the part of generation_config.json the model reports.
type GenerationConfig struct {
	BOSTokenID *int     `json:"bos_token_id"`
	EOSTokenID TokenIDs `json:"eos_token_id"`
	PadTokenID *int     `json:"pad_token_id"`
}

// readGenerationConfig reads path through o (nil: plainly); a missing file gives (nil, nil).
func readGenerationConfig(path string, o *regular.Opener) (*GenerationConfig, error) {
	js, err := o.ReadJSON(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("qwen2: %w", err)
	}
	var g GenerationConfig
	if err := json.Unmarshal(js, &g); err != nil {
		return nil, fmt.Errorf("qwen2 %s: %w", path, err)
	}
	return &g, nil
}
