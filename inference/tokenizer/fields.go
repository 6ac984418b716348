package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
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
// returns, so they must be null. The vocab and merges are read by jscan, the rest by
// encoding/json.
func parseFile(data []byte) (*tokenizerFile, error) {
	tf := &tokenizerFile{}
	top := map[string]json.RawMessage{}
	var model map[string]json.RawMessage
	s := &jscan{b: data}
	err := s.object(func(key string) error {
		if key == "model" && model == nil {
			model = map[string]json.RawMessage{}
			top[key] = json.RawMessage("{}")
			return parseModel(s, &tf.Model, model)
		}
		raw, err := s.raw()
		top[key] = raw
		return err
	})
	if err == nil && !s.end() {
		err = s.errorf("data after the top-level object")
	}
	if err != nil {
		return nil, err
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
	tf.Normalizer, tf.PreTokenizer = top["normalizer"], top["pre_tokenizer"]
	tf.PostProcessor, tf.Decoder = top["post_processor"], top["decoder"]
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
	if model == nil {
		return nil, fmt.Errorf("model: missing")
	}
	if err := checkKeys(model, "model", "type", "dropout", "unk_token", "continuing_subword_prefix",
		"end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"); err != nil {
		return nil, err
	}
	m := &tf.Model
	for _, f := range []struct {
		key string
		dst any
	}{{"type", &m.Type}, {"dropout", &m.Dropout}, {"unk_token", &m.UnkToken},
		{"continuing_subword_prefix", &m.ContinuingSubwordPrefix}, {"end_of_word_suffix", &m.EndOfWordSuffix},
		{"byte_fallback", &m.ByteFallback}, {"ignore_merges", &m.IgnoreMerges}} {
		if raw, ok := model[f.key]; ok {
			if err := json.Unmarshal(raw, f.dst); err != nil {
				return nil, fmt.Errorf("model.%s: %w", f.key, err)
			}
		}
	}
	return tf, nil
}

// parseModel reads the model object at s: vocab and merges into m, every other field's raw
// value into fields (vocab and merges get placeholders, for the key check).
func parseModel(s *jscan, m *modelJSON, fields map[string]json.RawMessage) error {
	if s.peek() != '{' {
		return fmt.Errorf("model: want a JSON object")
	}
	return s.object(func(key string) error {
		switch key {
		case "vocab":
			fields[key] = json.RawMessage("{}")
			m.Vocab = make(map[string]int, 1<<17)
			var elemErr error
			err := s.object(func(tok string) error {
				id, err := s.int()
				if err != nil {
					elemErr = fmt.Errorf("model.vocab[%q]: %w", tok, err)
					return elemErr
				}
				m.Vocab[tok] = id
				return nil
			})
			if elemErr != nil {
				return elemErr
			}
			if err != nil {
				return fmt.Errorf("model.vocab: %w", err)
			}
			return nil
		case "merges":
			fields[key] = json.RawMessage("[]")
			m.Merges = m.Merges[:0]
			var elemErr error
			err := s.array(func(i int) error { elemErr = parseMerge(s, i, m); return elemErr })
			if elemErr != nil {
				return elemErr
			}
			if err != nil {
				return fmt.Errorf("model.merges: %w", err)
			}
			return nil
		}
		raw, err := s.raw()
		fields[key] = raw
		return err
	})
}

// parseMerge reads merge i, "a b" or ["a", "b"].
func parseMerge(s *jscan, i int, m *modelJSON) error {
	if s.peek() == '"' {
		str, err := s.str()
		if err != nil {
			return err
		}
		k := strings.IndexByte(str, ' ')
		if k < 0 || strings.IndexByte(str[k+1:], ' ') >= 0 {
			return fmt.Errorf("model.merges[%d] %q: want two tokens separated by one space", i, str)
		}
		m.Merges = append(m.Merges, [2]string{str[:k], str[k+1:]})
		return nil
	}
	var pair [2]string
	n := 0
	if err := s.array(func(int) error {
		t, err := s.str()
		if n < len(pair) {
			pair[n] = t
		}
		n++
		return err
	}); err != nil {
		return fmt.Errorf("model.merges[%d]: want \"a b\" or [\"a\", \"b\"]: %w", i, err)
	}
	if n != 2 {
		return fmt.Errorf("model.merges[%d]: want two tokens, not %d", i, n)
	}
	m.Merges = append(m.Merges, pair)
	return nil
}
