package tokenizer

import (
	"slices"
	"unsafe"
)

// pairKey packs the ids of two adjacent symbols into the key of the merge map.
func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// noRank marks a pair that has no merge.
const noRank = ^uint32(0)

// rankOf returns the merge rank of (a, b) and the id it merges into, or noRank.
func (t *Tokenizer) rankOf(a, b int32) (uint32, int32) {
	v, ok := t.merges[pairKey(a, b)]
	if !ok {
		return noRank, 0
	}
	return uint32(v >> 32), int32(uint32(v))
}

// longWord is the length in bytes above which bpe uses the heap; below it a linear scan for
// the lowest rank is faster.
const longWord = 48

// bpe appends the BPE ids of word (raw bytes, one pre-tokenizer piece) to dst. Starting from
// one symbol per byte, it repeatedly merges the adjacent pair of lowest merge rank, the
// leftmost one on ties, until no pair has a merge: the same result as HF's priority queue of
// (rank, position).
func (t *Tokenizer) bpe(st *state, word string, dst []int32) []int32 {
	if t.ignoreMerges {
		if id, ok := t.byteVocab[word]; ok {
			return append(dst, id)
		}
	}
	if len(word) == 1 {
		return append(dst, t.byteID[word[0]])
	}
	if len(word) > longWord {
		return t.bpeHeap(st, word, dst)
	}
	return t.bpeLinear(st, word, dst)
}

// bpeLinear is bpe for short words: it keeps the ranks of adjacent pairs in an array and scans
// it for the lowest, so each merge costs two merge-map lookups.
func (t *Tokenizer) bpeLinear(st *state, word string, dst []int32) []int32 {
	syms := st.syms[:0]
	for i := 0; i < len(word); i++ {
		syms = append(syms, t.byteID[word[i]])
	}
	ranks := st.ranks[:0]
	news := st.news[:0]
	for i := 0; i+1 < len(syms); i++ {
		r, m := t.rankOf(syms[i], syms[i+1])
		ranks = append(ranks, r)
		news = append(news, m)
	}
	for len(syms) > 1 {
		best, bi := noRank, -1
		for i, r := range ranks {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		syms[bi] = news[bi]
		syms = append(syms[:bi+1], syms[bi+2:]...)
		ranks = append(ranks[:bi], ranks[bi+1:]...)
		news = append(news[:bi], news[bi+1:]...)
		if bi > 0 {
			ranks[bi-1], news[bi-1] = t.rankOf(syms[bi-1], syms[bi])
		}
		if bi < len(ranks) {
			ranks[bi], news[bi] = t.rankOf(syms[bi], syms[bi+1])
		}
	}
	st.syms, st.ranks, st.news = syms, ranks, news
	return append(dst, syms...)
}

// mergeHeap is a binary min-heap of candidate merges, each rank<<32 | position of the left
// symbol. (container/heap would box every uint64 in an interface, one allocation a push.)
type mergeHeap []uint64

func (h *mergeHeap) push(x uint64) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *mergeHeap) pop() uint64 {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < len(a) && a[l] < a[m] {
			m = l
		}
		if l+1 < len(a) && a[l+1] < a[m] {
			m = l + 1
		}
		if m == i {
			break
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
	*h = a
	return top
}

// bpeHeap is bpe for long words, O(n log n): symbols in a linked list, candidate merges in a
// heap ordered by (rank, position); a popped candidate is skipped when its pair has changed.
func (t *Tokenizer) bpeHeap(st *state, word string, dst []int32) []int32 {
	n := len(word)
	syms := st.syms[:0]
	for i := 0; i < n; i++ {
		syms = append(syms, t.byteID[word[i]])
	}
	next := grow(st.next, n)
	prev := grow(st.prev, n)
	for i := range n {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	h := st.heap[:0]
	for i := 0; i+1 < n; i++ {
		if r, _ := t.rankOf(syms[i], syms[i+1]); r != noRank {
			h = append(h, uint64(r)<<32|uint64(i))
		}
	}
	slices.Sort(h) // a sorted slice is a heap
	for len(h) > 0 {
		top := h.pop()
		rank, pos := uint32(top>>32), int32(uint32(top))
		if syms[pos] < 0 || next[pos] < 0 {
			continue
		}
		nx := next[pos]
		r, m := t.rankOf(syms[pos], syms[nx])
		if r != rank {
			continue
		}
		syms[pos] = m
		syms[nx] = -1
		next[pos] = next[nx]
		if next[nx] >= 0 {
			prev[next[nx]] = pos
		}
		if p := prev[pos]; p >= 0 {
			if r, _ := t.rankOf(syms[p], m); r != noRank {
				h.push(uint64(r)<<32 | uint64(p))
			}
		}
		if q := next[pos]; q >= 0 {
			if r, _ := t.rankOf(m, syms[q]); r != noRank {
				h.push(uint64(r)<<32 | uint64(pos))
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		dst = append(dst, syms[i])
	}
	st.syms, st.next, st.prev, st.heap = syms, next, prev, h
	return dst
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, 2*n)
	}
	return s[:n]
}

// Word cache bounds, per state: pieces up to maxCachedWord bytes are cached; the cache is
// emptied when it holds maxCacheWords words.
const (
	maxCachedWord  = 64
	maxCacheWords  = 1 << 15
	keyArenaChunk  = 256 << 10
	idArenaInitCap = 1 << 16
)

// wordCache maps a piece's bytes to its ids, kept in one arena: the value is offset<<8 | count.
// Keys are copied into byte chunks that are only ever appended to, so a key is a string that
// points into a chunk and no piece of the caller's text is retained. A cache belongs to one
// state, so it needs no lock.
type wordCache struct {
	m     map[string]uint64
	ids   []int32
	chunk []byte
}

func (c *wordCache) get(word string) ([]int32, bool) {
	v, ok := c.m[word]
	if !ok {
		return nil, false
	}
	off, n := v>>8, v&0xff
	return c.ids[off : off+n], true
}

func (c *wordCache) put(word string, ids []int32) {
	if len(c.m) >= maxCacheWords || c.m == nil {
		c.m = make(map[string]uint64, maxCacheWords/4)
		c.ids = make([]int32, 0, idArenaInitCap)
		c.chunk = nil
	}
	if cap(c.chunk)-len(c.chunk) < len(word) {
		c.chunk = make([]byte, 0, keyArenaChunk)
	}
	start := len(c.chunk)
	c.chunk = append(c.chunk, word...)
	key := unsafe.String(&c.chunk[start], len(word))
	c.m[key] = uint64(len(c.ids))<<8 | uint64(len(ids))
	c.ids = append(c.ids, ids...)
}
