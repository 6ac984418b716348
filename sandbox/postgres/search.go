package postgres

import (
	"encoding/hex"
	"strings"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/sandbox"
)

// PostgreSQL's text searches never check for interrupts inside one call: strpos, position,
// replace, split_part and string_to_table (text_position_next: Boyer-Moore-Horspool,
// comparing the search string from its end at each place it may start), position over bytea
// and bit strings (a plain loop comparing from the start), LIKE and ILIKE (MatchText: at each
// place the text holds the first character after a %, the pattern up to the next %), and
// btrim, ltrim, rtrim, trim and translate with a set of characters (each character of the text
// against every character of the set). Their time is the text's length times a factor of the
// search string, and the text can be a value of up to 1 GB the statement built (repeat, lpad,
// string_agg, a string doubled by || in each of a few dozen CTEs), which no rule on the text of
// a statement can bound: so the screen bounds the factor. A search string, pattern or set must be
// a string constant, and its factor, the comparisons it may cost per character of the text,
// at most pgMaxPasses.

// pgMaxPasses bounds the comparisons a search string, LIKE pattern or character set may cost
// per character of the text it is searched in: at most that many passes over a value of up to
// 1 GB that the server cannot stop, instead of the product of two lengths (hours). The golds of
// BIRD, Spider and defog need at most 7 (BIRD's LIKE '_:%:__.___'); a search string without
// repeats costs about the natural logarithm of its length (1,000 random letters: 7.5).
const pgMaxPasses = 8

// pgSearchKind is how one of PostgreSQL's uninterruptible text searches spends its time.
type pgSearchKind int

const (
	pgSubstring pgSearchKind = iota // strpos, position, replace, split_part, string_to_table
	pgLike                          // LIKE, ILIKE, ~~ and the like functions
	pgCharSet                       // btrim, ltrim, rtrim, trim, translate
)

// pgSearchPasses bounds the comparisons per character of the text that searching for value
// (the constant as written, escapes undone) costs in a search of kind: the most over its
// readings as text and as bytea (a constant searched in a bytea is read as bytea input), with
// ASCII letters folded (ILIKE folds the case of both sides). esc is LIKE's escape character,
// -1 for none. The sum stops growing once it passes pgMaxPasses.
func pgSearchPasses(kind pgSearchKind, value string, esc int) float64 {
	readings := []string{value}
	if b, ok := pgByteaInput(value); ok && string(b) != value {
		readings = append(readings, string(b))
	}
	most := 0.0
	for ri, r := range readings {
		var p float64
		switch kind {
		case pgSubstring:
			atoms := pgAtoms(r)
			p = max(sandbox.PrefixPasses(atoms, pgMaxPasses), sandbox.PrefixPasses(pgReversed(atoms), pgMaxPasses))
		case pgLike:
			p = sandbox.LikePasses(r, esc, pgAtom, pgMaxPasses)
		case pgCharSet: // characters of a text, bytes of a bytea
			p = float64(utf8.RuneCountInString(r))
			if ri > 0 {
				p = float64(len(r))
			}
		}
		most = max(most, p)
	}
	return most
}

// pgAtoms is s as pattern atoms: its bytes, ASCII letters folded to lower case.
func pgAtoms(s string) []int {
	out := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = int(c)
	}
	return out
}

// pgAtom is the atom of s's first byte, an ASCII letter folded to lower case (LikeSegments).
func pgAtom(s string) (int, int) { return pgAtoms(s[:1])[0], 1 }

// pgReversed is a in reverse order: a search string's suffixes as prefixes.
func pgReversed(a []int) []int {
	out := make([]int, len(a))
	for i, x := range a {
		out[len(a)-1-i] = x
	}
	return out
}

// pgByteaInput decodes s as PostgreSQL's bytea input reads a constant: \x and hex digits
// (spaces between pairs allowed), else the escape format (\\ and \ooo octal). ok is false
// where the server would reject it.
func pgByteaInput(s string) ([]byte, bool) {
	if strings.HasPrefix(s, `\x`) {
		h := strings.Map(func(r rune) rune {
			if r == ' ' || r == '\t' || r == '\n' || r == '\r' {
				return -1
			}
			return r
		}, s[2:])
		b, err := hex.DecodeString(h)
		return b, err == nil
	}
	var out []byte
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] != '\\':
			out = append(out, s[i])
		case i+1 < len(s) && s[i+1] == '\\':
			out = append(out, '\\')
			i++
		case i+3 < len(s) && s[i+1] >= '0' && s[i+1] <= '3' && pgOctal(s[i+2]) && pgOctal(s[i+3]):
			out = append(out, (s[i+1]-'0')<<6|(s[i+2]-'0')<<3|(s[i+3]-'0'))
			i += 3
		default:
			return nil, false
		}
	}
	return out, true
}

func pgOctal(c byte) bool { return c >= '0' && c <= '7' }
