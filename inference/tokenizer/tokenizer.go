// Package tokenizer is a byte-level BPE tokenizer that loads a Hugging Face tokenizer.json of the
// Qwen2/Qwen2.5 family and gives exactly the ids of Hugging Face's tokenizers library for
// encode(text, add_special_tokens=False): added tokens split out first, NFC normalisation, the
// Qwen2 pre-tokenizer split, byte-level BPE, and the ByteLevel decoder. EncodeSplitSpecial is the
// same with split_special_tokens=True (special tokens' text encoded as plain text).
//
// A Tokenizer is immutable after Load and safe for concurrent use.
package tokenizer

import (
	"sync"
	"unicode/utf8"
)

// Tokenizer encodes text to token ids and decodes ids back to text.
type Tokenizer struct {
	nfc          bool
	ignoreMerges bool

	// BPE model.
	tokens    []string         // id -> byte-level token string ("" where unused)
	bytesOf   []string         // id -> raw bytes of the token
	known     []bool           // id is in the model vocab
	byteVocab map[string]int32 // raw bytes -> id, only with ignore_merges
	strVocab  map[string]int   // byte-level string (and added content) -> id
	byteID    [256]int32       // single byte -> id
	merges    map[uint64]uint64

	// Added tokens.
	added          []addedToken
	addedAt        []int32 // id -> index into added, or -1
	addedByContent map[string]int
	rawMatcher     *matcher // added tokens with normalized=false, matched on the raw text
	normMatcher    *matcher // added tokens with normalized=true, matched on normalised text

	vocabSize   int
	decodeBytes []string // id -> bytes the decoder emits

	mu   sync.Mutex
	free []*state // idle encode states, each with its word cache
}

type addedToken struct {
	id                         int
	content                    string
	singleWord, lstrip, rstrip bool
	normalized, special        bool
}

// Offset is a half-open byte range [Start, End) of the text passed to EncodeOffsets.
type Offset struct{ Start, End int }

// Encode returns the token ids of text, as Hugging Face's encode(text, add_special_tokens=False):
// no BOS/EOS is added, but added and special tokens written in the text (e.g. <|im_start|>) are
// recognised.
func (t *Tokenizer) Encode(text string) []int {
	st := t.getState()
	ids := make([]int, 0, len(text)/3+4)
	ids = t.encode(st, text, ids, nil, false)
	t.putState(st)
	return ids
}

// EncodeSplitSpecial returns the token ids of text as Hugging Face's encode(text,
// add_special_tokens=False) with split_special_tokens=True: the text of a token marked special
// (e.g. <|im_end|>, <|endoftext|>) is encoded as ordinary text, byte-level BPE like the text
// around it, so the ids hold no control token. Added tokens not marked special (Qwen2.5's
// <tool_call>) are still one id each, as in HF. Text with no special token's text in it gets
// the ids of Encode.
func (t *Tokenizer) EncodeSplitSpecial(text string) []int {
	st := t.getState()
	ids := make([]int, 0, len(text)/3+4)
	ids = t.encode(st, text, ids, nil, true)
	t.putState(st)
	return ids
}

// AppendEncode appends the ids of text to dst and returns the extended slice.
func (t *Tokenizer) AppendEncode(dst []int, text string) []int {
	st := t.getState()
	dst = t.encode(st, text, dst, nil, false)
	t.putState(st)
	return dst
}

// EncodeOffsets returns the ids of text (as Encode) and, for each token, the byte range of text
// it came from. The ranges are contiguous and cover text: the first starts at 0, each starts
// where the previous ends, the last ends at len(text). Where the text needed no normalisation,
// text[Start:End] is exactly the bytes of the token (even when a token holds part of a UTF-8
// character); where NFC rewrote a stretch of text, that whole original stretch is given to the
// first token touching it and the other tokens inside it get empty ranges.
func (t *Tokenizer) EncodeOffsets(text string) ([]int, []Offset) {
	st := t.getState()
	ids := make([]int, 0, len(text)/3+4)
	offs := make([]Offset, 0, len(text)/3+4)
	ids = t.encode(st, text, ids, &offs, false)
	t.putState(st)
	return ids, offs
}

// Decode returns the text of ids as HF's ByteLevel decoder does: the bytes of all tokens
// concatenated, with each maximal ill-formed UTF-8 subsequence replaced by U+FFFD. Ids outside
// the vocabulary are skipped, as HF does.
func (t *Tokenizer) Decode(ids []int) string {
	var buf []byte
	n := 0
	for _, id := range ids {
		if id >= 0 && id < len(t.decodeBytes) {
			n += len(t.decodeBytes[id])
		}
	}
	buf = make([]byte, 0, n)
	for _, id := range ids {
		if id >= 0 && id < len(t.decodeBytes) {
			buf = append(buf, t.decodeBytes[id]...)
		}
	}
	return DecodeBytes(buf)
}

// DecodeBytes returns b as text as Decode does the bytes of its tokens: each maximal
// ill-formed UTF-8 subsequence replaced by U+FFFD. No such subsequence reaches past a byte that
// starts a character, so where b[:i] does not end in a character that more bytes could complete,
// DecodeBytes(b) is DecodeBytes(b[:i]) followed by DecodeBytes(b[i:]).
func DecodeBytes(b []byte) string {
	if validASCIIOrUTF8(b) {
		return string(b)
	}
	return string(appendLossy(make([]byte, 0, len(b)+8), b))
}

// TokenBytes returns the raw bytes token id stands for (an added token's content, or the
// decoded bytes of a vocab token; possibly part of a UTF-8 character), or "" for unknown ids.
func (t *Tokenizer) TokenBytes(id int) string {
	if id < 0 || id >= len(t.decodeBytes) {
		return ""
	}
	return t.decodeBytes[id]
}

// TokenID returns the id of tok, written as in tokenizer.json: the byte-level form of a vocab
// token (e.g. "Ġthe") or an added token's content (e.g. "<|im_end|>").
func (t *Tokenizer) TokenID(tok string) (int, bool) {
	if id, ok := t.addedByContent[tok]; ok {
		return id, true
	}
	id, ok := t.strVocab[tok]
	return id, ok
}

// Token returns the string form of id as in tokenizer.json (byte-level form for vocab tokens,
// content for added tokens), or "" for ids outside the vocabulary.
func (t *Tokenizer) Token(id int) string {
	if id < 0 || id >= t.vocabSize {
		return ""
	}
	if i := t.addedAt[id]; i >= 0 {
		return t.added[i].content
	}
	if id < len(t.tokens) {
		return t.tokens[id]
	}
	return ""
}

// VocabSize returns one more than the largest id, vocab and added tokens included (151665 for
// Qwen2.5; the model's embedding matrix may be padded larger).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// SpecialIDs returns a fresh map from the content of each added token marked special (e.g.
// <|im_start|>, <|im_end|>, <|endoftext|>) to its id.
func (t *Tokenizer) SpecialIDs() map[string]int {
	m := make(map[string]int)
	for _, a := range t.added {
		if a.special {
			m[a.content] = a.id
		}
	}
	return m
}

// AddedIDs returns a fresh map from the content of every added token (special or not, e.g.
// <tool_call>) to its id.
func (t *Tokenizer) AddedIDs() map[string]int {
	m := make(map[string]int, len(t.added))
	for _, a := range t.added {
		m[a.content] = a.id
	}
	return m
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int) bool {
	if id < 0 || id >= len(t.addedAt) {
		return false
	}
	i := t.addedAt[id]
	return i >= 0 && t.added[i].special
}

func validASCIIOrUTF8(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] >= 0x80 {
			return utf8.Valid(b[i:])
		}
	}
	return true
}
