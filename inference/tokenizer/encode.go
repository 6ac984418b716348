package tokenizer

import (
	"golang.org/x/text/unicode/norm"
)

// state is the scratch space of one encode call: BPE buffers, the word cache and the NFC
// alignment. States are reused through Tokenizer.free, so the cache survives across calls.
type state struct {
	syms   []int32
	ranks  []uint32
	news   []int32
	next   []int32
	prev   []int32
	heap   mergeHeap
	word   []int32
	cache  wordCache
	normed []byte
	align  []stretch
}

// maxFreeStates bounds how many idle states (each with its word cache) a Tokenizer keeps.
const maxFreeStates = 16

func (t *Tokenizer) getState() *state {
	t.mu.Lock()
	if n := len(t.free); n > 0 {
		st := t.free[n-1]
		t.free = t.free[:n-1]
		t.mu.Unlock()
		return st
	}
	t.mu.Unlock()
	return &state{}
}

func (t *Tokenizer) putState(st *state) {
	t.mu.Lock()
	if len(t.free) < maxFreeStates {
		t.free = append(t.free, st)
	}
	t.mu.Unlock()
}

// encode appends the ids of text to ids and, when offs is not nil, their byte ranges in text
// to *offs. As HF: added tokens with normalized=false are split out of the raw text first, each
// stretch between them is NFC-normalised, added tokens with normalized=true are split out of
// that, and the rest is pre-tokenised and BPE-encoded piece by piece. With splitSpecial the
// added tokens marked special are not split out but encoded as the rest (HF's
// split_special_tokens=True).
func (t *Tokenizer) encode(st *state, text string, ids []int, offs *[]Offset, splitSpecial bool) []int {
	return splitAdded(t.rawMatcher, text, 0, ids, offs, splitSpecial, func(seg string, at int, ids []int) []int {
		return t.encodeSegment(st, seg, at, ids, offs, splitSpecial)
	})
}

// splitAdded appends the ids (and offsets, at off) of s: the added tokens m finds (special
// ones passed over with splitSpecial) as their ids, each stretch between them through each.
func splitAdded(m *matcher, s string, off int, ids []int, offs *[]Offset, splitSpecial bool, each func(part string, at int, ids []int) []int) []int {
	pos := 0
	for pos < len(s) {
		start, n, id := m.find(s, pos, splitSpecial)
		end := start
		if start < 0 {
			end = len(s)
		}
		if end > pos {
			ids = each(s[pos:end], off+pos, ids)
		}
		if start < 0 {
			break
		}
		ids = append(ids, int(id))
		if offs != nil {
			*offs = append(*offs, Offset{off + start, off + start + n})
		}
		pos = start + n
	}
	return ids
}

// stretch is a part of a segment that NFC rewrote: normalised bytes [nStart, nEnd) came from
// original bytes [oStart, oEnd).
type stretch struct{ nStart, nEnd, oStart, oEnd int }

// encodeSegment encodes seg, a stretch of the text at byte base free of raw added tokens.
func (t *Tokenizer) encodeSegment(st *state, seg string, base int, ids []int, offs *[]Offset, splitSpecial bool) []int {
	s := seg
	aligned := false
	if t.nfc && !norm.NFC.IsNormalString(seg) {
		s = t.normalize(st, seg)
		aligned = len(st.align) > 0
	}
	first := 0
	if offs != nil {
		first = len(*offs)
	}
	off := base
	if aligned {
		off = 0 // offsets in normalised coordinates first, mapped below
	}
	ids = splitAdded(t.normMatcher, s, off, ids, offs, splitSpecial, func(p string, at int, ids []int) []int {
		return t.encodePieces(st, p, at, ids, offs)
	})
	if aligned && offs != nil {
		mapOffsets((*offs)[first:], st.align, base)
	}
	return ids
}

// encodePieces pre-tokenises s (normalised text free of added tokens, at offset off) and
// appends the BPE ids of each piece, through the word cache.
func (t *Tokenizer) encodePieces(st *state, s string, off int, ids []int, offs *[]Offset) []int {
	for i := 0; i < len(s); {
		j := nextPiece(s, i)
		w := s[i:j]
		var wids []int32
		if len(w) <= maxCachedWord {
			var ok bool
			if wids, ok = st.cache.get(w); !ok {
				st.word = t.bpe(st, w, st.word[:0])
				wids = st.word
				st.cache.put(w, wids)
			}
		} else {
			st.word = t.bpe(st, w, st.word[:0])
			wids = st.word
		}
		if offs == nil {
			for _, id := range wids {
				ids = append(ids, int(id))
			}
		} else {
			o := off + i
			for _, id := range wids {
				ids = append(ids, int(id))
				e := o + len(t.bytesOf[id])
				*offs = append(*offs, Offset{o, e})
				o = e
			}
		}
		i = j
	}
	return ids
}

// normalize returns the NFC form of seg and leaves in st.align the stretches it rewrote.
// golang.org/x/text/unicode/norm has Unicode 15.0 tables; HF's unicode-normalization-alignments
// crate has older ones. Canonical compositions of characters both know are stable across
// versions, and neither composes the Unicode 16 pairs in golden_hf_divergent.jsonl (e.g.
// U+113C2 U+113C2, which Unicode 16 composes to U+113C5).
// Normal runs are found with QuickSpan and copied; each segment after one (up to the next
// normalisation boundary, where the parts normalise independently) is normalised alone.
func (t *Tokenizer) normalize(st *state, seg string) string {
	buf := st.normed[:0]
	al := st.align[:0]
	for i := 0; i < len(seg); {
		if q := norm.NFC.QuickSpanString(seg[i:]); q > 0 {
			buf = append(buf, seg[i:i+q]...)
			i += q
			continue
		}
		n := norm.NFC.NextBoundaryInString(seg[i:], true)
		if n <= 0 {
			n = len(seg) - i
		}
		ns := len(buf)
		buf = norm.NFC.AppendString(buf, seg[i:i+n])
		if string(buf[ns:]) != seg[i:i+n] {
			al = append(al, stretch{ns, len(buf), i, i + n})
		}
		i += n
	}
	st.normed, st.align = buf, al
	return string(buf)
}

// mapOffsets maps offsets in normalised coordinates to the original segment at base. Outside
// rewritten stretches the map is a shift; a position strictly inside a stretch maps to the
// stretch's original end, so the first token touching a stretch takes all of it and the later
// ones inside it are empty. Offsets are in order, so one cursor walks the stretches.
func mapOffsets(offs []Offset, al []stretch, base int) {
	k, delta := 0, 0
	at := func(x int) int {
		for k < len(al) && al[k].nEnd <= x {
			delta = al[k].oEnd - al[k].nEnd
			k++
		}
		if k < len(al) && al[k].nStart < x {
			return base + al[k].oEnd
		}
		return base + x + delta
	}
	for i := range offs {
		offs[i].Start = at(offs[i].Start)
		offs[i].End = at(offs[i].End)
	}
}
