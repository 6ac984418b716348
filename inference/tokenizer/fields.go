package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
)

// checkFields refuses any key of the JSON object raw that is not in allowed, naming it with its
// path where (e.g. "pre_tokenizer.pretokenizers[1]"). tokenizer.json components are decoded
// into structs, which would silently drop a field this package does not implement.
func checkFields(raw json.RawMessage, where string, allowed ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s: want a JSON object: %w", where, err)
	}
	return checkKeys(m, where, allowed...)
}

// checkKeys refuses any key of m that is not in allowed.
func checkKeys(m map[string]json.RawMessage, where string, allowed ...string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s: unknown field %q (supported: %v)", where, k, allowed)
		}
	}
	return nil
}

// parseFile decodes tokenizer.json, refusing fields this package does not implement in the
// file itself, its model and each added token. Truncation and padding change what encode
// returns, so they must be null. The large parts (vocab, merges) are decoded once.
func parseFile(data []byte) (*tokenizerFile, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if err := checkKeys(top, "tokenizer.json", "version", "truncation", "padding", "added_tokens",
		"normalizer", "pre_tokenizer", "post_processor", "decoder", "model"); err != nil {
		return nil, err
	}
	if !isNull(top["truncation"]) {
		return nil, fmt.Errorf("truncation: unsupported %s (want null)", top["truncation"])
	}
	if !isNull(top["padding"]) {
		return nil, fmt.Errorf("padding: unsupported %s (want null)", top["padding"])
	}
	tf := &tokenizerFile{Normalizer: top["normalizer"], PreTokenizer: top["pre_tokenizer"],
		PostProcessor: top["post_processor"], Decoder: top["decoder"]}
	var added []json.RawMessage
	if !isNull(top["added_tokens"]) {
		if err := json.Unmarshal(top["added_tokens"], &added); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
	}
	for i, raw := range added {
		where := fmt.Sprintf("added_tokens[%d]", i)
		if err := checkFields(raw, where, "id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"); err != nil {
			return nil, err
		}
		var a addedTokenJSON
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		switch {
		case a.SingleWord:
			return nil, fmt.Errorf("%s (%q): single_word=true is not supported", where, a.Content)
		case a.LStrip:
			return nil, fmt.Errorf("%s (%q): lstrip=true is not supported", where, a.Content)
		case a.RStrip:
			return nil, fmt.Errorf("%s (%q): rstrip=true is not supported", where, a.Content)
		}
		tf.AddedTokens = append(tf.AddedTokens, a)
	}
	if isNull(top["model"]) {
		return nil, fmt.Errorf("model: missing")
	}
	var model map[string]json.RawMessage
	if err := json.Unmarshal(top["model"], &model); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if err := checkKeys(model, "model", "type", "dropout", "unk_token", "continuing_subword_prefix",
		"end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"); err != nil {
		return nil, err
	}
	m := &tf.Model
	m.Merges = model["merges"]
	for _, f := range []struct {
		key string
		dst any
	}{{"type", &m.Type}, {"dropout", &m.Dropout}, {"unk_token", &m.UnkToken},
		{"continuing_subword_prefix", &m.ContinuingSubwordPrefix}, {"end_of_word_suffix", &m.EndOfWordSuffix},
		{"byte_fallback", &m.ByteFallback}, {"ignore_merges", &m.IgnoreMerges}, {"vocab", &m.Vocab}} {
		if raw, ok := model[f.key]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return nil, fmt.Errorf("model.%s: %w", f.key, err)
			}
		}
	}
	return tf, nil
}
