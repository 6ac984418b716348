package view

import (
	"errors"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/curate"
)

// MaskView is the loss-mask page of a row: the training text and its tokens, each marked with
// the assistant span it trains on, as curate.Mask (the code behind num_trainable_tokens)
// computes them.
type MaskView struct {
	ID   int    `json:"id"`
	Text string `json:"text"`
	// Tokens are [start, end, span] in UTF-16 code units of Text (JavaScript string
	// offsets); span is -1 for a token without loss. A token that ends inside a character
	// (byte-level BPE can split one) is widened to the character's end, so the token after it
	// in the same character is empty.
	Tokens    [][3]int `json:"tokens"`
	Spans     int      `json:"spans"`
	Trainable int      `json:"trainable"`
	// StoredTokens and StoredTrainable are the dataset's num_tokens and num_trainable_tokens
	// (HasStored false for run dirs, which have none).
	StoredTokens    int64  `json:"stored_tokens"`
	StoredTrainable int64  `json:"stored_trainable"`
	HasStored       bool   `json:"has_stored"`
	Tokenizer       string `json:"tokenizer"`
	Error           string `json:"error,omitempty"`
}

var errNoTokenizer = errors.New("no tokenizer: start curate view with --tokenizer PATH (the student's tokenizer.json or its directory) to see the loss mask")

func (s *Server) mask(msgs []chat.Message) (*curate.Masked, error) {
	if s.opts.Tokenizer == nil {
		return nil, errNoTokenizer
	}
	return curate.Mask(s.opts.Tokenizer, msgs)
}

// maskView converts a mask's byte offsets into UTF-16 offsets.
func maskView(m *curate.Masked) MaskView {
	// u16[i] is the UTF-16 offset of byte i for every rune start i, and of len(text).
	text := m.Text
	u16 := make([]int32, len(text)+1)
	n := int32(0)
	for i := 0; i < len(text); {
		r, size := utf8.DecodeRuneInString(text[i:])
		for k := 0; k < size; k++ {
			u16[i+k] = -1
		}
		u16[i] = n
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
		i += size
	}
	u16[len(text)] = n
	// at maps a byte offset to the UTF-16 offset of the next rune boundary at or after it.
	at := func(b int) int {
		for u16[b] < 0 {
			b++
		}
		return int(u16[b])
	}
	mv := MaskView{Text: text, Tokens: make([][3]int, len(m.Tokens)), Spans: len(m.Spans), Trainable: m.Trainable}
	for i, t := range m.Tokens {
		mv.Tokens[i] = [3]int{at(t.Start), at(t.End), t.Span}
	}
	return mv
}
