package tokenizer

import (
	"sort"
	"strings"
)

// matcher finds added tokens in text, leftmost-longest as HF's aho-corasick matcher
// (MatchKind::LeftmostLongest): the earliest position where any token starts, and there the
// longest token. Added tokens are few (22 for Qwen2.5), so candidates are indexed by first byte
// and tried longest first instead of building an automaton.
type matcher struct {
	byFirst [256][]matchToken
	any     bool
}

type matchToken struct {
	content string
	id      int32
	special bool
}

// newMatcher indexes the added tokens whose normalized flag equals normalized.
func newMatcher(added []addedToken, normalized bool) *matcher {
	m := &matcher{}
	for _, a := range added {
		if a.normalized != normalized {
			continue
		}
		b := a.content[0]
		m.byFirst[b] = append(m.byFirst[b], matchToken{a.content, int32(a.id), a.special})
		m.any = true
	}
	for b := range m.byFirst {
		l := m.byFirst[b]
		sort.SliceStable(l, func(i, j int) bool { return len(l[i].content) > len(l[j].content) })
	}
	return m
}

// find returns the first added token in s at or after from: its start, length and id. It
// returns start -1 when there is none. With splitSpecial, a special token found is text, as in
// HF's AddedVocabulary with encode_special_tokens: the match is passed over whole (nothing inside
// it is matched again) and the search goes on after it.
func (m *matcher) find(s string, from int, splitSpecial bool) (start, n int, id int32) {
	if !m.any {
		return -1, 0, 0
	}
	for i := from; i < len(s); i++ {
		cands := m.byFirst[s[i]]
		if cands == nil {
			continue
		}
		for _, c := range cands {
			if strings.HasPrefix(s[i:], c.content) {
				if splitSpecial && c.special {
					i += len(c.content) - 1
					break
				}
				return i, len(c.content), c.id
			}
		}
	}
	return -1, 0, 0
}
