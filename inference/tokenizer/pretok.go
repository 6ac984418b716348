package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// The Qwen2 pre-tokenizer splits text with the regular expression qwen2Pattern:
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)     A1 contractions
//	|[^\r\n\p{L}\p{N}]?\p{L}+        A2 a word, with at most one leading non-letter
//	|\p{N}                           A3 one digit
//	| ?[^\s\p{L}\p{N}]+[\r\n]*       A4 punctuation, with one leading space and trailing newlines
//	|\s*[\r\n]+                      A5 whitespace up to its last newline
//	|\s+(?!\S)                       A6 whitespace but the last character before a non-space
//	|\s+                             A7 whitespace
//
// Hugging Face runs it with Oniguruma: leftmost match, alternatives tried in order, greedy
// quantifiers with backtracking. Go's regexp has no lookahead (A6) and picks leftmost-first by
// a different automaton, so nextPiece is a hand-written scanner that reproduces the backtracking
// outcome of each alternative directly (worked out in the comments below). It is also several
// times faster than a regexp engine, which matters because it touches every byte.
//
// Character classes: \p{L} is unicode.IsLetter, \p{N} unicode.IsNumber, \s unicode.IsSpace
// (Oniguruma's Unicode \s is White_Space: U+0009–000D, U+0020, U+0085, U+00A0 and the Zs, Zl,
// Zp characters, which is exactly unicode.IsSpace; U+FEFF is not a space in either). Go 1.26's
// tables are Unicode 15.0; Oniguruma 6.9.8/6.9.9 (onig_sys, used by the tokenizers crate) has
// Unicode 14.0/15.1, so at most characters assigned after Unicode 14 can classify differently.
// Characters assigned in Unicode 16 are unassigned (neither letter, number nor space) for both,
// which golden_hf_divergent.jsonl checks.

// Character class bits.
const (
	clsL  = 1 << iota // \p{L}
	clsN              // \p{N}
	clsS              // \s
	clsNL             // \r or \n
)

// asciiClass holds the class bits of each ASCII byte.
var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for b := 0; b < utf8.RuneSelf; b++ {
		t[b] = runeClass(rune(b))
	}
	return t
}()

func runeClass(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c = clsL
	case unicode.IsNumber(r):
		c = clsN
	case unicode.IsSpace(r):
		c = clsS
		if r == '\r' || r == '\n' {
			c |= clsNL
		}
	}
	return c
}

// classAt returns the class bits and byte width of the rune at s[i] (i < len(s)). Invalid
// UTF-8 is one U+FFFD of width 1, which is neither letter, number nor space.
func classAt(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return asciiClass[b], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return runeClass(r), w
}

// foldASCII returns the lower-case ASCII letter r matches case-insensitively among the
// letters of A1 (s, t, r, v, m, l, d, e), or 0. U+017F (long s) case-folds to s.
func foldASCII(s string, i int) (byte, int) {
	if i >= len(s) {
		return 0, 0
	}
	b := s[i]
	if b < utf8.RuneSelf {
		return b | 0x20, 1
	}
	if r, w := utf8.DecodeRuneInString(s[i:]); r == 'ſ' {
		return 's', w
	}
	return 0, 0
}

// nextPiece returns the end of the pre-tokenizer piece that starts at s[i] (i < len(s)).
// Every position starts a match of one alternative, so pieces tile the text.
func nextPiece(s string, i int) int {
	c, w := classAt(s, i)
	n := len(s)

	// A1: an apostrophe and a contraction suffix, any case.
	if s[i] == '\'' {
		if f, w2 := foldASCII(s, i+1); w2 > 0 {
			switch f {
			case 's', 't', 'm', 'd':
				return i + 1 + w2
			case 'r', 'v', 'l':
				want := byte('e')
				if f == 'l' {
					want = 'l'
				}
				if g, w3 := foldASCII(s, i+1+w2); w3 > 0 && g == want {
					return i + 1 + w2 + w3
				}
			}
		}
	}

	// A2: a letter run, or one character that is not \r, \n, a letter or a digit followed by
	// a letter run. (With a letter first, the optional class cannot take it, so the run starts
	// there; otherwise the class takes it and a letter must follow.)
	if c&clsL != 0 {
		return letterRun(s, i+w)
	}
	if c&(clsN|clsNL) == 0 && i+w < n {
		if c2, w2 := classAt(s, i+w); c2&clsL != 0 {
			return letterRun(s, i+w+w2)
		}
	}

	// A3: one number character.
	if c&clsN != 0 {
		return i + w
	}

	// A4: an optional space, then characters that are not space, letter or number, then any
	// \r and \n. If the space is taken but no such character follows, backtracking drops the
	// space, and then the space itself fails the class.
	j := -1
	if s[i] == ' ' {
		if i+1 < n {
			if c2, _ := classAt(s, i+1); c2&(clsS|clsL|clsN) == 0 {
				j = i + 1
			}
		}
	} else if c&(clsS|clsL|clsN) == 0 {
		j = i
	}
	if j >= 0 {
		for j < n {
			c2, w2 := classAt(s, j)
			if c2&(clsS|clsL|clsN) != 0 {
				break
			}
			j += w2
		}
		for j < n && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}

	// Only whitespace is left: s[i] starts a whitespace run s[i:end].
	end, lastNL, lastStart := i, -1, i
	for end < n {
		c2, w2 := classAt(s, end)
		if c2&clsS == 0 {
			break
		}
		if c2&clsNL != 0 {
			lastNL = end
		}
		lastStart = end
		end += w2
	}
	// A5: \s* backtracks from the run's end to its last newline, which [\r\n]+ then takes
	// (the character after it is not a newline, else it would be the last).
	if lastNL >= 0 {
		return lastNL + 1
	}
	// A6: at the end of the text the lookahead holds; before a non-space it holds once
	// \s+ gives back the run's last character, if the run has more than one.
	if end == n {
		return end
	}
	if lastStart > i {
		return lastStart
	}
	// A7.
	return end
}

// letterRun returns the end of the run of letters starting at s[j].
func letterRun(s string, j int) int {
	for j < len(s) {
		b := s[j]
		if b < utf8.RuneSelf {
			if asciiClass[b]&clsL == 0 {
				return j
			}
			j++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if !unicode.IsLetter(r) {
			return j
		}
		j += w
	}
	return j
}
