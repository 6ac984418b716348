package curate

import (
	"fmt"
	"sort"
	"strings"

	"github.com/chainedsql/chainedsql/chat"
	"github.com/chainedsql/chainedsql/inference/chattmpl"
)

// Exclusion reasons recorded in Excluded.Reason.
const (
	// ReasonMaxLength: the rendered conversation has more tokens than BuildOptions.MaxLength.
	ReasonMaxLength = "max_length"
	// ReasonMarkerInContent: a message's content contains "<|im_start|>" or "<|im_end|>" text,
	// which the tokenizer turns into ChatML control tokens; the row's turn structure (and so its
	// loss mask) would be ambiguous.
	ReasonMarkerInContent = "chatml_marker_in_content"
	// ReasonSpecialInContent: a message's content contains the text of another special added
	// token of the tokenizer (e.g. "<|endoftext|>", an EOS of Qwen2.5's generation config),
	// which the tokenizer turns into that control token: trained on, it teaches the student to
	// write a control token (to stop, for an EOS) where the teacher wrote text.
	ReasonSpecialInContent = "special_token_in_content"
	// ReasonTruncated: the trajectory has a truncated turn and the build ran with
	// --truncated exclude (TruncatedExclude).
	ReasonTruncated = "truncated"
)

// trainingMessages returns msgs cut after the last assistant message: what follows it (the
// last observation) carries no loss and is not part of the training text.
func trainingMessages(msgs []chat.Message) []chat.Message {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chat.RoleAssistant {
			return msgs[:i+1]
		}
	}
	return msgs
}

// reasonTexts says what each exclusion reason means, for the dataset card.
var reasonTexts = map[string]string{
	ReasonMaxLength:        "more tokens than `--max-length`",
	ReasonMarkerInContent:  "a message's text holds `<|im_start|>` or `<|im_end|>`, which the tokenizer turns into ChatML control tokens",
	ReasonSpecialInContent: "a message's text holds another special token of the tokenizer, such as the EOS `<|endoftext|>`, which the tokenizer turns into that control token; `token` in `stats.json` names it",
	ReasonTruncated:        "a turn the token limit cut (`--truncated exclude`)",
}

// specialTexts is the text of every special added token of a tokenizer (tokenizer.json's
// added_tokens with "special": true), the ChatML markers first, then the others by text.
func specialTexts(tok Tokenizer) []string {
	out := []string{chattmpl.ImStart, chattmpl.ImEnd}
	var other []string
	for s := range tok.SpecialIDs() {
		if s != chattmpl.ImStart && s != chattmpl.ImEnd {
			other = append(other, s)
		}
	}
	sort.Strings(other)
	return append(out, other...)
}

// specialInContent returns the exclusion reason for a message whose content holds the text of
// a special token (specials as specialTexts gives them), and that token's text; "", "" when
// no message does. The ChatML markers (ReasonMarkerInContent) win over the others
// (ReasonSpecialInContent) wherever they are.
func specialInContent(specials []string, msgs []chat.Message) (reason, token string) {
	for i, s := range specials {
		for _, m := range msgs {
			if strings.Contains(m.Content, s) {
				if i < 2 {
					return ReasonMarkerInContent, s
				}
				return ReasonSpecialInContent, s
			}
		}
	}
	return "", ""
}

// counter counts tokens and trainable tokens of rendered conversations. It is used by one
// goroutine at a time.
//
// The rendering is cut at the ChatML markers, which are special tokens: Hugging Face's
// tokenizers split special tokens out before normalising and pre-tokenising, so the tokens of
// the whole text are the marker tokens plus the tokens of each piece between markers, encoded
// alone. That lets the counter cache pieces that repeat (the system prompt, with its schema, is
// the same for every trajectory on one database and dialect). Verify encodes whole texts and
// so checks this equivalence on every row.
type counter struct {
	tok           Tokenizer
	specials      []string // specialTexts(tok)
	cache         map[string]pieceTokens
	cacheBytes    int
	maxCacheBytes int
}

// pieceTokens is a cached piece's token end offsets (relative to the piece).
type pieceTokens struct {
	starts, ends []int32
}

// minCachedPiece is the smallest piece worth caching.
const minCachedPiece = 512

func newCounter(tok Tokenizer) (*counter, error) {
	_, ok1 := tok.TokenID(chattmpl.ImStart)
	_, ok2 := tok.TokenID(chattmpl.ImEnd)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("tokenizer has no %s/%s tokens: not a ChatML (Qwen2) tokenizer", chattmpl.ImStart, chattmpl.ImEnd)
	}
	return &counter{tok: tok, specials: specialTexts(tok), cache: map[string]pieceTokens{}, maxCacheBytes: 64 << 20}, nil
}

// count returns the number of tokens of text and how many of them overlap a span. A token
// that overlaps a span only in part counts as trainable, as in Hugging Face's
// return_assistant_tokens_mask (which marks every token from the one holding a span's first
// character to the one holding its last). With the Qwen2.5 training spans (from the header's
// "\n" through the "\n" after <|im_end|>) the pieces split at span ends, so no token of a
// rendering overlaps a span in part; the rule only matters for spans drawn elsewhere.
func (c *counter) count(text string, spans []chattmpl.Span) (tokens, trainable int) {
	c.walk(text, spans, func(_, _, span int) {
		tokens++
		if span >= 0 {
			trainable++
		}
	})
	return tokens, trainable
}

// walk feeds every token of text to fn in order: its byte range and the index of the span it
// overlaps (-1 when it overlaps none, i.e. carries no loss). count and Mask both take their
// marks from here, so the viewer's loss mask is the one Build counts.
func (c *counter) walk(text string, spans []chattmpl.Span, fn func(start, end, span int)) {
	si := 0
	add := func(start, end int) {
		for si < len(spans) && spans[si].End <= start {
			si++
		}
		if si < len(spans) && start < spans[si].End && end > spans[si].Start {
			fn(start, end, si)
			return
		}
		fn(start, end, -1)
	}
	pos := 0
	for pos < len(text) {
		next, mlen := nextMarker(text, pos)
		if next > pos {
			c.piece(text[pos:next], pos, add)
		}
		if mlen == 0 {
			break
		}
		add(next, next+mlen)
		pos = next + mlen
	}
}

// nextMarker finds the first "<|im_start|>" or "<|im_end|>" at or after from; it returns
// len(text), 0 when there is none.
func nextMarker(text string, from int) (at, n int) {
	for from < len(text) {
		i := strings.Index(text[from:], "<|im_")
		if i < 0 {
			break
		}
		j := from + i
		switch {
		case strings.HasPrefix(text[j:], chattmpl.ImStart):
			return j, len(chattmpl.ImStart)
		case strings.HasPrefix(text[j:], chattmpl.ImEnd):
			return j, len(chattmpl.ImEnd)
		}
		from = j + 1
	}
	return len(text), 0
}

// piece feeds the tokens of one marker-free piece (at offset base of the text) to add.
func (c *counter) piece(p string, base int, add func(start, end int)) {
	// Only system pieces repeat across trajectories; caching others would only churn.
	cacheable := len(p) >= minCachedPiece && strings.HasPrefix(p, "system\n")
	if cacheable {
		if pt, ok := c.cache[p]; ok {
			for i := range pt.starts {
				add(base+int(pt.starts[i]), base+int(pt.ends[i]))
			}
			return
		}
	}
	_, offs := c.tok.EncodeOffsets(p)
	for _, o := range offs {
		add(base+o.Start, base+o.End)
	}
	if cacheable {
		if c.cacheBytes+len(p) > c.maxCacheBytes {
			clear(c.cache)
			c.cacheBytes = 0
		}
		pt := pieceTokens{starts: make([]int32, len(offs)), ends: make([]int32, len(offs))}
		for i, o := range offs {
			pt.starts[i], pt.ends[i] = int32(o.Start), int32(o.End)
		}
		c.cache[strings.Clone(p)] = pt
		c.cacheBytes += len(p) + 8*len(offs)
	}
}
