package view

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/sandbox"
)

// sqlTokenKind is the kind of a token of an SQL statement, as formatSQL sees it.
type sqlTokenKind uint8

const (
	tokSpace sqlTokenKind = iota
	tokLineComment
	tokBlockComment
	// tokString is a literal or quoted name ('…', "…", `…`, […], $tag$…$tag$): never changed.
	tokString
	tokWord
	tokNumber
	tokPunct
)

// sqlToken is one token and its text.
type sqlToken struct {
	kind sqlTokenKind
	text string
}

// sqlTokens splits s into tokens whose texts join back to s. Where dialects disagree on where
// a string or comment ends, it takes the longest reading (a backslash escapes the next
// character in quotes, as in MySQL; block comments nest, as in PostgreSQL; # starts a line
// comment, as in MySQL; an unterminated one runs to the end), so that text any dialect reads
// as a literal or a comment is inside one token.
func sqlTokens(s string) []sqlToken {
	var out []sqlToken
	for i := 0; i < len(s); {
		kind, n := scanToken(s[i:])
		out = append(out, sqlToken{kind, s[i : i+n]})
		i += n
	}
	return out
}

// scanToken returns the kind and byte length of the token at the start of s (not empty).
func scanToken(s string) (sqlTokenKind, int) {
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case sqlSpace(s[0]):
		n := 1
		for n < len(s) && sqlSpace(s[n]) {
			n++
		}
		return tokSpace, n
	case strings.HasPrefix(s, "--") || r == '#':
		if n := strings.IndexByte(s, '\n'); n >= 0 {
			return tokLineComment, n
		}
		return tokLineComment, len(s)
	case strings.HasPrefix(s, "/*"):
		depth := 0
		for n := 0; n < len(s); n++ {
			switch {
			case strings.HasPrefix(s[n:], "/*"):
				depth++
				n++
			case strings.HasPrefix(s[n:], "*/"):
				depth--
				n++
				if depth == 0 {
					return tokBlockComment, n + 1
				}
			}
		}
		return tokBlockComment, len(s)
	case r == '\'' || r == '"' || r == '`':
		return tokString, sandbox.SkipQuoted(s, 0)
	case r == '[':
		if n := strings.IndexByte(s, ']'); n >= 0 {
			return tokString, n + 1
		}
		return tokString, len(s)
	case r == '$':
		// $tag$…$tag$ (PostgreSQL); a lone $ or $1 is punctuation then a number.
		if end := strings.IndexByte(s[1:], '$'); end >= 0 && isDollarTag(s[1:1+end]) {
			tag := s[:end+2]
			if n := strings.Index(s[len(tag):], tag); n >= 0 {
				return tokString, len(tag) + n + len(tag)
			}
			return tokString, len(s)
		}
		return tokPunct, 1
	case r >= '0' && r <= '9':
		return tokNumber, wordLen(s)
	case r == '_' || unicode.IsLetter(r):
		return tokWord, wordLen(s)
	}
	return tokPunct, size
}

// isDollarTag reports whether t can be the tag of a dollar-quoted string.
func isDollarTag(t string) bool {
	for i, r := range t {
		if !(r == '_' || unicode.IsLetter(r) || i > 0 && unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// wordLen is the length of the run of letters, digits, '_' and '$' at the start of s.
func wordLen(s string) int {
	n := 0
	for n < len(s) {
		r, sz := utf8.DecodeRuneInString(s[n:])
		if !(r == '_' || r == '$' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
			break
		}
		n += sz
	}
	return n
}

// joinWords are the words that can come before JOIN in a join.
var joinWords = map[string]bool{"left": true, "right": true, "full": true, "inner": true, "cross": true, "natural": true, "outer": true}

// clauseWords start a clause of a query on a line of its own (GROUP and ORDER when BY follows,
// a join's first word).
var clauseWords = map[string]bool{"select": true, "from": true, "where": true, "group": true, "having": true, "order": true,
	"limit": true, "union": true, "intersect": true, "except": true, "join": true, "with": true}

// formatSQL lays out an SQL statement for reading: each clause (SELECT, FROM, WHERE, GROUP BY,
// HAVING, ORDER BY, LIMIT, joins, UNION/INTERSECT/EXCEPT) on a new line, subqueries indented
// by two spaces with their closing parenthesis on a line of its own, other white space
// collapsed to one space. It changes only white space between tokens: literals, quoted
// names, comments and the case of words are kept as written, a line comment still ends its
// line, and tokens that touched still touch unless a clause or subquery begins between them.
func formatSQL(sql string) string {
	toks := sqlTokens(sql)
	// sig[k] is the k-th token that is not white space; gap[k] the white space before it.
	var sig []sqlToken
	var gap []string
	space := ""
	for _, t := range toks {
		if t.kind == tokSpace {
			space = t.text
			continue
		}
		sig = append(sig, t)
		gap = append(gap, space)
		space = ""
	}
	word := func(k int) string {
		if k < 0 || k >= len(sig) || sig[k].kind != tokWord {
			return ""
		}
		return strings.ToLower(sig[k].text)
	}
	// Each open parenthesis: whether it opens a subquery.
	stack := []bool{}
	depth := 0 // subqueries open
	query := func() bool { return len(stack) == 0 || stack[len(stack)-1] }
	var b strings.Builder
	b.Grow(len(sql) + len(sql)/8)
	newline := func(indent int) {
		b.WriteByte('\n')
		b.WriteString(strings.Repeat("  ", indent))
	}
	for k, t := range sig {
		brk := false
		w := word(k)
		afterDot := k > 0 && sig[k-1].text == "."
		switch {
		case t.text == ")" && len(stack) > 0:
			if stack[len(stack)-1] {
				depth--
				brk = true
			}
			stack = stack[:len(stack)-1]
		case clauseWords[w] && query() && !afterDot:
			switch w {
			case "group", "order":
				brk = word(k+1) == "by"
			case "join":
				brk = !joinWords[word(k-1)]
			default:
				brk = true
			}
		case joinWords[w] && w != "outer" && query() && !afterDot && !joinWords[word(k-1)]:
			j := k + 1
			for joinWords[word(j)] {
				j++
			}
			brk = word(j) == "join"
		}
		switch {
		case k == 0:
		case sig[k-1].kind == tokLineComment:
			newline(depth)
		case brk:
			newline(depth)
		case strings.Contains(gap[k], "\n") && (t.kind == tokLineComment || t.kind == tokBlockComment):
			newline(depth)
		case gap[k] != "":
			b.WriteByte(' ')
		}
		b.WriteString(t.text)
		if t.text == "(" {
			sub := word(k+1) == "select" || word(k+1) == "with"
			stack = append(stack, sub)
			if sub {
				depth++
			}
		}
	}
	return b.String()
}

// sqlSpace reports the white space SQLite, PostgreSQL and MySQL read between tokens: space,
// tab, newline, vertical tab, form feed, carriage return. Other Unicode spaces (no-break,
// ideographic, U+2028) are part of a name to them, so formatSQL keeps them as written.
func sqlSpace(c byte) bool {
	return c == ' ' || c >= '\t' && c <= '\r'
}
