package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/chainedsql/chainedsql/internal/regular"
)

// qwen2Pattern is the Split regex of the Qwen2/Qwen2.5 pre-tokenizer. The scanner in pretok.go
// implements exactly this pattern; Load refuses any other pattern rather than guess.
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// tokenizerFile is the subset of Hugging Face's tokenizer.json that this package reads.
type tokenizerFile struct {
	AddedTokens   []addedTokenJSON
	Normalizer    json.RawMessage
	PreTokenizer  json.RawMessage
	PostProcessor json.RawMessage
	Decoder       json.RawMessage
	Model         modelJSON
}

type addedTokenJSON struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

type modelJSON struct {
	Type                    string         `json:"type"`
	Dropout                 *float64       `json:"dropout"`
	UnkToken                *string        `json:"unk_token"`
	ContinuingSubwordPrefix *string        `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string        `json:"end_of_word_suffix"`
	ByteFallback            bool           `json:"byte_fallback"`
	IgnoreMerges            bool           `json:"ignore_merges"`
	Vocab                   map[string]int `json:"vocab"`
	Merges                  [][2]string    `json:"-"`
}

type typed struct {
	Type string `json:"type"`
}

type splitJSON struct {
	Type    string `json:"type"`
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior string `json:"behavior"`
	Invert   bool   `json:"invert"`
}

type byteLevelJSON struct {
	Type           string `json:"type"`
	AddPrefixSpace bool   `json:"add_prefix_space"`
	TrimOffsets    bool   `json:"trim_offsets"`
	UseRegex       *bool  `json:"use_regex"`
}

type tokenizerConfig struct {
	AddedTokensDecoder map[string]addedTokenJSON `json:"added_tokens_decoder"`
}

// Load reads a Hugging Face tokenizer: path is a tokenizer.json file or a directory holding one.
// A tokenizer_config.json next to it, when present, contributes added tokens listed in its
// added_tokens_decoder that tokenizer.json lacks, and their special flags. Only the byte-level
// BPE family used by Qwen2/Qwen2.5 is supported (BPE model, optional NFC normaliser, the Qwen2
// Split pre-tokenizer followed by ByteLevel, ByteLevel decoder); anything else is refused with
// an error naming the file and the unsupported part.
func Load(path string) (*Tokenizer, error) { return LoadWith(path, nil) }

// LoadWith is Load reading tokenizer.json and tokenizer_config.json through o (nil: plainly),
// e.g. one confined to a server's weights root (regular.Confine).
func LoadWith(path string, o *regular.Opener) (*Tokenizer, error) {
	file := path
	if st, err := o.Stat(path); err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	} else if st.IsDir() {
		file = filepath.Join(path, "tokenizer.json")
	}
	data, err := o.ReadJSON(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	tf, err := parseFile(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", file, err)
	}
	var cfg *tokenizerConfig
	cfgPath := filepath.Join(filepath.Dir(file), "tokenizer_config.json")
	if cdata, err := o.ReadJSON(cfgPath); err == nil {
		cfg = new(tokenizerConfig)
		if err := json.Unmarshal(cdata, cfg); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: malformed JSON: %w", cfgPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t, err := build(tf, cfg)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", file, err)
	}
	return t, nil
}

func isNull(raw json.RawMessage) bool {
	r := bytes.TrimSpace(raw)
	return len(r) == 0 || string(r) == "null"
}

func build(tf *tokenizerFile, cfg *tokenizerConfig) (*Tokenizer, error) {
	m := &tf.Model
	if m.Type != "BPE" {
		if m.Type == "" {
			return nil, errors.New(`model.type: missing (want "BPE")`)
		}
		return nil, fmt.Errorf("model.type: unsupported %q (want \"BPE\")", m.Type)
	}
	if m.Dropout != nil && *m.Dropout != 0 {
		return nil, fmt.Errorf("model.dropout: unsupported %v (want null or 0)", *m.Dropout)
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" {
		return nil, fmt.Errorf("model.continuing_subword_prefix: unsupported %q (want \"\" or null)", *m.ContinuingSubwordPrefix)
	}
	if m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, fmt.Errorf("model.end_of_word_suffix: unsupported %q (want \"\" or null)", *m.EndOfWordSuffix)
	}
	if m.ByteFallback {
		return nil, errors.New("model.byte_fallback: unsupported true (byte-level vocabularies need none)")
	}
	if len(m.Vocab) == 0 {
		return nil, errors.New("model.vocab: empty")
	}
	t := &Tokenizer{ignoreMerges: m.IgnoreMerges}
	if err := t.parseNormalizer(tf.Normalizer, "normalizer"); err != nil {
		return nil, err
	}
	if err := parsePreTokenizer(tf.PreTokenizer); err != nil {
		return nil, err
	}
	if err := parseByteLevel(tf.Decoder, "decoder"); err != nil {
		return nil, err
	}
	if !isNull(tf.PostProcessor) {
		if err := parseByteLevel(tf.PostProcessor, "post_processor"); err != nil {
			return nil, err
		}
	}
	if err := t.buildVocab(m.Vocab); err != nil {
		return nil, err
	}
	if err := t.buildMerges(m.Merges); err != nil {
		return nil, err
	}
	if err := t.buildAdded(tf.AddedTokens, cfg); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tokenizer) parseNormalizer(raw json.RawMessage, where string) error {
	if isNull(raw) {
		return nil
	}
	var n struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	switch n.Type {
	case "NFC":
		t.nfc = true
		return checkFields(raw, where, "type")
	case "Sequence":
		if err := checkFields(raw, where, "type", "normalizers"); err != nil {
			return err
		}
		for i, sub := range n.Normalizers {
			if err := t.parseNormalizer(sub, fmt.Sprintf("%s.normalizers[%d]", where, i)); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("%s: unsupported type %q (want NFC, a Sequence of NFC, or null)", where, n.Type)
}

func parsePreTokenizer(raw json.RawMessage) error {
	const where = "pre_tokenizer"
	if isNull(raw) {
		return errors.New("pre_tokenizer: missing (want the Qwen2 Split + ByteLevel sequence)")
	}
	var seq struct {
		Type          string            `json:"type"`
		Pretokenizers []json.RawMessage `json:"pretokenizers"`
	}
	if err := json.Unmarshal(raw, &seq); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if seq.Type != "Sequence" || len(seq.Pretokenizers) != 2 {
		return fmt.Errorf("%s: unsupported type %q with %d pretokenizers (want a Sequence of the Qwen2 Split and ByteLevel)",
			where, seq.Type, len(seq.Pretokenizers))
	}
	if err := checkFields(raw, where, "type", "pretokenizers"); err != nil {
		return err
	}
	w0, w1 := where+".pretokenizers[0]", where+".pretokenizers[1]"
	var sp splitJSON
	if err := json.Unmarshal(seq.Pretokenizers[0], &sp); err != nil {
		return fmt.Errorf("%s: %w", w0, err)
	}
	if err := checkFields(seq.Pretokenizers[0], w0, "type", "pattern", "behavior", "invert"); err != nil {
		return err
	}
	switch {
	case sp.Type != "Split":
		return fmt.Errorf("%s: unsupported type %q (want Split)", w0, sp.Type)
	case sp.Pattern.Regex == nil || *sp.Pattern.Regex != qwen2Pattern:
		return fmt.Errorf("%s.pattern: unsupported (want {\"Regex\": %q}, the Qwen2 pattern)", w0, qwen2Pattern)
	case sp.Behavior != "Isolated":
		return fmt.Errorf("%s.behavior: unsupported %q (want Isolated)", w0, sp.Behavior)
	case sp.Invert:
		return fmt.Errorf("%s.invert: unsupported true (want false)", w0)
	}
	var bl byteLevelJSON
	if err := json.Unmarshal(seq.Pretokenizers[1], &bl); err != nil {
		return fmt.Errorf("%s: %w", w1, err)
	}
	if err := checkFields(seq.Pretokenizers[1], w1, "type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
		return err
	}
	switch {
	case bl.Type != "ByteLevel":
		return fmt.Errorf("%s: unsupported type %q (want ByteLevel)", w1, bl.Type)
	case bl.AddPrefixSpace:
		return fmt.Errorf("%s.add_prefix_space: unsupported true (want false)", w1)
	case bl.UseRegex == nil || *bl.UseRegex:
		return fmt.Errorf("%s.use_regex: unsupported true or missing (want false)", w1)
	}
	return nil
}

// parseByteLevel checks a ByteLevel decoder or post-processor. Neither changes ids; for the
// offsets given here, trim_offsets must be false.
func parseByteLevel(raw json.RawMessage, where string) error {
	if isNull(raw) {
		return fmt.Errorf("%s: missing (want ByteLevel)", where)
	}
	var d byteLevelJSON
	if err := json.Unmarshal(raw, &d); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if d.Type != "ByteLevel" {
		return fmt.Errorf("%s: unsupported type %q (want ByteLevel)", where, d.Type)
	}
	if err := checkFields(raw, where, "type", "add_prefix_space", "trim_offsets", "use_regex"); err != nil {
		return err
	}
	if d.AddPrefixSpace {
		return fmt.Errorf("%s.add_prefix_space: unsupported true (want false)", where)
	}
	if d.TrimOffsets {
		return fmt.Errorf("%s.trim_offsets: unsupported true (want false)", where)
	}
	return nil
}

func (t *Tokenizer) buildVocab(vocab map[string]int) error {
	maxID := -1
	for tok, id := range vocab {
		if id < 0 {
			return fmt.Errorf("model.vocab: token %q has negative id %d", tok, id)
		}
		if id > maxID {
			maxID = id
		}
	}
	if maxID >= 1<<31-1 {
		return fmt.Errorf("model.vocab: id %d too large", maxID)
	}
	t.tokens = make([]string, maxID+1)
	t.bytesOf = make([]string, maxID+1)
	t.known = make([]bool, maxID+1)
	if t.ignoreMerges {
		t.byteVocab = make(map[string]int32, len(vocab))
	}
	t.strVocab = vocab // owned from here on
	for tok, id := range vocab {
		if t.known[id] {
			return fmt.Errorf("model.vocab: id %d is used by both %q and %q", id, t.tokens[id], tok)
		}
		raw, ok := byteLevelDecode(tok)
		if !ok {
			return fmt.Errorf("model.vocab: token %q (id %d) is not byte-level encoded", tok, id)
		}
		t.known[id] = true
		t.tokens[id] = tok
		t.bytesOf[id] = raw
		if t.byteVocab != nil {
			t.byteVocab[raw] = int32(id)
		}
	}
	for b := 0; b < 256; b++ {
		id, ok := vocab[string(byteToRune[b])]
		if !ok {
			return fmt.Errorf("model.vocab: lacks the byte-level token %q for byte 0x%02x", string(byteToRune[b]), b)
		}
		t.byteID[b] = int32(id)
	}
	return nil
}

// buildMerges builds the merge map: pair of ids -> rank<<32 | id of the merged token.
func (t *Tokenizer) buildMerges(pairs [][2]string) error {
	t.merges = make(map[uint64]uint64, len(pairs))
	var ab []byte
	for rank, pair := range pairs {
		a, b := pair[0], pair[1]
		ia, ok := t.strVocab[a]
		if !ok {
			return fmt.Errorf("model.merges[%d] (%q %q) names unknown token %q", rank, a, b, a)
		}
		ib, ok := t.strVocab[b]
		if !ok {
			return fmt.Errorf("model.merges[%d] (%q %q) names unknown token %q", rank, a, b, b)
		}
		ab = append(append(ab[:0], a...), b...)
		im, ok := t.strVocab[string(ab)]
		if !ok {
			return fmt.Errorf("model.merges[%d] (%q %q) produces unknown token %q", rank, a, b, ab)
		}
		// A repeated merge takes its last rank: HF collects the merges into a hash map in order.
		t.merges[pairKey(int32(ia), int32(ib))] = uint64(rank)<<32 | uint64(im)
	}
	return nil
}

func (t *Tokenizer) buildAdded(list []addedTokenJSON, cfg *tokenizerConfig) error {
	byID := make(map[int]*addedToken)
	for _, a := range list {
		if a.ID < 0 {
			return fmt.Errorf("added_tokens: token %q has negative id %d", a.Content, a.ID)
		}
		if a.Content == "" {
			return fmt.Errorf("added_tokens: token %d has empty content", a.ID)
		}
		if prev, ok := byID[a.ID]; ok && prev.content != a.Content {
			return fmt.Errorf("added_tokens: token id %d is used by both %q and %q", a.ID, prev.content, a.Content)
		}
		byID[a.ID] = &addedToken{id: a.ID, content: a.Content, singleWord: a.SingleWord,
			lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
	}
	if cfg != nil {
		for key, a := range cfg.AddedTokensDecoder {
			var id int
			if _, err := fmt.Sscan(key, &id); err != nil || id < 0 {
				return fmt.Errorf("tokenizer_config.json: added_tokens_decoder key %q is not a token id", key)
			}
			if a.Content == "" {
				return fmt.Errorf("tokenizer_config.json: added token %d has empty content", id)
			}
			if a.SingleWord || a.LStrip || a.RStrip {
				return fmt.Errorf("tokenizer_config.json: added token %d (%q): single_word, lstrip and rstrip are not supported", id, a.Content)
			}
			if prev, ok := byID[id]; ok {
				if prev.content != a.Content {
					return fmt.Errorf("tokenizer_config.json: added token %d is %q but tokenizer.json has %q", id, a.Content, prev.content)
				}
				prev.special = prev.special || a.Special
				continue
			}
			byID[id] = &addedToken{id: id, content: a.Content, singleWord: a.SingleWord,
				lstrip: a.LStrip, rstrip: a.RStrip, normalized: a.Normalized, special: a.Special}
		}
	}
	ids := make([]int, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	t.addedByContent = make(map[string]int, len(ids))
	for _, id := range ids {
		a := byID[id]
		if id < len(t.known) && t.known[id] && t.tokens[id] != a.content {
			// HF lets an added token shadow a vocab id; the added content wins for decoding.
			t.strVocab[a.content] = id
		}
		t.added = append(t.added, *a)
		t.addedByContent[a.content] = id
	}
	maxID := len(t.tokens) - 1
	if len(ids) > 0 && ids[len(ids)-1] > maxID {
		maxID = ids[len(ids)-1]
	}
	t.addedAt = make([]int32, maxID+1)
	for i := range t.addedAt {
		t.addedAt[i] = -1
	}
	for i := range t.added {
		t.addedAt[t.added[i].id] = int32(i)
	}
	t.vocabSize = maxID + 1
	t.decodeBytes = make([]string, maxID+1)
	for id := 0; id <= maxID; id++ {
		if i := t.addedAt[id]; i >= 0 {
			t.decodeBytes[id] = decoderBytes(t.added[i].content)
		} else if id < len(t.known) && t.known[id] {
			t.decodeBytes[id] = t.bytesOf[id]
		}
	}
	t.rawMatcher = newMatcher(t.added, false)
	t.normMatcher = newMatcher(t.added, true)
	return nil
}
