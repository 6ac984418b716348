package sandbox

// The cost of a LIKE pattern or a search string, shared by the engines whose searches run
// without checking for a cancel or kill (PostgreSQL's MatchText and text_position_next,
// MariaDB's wildcmp): both try a pattern's part after each % at every place the text holds its
// first literal character, comparing up to the next %, so their time is the text's length
// times what PrefixPasses sums over those parts. A screen bounds that factor, since no rule on a
// statement's text bounds the length of a value the statement builds.

// Wild is a pattern atom that matches any character (LIKE's _).
const Wild = -1

// LikeSegments splits LIKE pattern p at its unescaped % into atoms (_ is Wild, esc makes the
// next character literal, -1 for no escape), each without the _ it starts with: both engines
// take those once, right after the %, before they look for the first literal character. atom
// reads the character at the start of its argument: its atom and its length in bytes.
func LikeSegments(p string, esc int, atom func(string) (int, int)) [][]int {
	var segs [][]int
	var cur []int
	for i := 0; i < len(p); {
		c := int(p[i])
		switch {
		case c == esc && i+1 < len(p):
			a, n := atom(p[i+1:])
			cur = append(cur, a)
			i += 1 + n
			continue
		case c == '%':
			segs = append(segs, cur)
			cur = nil
		case c == '_':
			if len(segs) == 0 || len(cur) > 0 {
				cur = append(cur, Wild)
			}
		default:
			a, n := atom(p[i:])
			cur = append(cur, a)
			i += n
			continue
		}
		i++
	}
	return append(segs, cur)
}

// LikePasses bounds the comparisons per character of the text that matching LIKE pattern p
// costs (LikeSegments' arguments): the sum of PrefixPasses over its parts after a %, the part
// before the first % being matched at the start only. It stops summing once the sum passes
// limit.
func LikePasses(p string, esc int, atom func(string) (int, int), limit float64) float64 {
	sum := 0.0
	for i, seg := range LikeSegments(p, esc, atom) {
		if i > 0 && sum <= limit {
			sum += PrefixPasses(seg, limit-sum)
		}
	}
	return sum
}

// PrefixPasses bounds the comparisons per character of any text that matching atoms from
// their start at each place the text may hold them costs: the sum over the prefixes of atoms
// of one over the prefix's shortest period (two places at which a prefix of length l matches
// lie at least that period apart; Wild agrees with anything). A string of one repeated
// character costs its length, one of distinct characters about the logarithm of its length.
// It stops summing once the sum passes limit.
func PrefixPasses(atoms []int, limit float64) float64 {
	agree := func(a, b int) bool { return a == b || a == Wild || b == Wild }
	sum, p := 0.0, 1
	for l := 1; l <= len(atoms); l++ {
		// p stays a period of atoms[:l] if the new atom agrees with the one p before it;
		// otherwise the shortest period is longer (periods of a prefix are periods of its
		// prefixes), and each longer candidate is checked whole.
		if p < l && !agree(atoms[l-1], atoms[l-1-p]) {
			for p++; p < l; p++ {
				ok := true
				for i := 0; i+p < l && ok; i++ {
					ok = agree(atoms[i], atoms[i+p])
				}
				if ok {
					break
				}
			}
		}
		sum += 1 / float64(p)
		if sum > limit {
			break
		}
	}
	return sum
}
