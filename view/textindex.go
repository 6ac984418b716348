package view

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Text fields of the full-text index.
const (
	// fieldReasoning: each assistant turn's think block, the separate reasoning field, and the
	// whole reply of a turn without a parsable <sql>.
	fieldReasoning = iota
	// fieldSQL: each turn's SQL and the final SQL.
	fieldSQL
	// fieldObservation: the observations (results and errors) the teacher was shown.
	fieldObservation
	nFields
)

var fieldNames = [nFields]string{"reasoning", "sql", "observation"}

// textIndex is the full-text index over every message of every row: per field, an inverted
// index from each word to the ascending ids of the rows holding it. It lives in memory only,
// beside the row index: a dataset's is built once in the background after Open (its Parquet
// files are immutable, so it never goes stale); a live dir's grows with the rows as they are
// read. Words are runs of letters, digits and '_', lowercased; each Han, Kana or Hangul
// character is a word of its own, so that a single character finds mixed-language text.
type textIndex struct {
	mu     sync.RWMutex
	fields [nFields]textField
	// done counts the rows indexed; total is how many there are to index (0 while unknown).
	done, total int
	ready       bool
	err         error
}

// textField is one field's inverted index.
type textField struct {
	ids  map[string]int32
	post [][]int32
	// sorted is the vocabulary in order, for prefix lookups; nil after additions.
	sorted []string
}

func newTextIndex() *textIndex {
	ti := &textIndex{}
	for f := range ti.fields {
		ti.fields[f].ids = map[string]int32{}
	}
	return ti
}

// rowText collects the words of one row, per field, before they are added under the lock.
type rowText struct {
	words [nFields]map[string]struct{}
}

func newRowText() *rowText {
	rt := &rowText{}
	for f := range rt.words {
		rt.words[f] = map[string]struct{}{}
	}
	return rt
}

// add records the words of s under field f.
func (rt *rowText) add(f int, s string) {
	eachWord(s, func(w string) {
		if _, ok := rt.words[f][w]; !ok {
			rt.words[f][strings.Clone(w)] = struct{}{}
		}
	})
}

// isCJK reports runes written without spaces between words, indexed one by one.
func isCJK(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

func isWordRune(r rune) bool { return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) }

// eachWord calls fn with each lowercased word of s (see textIndex); fn must copy the string to
// keep it, since it may share s's memory.
func eachWord(s string, fn func(string)) {
	var buf []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case isCJK(r):
			fn(s[i : i+n])
			i += n
		case isWordRune(r):
			start, lower := i, true
			buf = buf[:0]
			for i < len(s) {
				r, n = utf8.DecodeRuneInString(s[i:])
				if !isWordRune(r) || isCJK(r) {
					break
				}
				l := unicode.ToLower(r)
				lower = lower && l == r
				buf = utf8.AppendRune(buf, l)
				i += n
			}
			if lower {
				fn(s[start:i]) // most words: no copy
			} else {
				fn(string(buf))
			}
		default:
			i += n
		}
	}
}

// add indexes row id with its words. Rows must come in ascending id order.
func (ti *textIndex) add(id int, rt *rowText) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	for f := range rt.words {
		tf := &ti.fields[f]
		for w := range rt.words[f] {
			t, ok := tf.ids[w]
			if !ok {
				t = int32(len(tf.post))
				tf.ids[w] = t
				tf.post = append(tf.post, nil)
				tf.sorted = nil
			}
			if p := tf.post[t]; len(p) == 0 || p[len(p)-1] < int32(id) {
				tf.post[t] = append(p, int32(id))
			}
		}
	}
	ti.done++
}

// finish marks the index complete (err: why it stopped early).
func (ti *textIndex) finish(err error) {
	ti.mu.Lock()
	defer ti.mu.Unlock()
	ti.ready, ti.err = err == nil, err
	for f := range ti.fields {
		ti.fields[f].sortTerms()
	}
}

func (tf *textField) sortTerms() {
	if tf.sorted != nil {
		return
	}
	tf.sorted = make([]string, 0, len(tf.ids))
	for w := range tf.ids {
		tf.sorted = append(tf.sorted, w)
	}
	slices.Sort(tf.sorted)
}

// SearchStatus says how far the full-text index is.
type SearchStatus struct {
	Ready bool   `json:"ready"`
	Rows  int    `json:"rows"`
	Total int    `json:"total"`
	Error string `json:"error,omitempty"`
}

func (ti *textIndex) status() SearchStatus {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	st := SearchStatus{Ready: ti.ready, Rows: ti.done, Total: max(ti.total, ti.done)}
	if ti.err != nil {
		st.Error = ti.err.Error()
	}
	return st
}

// errSearchNotReady is returned for a full-text query while the index is being built.
var errSearchNotReady = errors.New("the full-text index is still being built")

// match returns the rows (a bitmap over ids below n) holding every word of text in one of
// fields, each query word matching the words of the text that start with it. Quoted phrases
// count as their words (their order is not checked).
func (ti *textIndex) match(text string, fields []int, n int) ([]uint64, error) {
	ti.mu.Lock() // sorting a grown vocabulary writes
	defer ti.mu.Unlock()
	if !ti.ready {
		if ti.err != nil {
			return nil, fmt.Errorf("the full-text index is not available: %w", ti.err)
		}
		return nil, fmt.Errorf("%w (%d of %d rows)", errSearchNotReady, ti.done, ti.total)
	}
	words := queryWords(text)
	var hits []uint64
	for k, w := range words {
		bits := make([]uint64, (n+63)/64)
		for _, f := range fields {
			tf := &ti.fields[f]
			tf.sortTerms()
			for j := sort.SearchStrings(tf.sorted, w); j < len(tf.sorted) && strings.HasPrefix(tf.sorted[j], w); j++ {
				for _, id := range tf.post[tf.ids[tf.sorted[j]]] {
					if int(id) < n {
						bits[id/64] |= 1 << (id % 64)
					}
				}
			}
		}
		if k == 0 {
			hits = bits
			continue
		}
		for i := range hits {
			hits[i] &= bits[i]
		}
	}
	return hits, nil
}

// queryWords splits a full-text query into its distinct words, tokenized as the text is.
func queryWords(text string) []string {
	var words []string
	eachWord(text, func(w string) {
		if !slices.Contains(words, w) {
			words = append(words, strings.Clone(w))
		}
	})
	return words
}

// parseFields reads the in= parameter: "" or "all" for every field, else a comma-separated
// list of field names.
func parseFields(s string) ([]int, error) {
	if s == "" || s == "all" {
		return []int{fieldReasoning, fieldSQL, fieldObservation}, nil
	}
	var out []int
	for _, name := range strings.Split(s, ",") {
		i := slices.Index(fieldNames[:], name)
		if i < 0 {
			return nil, fmt.Errorf("in=%q: want all, or some of %s", s, strings.Join(fieldNames[:], ", "))
		}
		if !slices.Contains(out, i) {
			out = append(out, i)
		}
	}
	return out, nil
}
