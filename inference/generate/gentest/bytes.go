package gentest

import (
	"slices"
	"strings"

	"github.com/chainedsql/chainedsql/inference/tokenizer"
)

// ByteTokenizer is a byte-level tokenizer for tests: ids 0-255 are bytes, 256-258 the ChatML
// special tokens <|im_start|>, <|im_end|> and <|endoftext|>. A Toy over it needs a vocabulary of
// at least ByteVocab.
type ByteTokenizer struct{}

// ByteVocab is the vocabulary size of ByteTokenizer.
const ByteVocab = 259

// Ids of ByteTokenizer's special tokens.
const (
	ImStart   = 256
	ImEnd     = 257
	EndOfText = 258
)

var specials = []string{"<|im_start|>", "<|im_end|>", "<|endoftext|>"}

// Encode returns the bytes of text as ids, special tokens recognised.
func (ByteTokenizer) Encode(text string) []int {
	var ids []int
	for len(text) > 0 {
		matched := false
		for i, s := range specials {
			if strings.HasPrefix(text, s) {
				ids = append(ids, ImStart+i)
				text = text[len(s):]
				matched = true
				break
			}
		}
		if !matched {
			ids = append(ids, int(text[0]))
			text = text[1:]
		}
	}
	return ids
}

// EncodeSplitSpecial returns the bytes of text as ids, special tokens' text included.
func (ByteTokenizer) EncodeSplitSpecial(text string) []int {
	ids := make([]int, len(text))
	for i := range len(text) {
		ids[i] = int(text[i])
	}
	return ids
}

// Decode returns the text of ids as the Qwen2.5 tokenizer decodes bytes (tokenizer.DecodeBytes:
// each maximal ill-formed UTF-8 subsequence replaced by U+FFFD).
func (ByteTokenizer) Decode(ids []int) string {
	var b []byte
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b = append(b, byte(id))
		case id >= ImStart && id < ByteVocab:
			b = append(b, specials[id-ImStart]...)
		}
	}
	return tokenizer.DecodeBytes(b)
}

// TokenBytes returns the byte id stands for, or a special token's text ("" outside the
// vocabulary).
func (ByteTokenizer) TokenBytes(id int) string {
	switch {
	case id >= 0 && id < 256:
		return string([]byte{byte(id)})
	case id >= ImStart && id < ByteVocab:
		return specials[id-ImStart]
	}
	return ""
}

// TokenID returns the id of a special token.
func (ByteTokenizer) TokenID(tok string) (int, bool) {
	for i, s := range specials {
		if s == tok {
			return ImStart + i, true
		}
	}
	return 0, false
}

// Scripted returns a Toy over ByteTokenizer that answers every ChatML assistant turn with reply
// and then <|im_end|>.
func Scripted(reply string) *Toy {
	ids := make([]int, len(reply))
	for i := range len(reply) {
		ids[i] = int(reply[i])
	}
	return ScriptedIDs(ByteVocab, ByteTokenizer{}.Encode("<|im_start|>assistant\n"), ids, ImEnd)
}

// ScriptedIDs returns a Toy of vocab tokens that answers every assistant turn (the tokens after
// the last occurrence of header) with reply's ids and then stop.
func ScriptedIDs(vocab int, header, reply []int, stop int) *Toy {
	toy := NewToy(vocab, 8192)
	toy.Favor = func(toks []int) (int, bool) {
		for i := len(toks) - len(header); i >= 0; i-- {
			if slices.Equal(toks[i:i+len(header)], header) {
				n := len(toks) - i - len(header)
				if n < len(reply) {
					return reply[n], true
				}
				return stop, true
			}
		}
		return 0, false
	}
	return toy
}
