package mysql

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/sandbox"
)

// MariaDB matches LIKE (and JSON_SEARCH's pattern, against each string of the document) with
// wildcmp, which tries the pattern's part after each % at every place the text holds its first
// literal character, comparing up to the next %, and never checks for a kill: measured on
// MariaDB 10.11 under max_statement_time 1 s, a 64-byte pattern (63 threes and a four between
// %s) over 4 MiB of threes built by nesting HEX ran 15 s, and a 30 KB literal pattern over the
// same value ran on for over 5 minutes in a thread marked Killed. So a pattern must be a string
// literal whose cost, the comparisons it may take per character of the text
// (sandbox.LikePasses), is at most mysqlMaxPasses, as on PostgreSQL: what remains is a few
// passes over a value of up to max_allowed_packet (16 MiB by default).

// mysqlMaxPasses bounds the comparisons a LIKE pattern may cost per character of the text.
// BIRD's LIKE '_:%:__.___', the costliest of the golds, costs 7.
const mysqlMaxPasses = 8

// mysqlLikeRule refuses the LIKE pattern that rest (lower-cased MySQL text) starts with, fn
// naming the search (LIKE, JSON_SEARCH), unless it is a string literal (adjacent literals
// joined, an introducer, parentheses and BINARY allowed, an ESCAPE literal of at most one
// character after it) of at most mysqlMaxPasses, a number or NULL. With whole, nothing but
// that may follow (a function's argument).
func mysqlLikeRule(fn, rest string, whole bool) string {
	k := sandbox.SkipBlank(rest, 0)
	if w := wordAt(rest, k); w == "binary" {
		k = sandbox.SkipBlank(rest, k+len(w))
	}
	pattern, k, ok := mysqlLiteral(rest, k)
	if !ok {
		if end, num := mysqlNumber(rest, k); num && (!whole || sandbox.SkipBlank(rest, end) == len(rest)) {
			return ""
		}
		return fmt.Sprintf("refused: %s's pattern must be a string literal (here %q): MariaDB tries the pattern at every position of the text without checking for a kill, so its time is the product of the two lengths, and a column or an expression may hold a value built to megabytes; REGEXP, which PCRE runs within its match limit, can do the same search",
			fn, cut(strings.TrimSpace(rest), 80))
	}
	esc := int('\\')
	k = sandbox.SkipBlank(rest, k)
	for wordAt(rest, k) == "collate" { // 'a!%' COLLATE utf8mb4_bin ESCAPE '!': the escape still counts
		k = sandbox.SkipBlank(rest, k+len("collate"))
		if k < len(rest) && (rest[k] == '`' || rest[k] == '\'' || rest[k] == '"') {
			k = sandbox.SkipQuoted(rest, k)
		} else {
			k += len(wordAt(rest, k))
		}
		k = sandbox.SkipBlank(rest, k)
	}
	if wordAt(rest, k) == "escape" {
		v, end, ok := mysqlLiteral(rest, sandbox.SkipBlank(rest, k+len("escape")))
		switch {
		case !ok || utf8.RuneCountInString(v) > 1 || v != "" && v[0] >= 0x80:
			return "refused: " + fn + " with an ESCAPE that is not a one-character string literal is not allowed on MySQL/MariaDB (the screen reads a pattern by its escape character)"
		case v == "":
			esc = -1
		default:
			esc = int(v[0])
		}
		k = sandbox.SkipBlank(rest, end)
	}
	if whole && k != len(rest) {
		return fmt.Sprintf("refused: %s's pattern must be a string literal (here %q): MariaDB tries the pattern at every position of the text without checking for a kill", fn, cut(strings.TrimSpace(rest), 80))
	}
	if p := sandbox.LikePasses(pattern, esc, mysqlAtom, mysqlMaxPasses); p > mysqlMaxPasses {
		return fmt.Sprintf("refused: %s with the pattern %q may take over %d comparisons per character of the text, which MariaDB makes without checking for a kill (a value built to megabytes would hold the server's thread for minutes past the deadline); use a shorter or less repetitive pattern, or REGEXP, which PCRE runs within its match limit",
			fn, cut(pattern, 40), mysqlMaxPasses)
	}
	return ""
}

// mysqlAtom is the atom of the character s starts with (sandbox.LikeSegments): an ASCII
// character folded to lower case, and any other character sandbox.Wild, since MariaDB's
// case- and accent-insensitive collations match it to others (é to e).
func mysqlAtom(s string) (int, int) {
	r, n := utf8.DecodeRuneInString(s)
	switch {
	case r >= utf8.RuneSelf || r == utf8.RuneError:
		return sandbox.Wild, max(n, 1)
	case r >= 'A' && r <= 'Z':
		return int(r + 'a' - 'A'), n
	}
	return int(r), n
}

// mysqlLiteral reads the string literal at s[k] as MySQL does: within parentheses and
// mysqlCaseCalls, after an introducer (_utf8mb4, N), adjacent literals joined, escapes undone but LIKE's \% and \_ (and
// \\, one backslash), a doubled quote one quote; and CONCAT of such literals and of integers
// written without a sign or a leading zero (CONCAT('%', 'York', '%'), CONCAT('%', 2019, '%')).
// It returns the value and the index after it, or ok false where s[k] starts no such literal
// (a column, another call, a hex literal).
func mysqlLiteral(s string, k int) (string, int, bool) {
	parens := 0
	for k < len(s) && s[k] == '(' {
		parens++
		k = sandbox.SkipBlank(s, k+1)
	}
	w := wordAt(s, k)
	if open := sandbox.SkipBlank(s, k+len(w)); (mysqlCaseCalls[w] || w == "concat") && open < len(s) && s[open] == '(' {
		var b strings.Builder
		end := open
		for {
			arg := sandbox.SkipBlank(s, end+1)
			v, next, ok := mysqlLiteral(s, arg)
			if !ok && w == "concat" {
				v, next, ok = mysqlInteger(s, arg)
			}
			if !ok || next >= len(s) || s[next] != ')' && (s[next] != ',' || w != "concat") {
				return "", k, false
			}
			b.WriteString(v)
			if end = next; s[end] == ')' {
				break
			}
		}
		end, ok := mysqlCloseParens(s, sandbox.SkipBlank(s, end+1), parens)
		return b.String(), end, ok
	}
	if w != "" && (w[0] == '_' || w == "n") && k+len(w) < len(s) && s[k+len(w)] == '\'' {
		k += len(w)
	}
	if k >= len(s) || s[k] != '\'' && s[k] != '"' {
		return "", k, false
	}
	var b strings.Builder
	for k < len(s) && (s[k] == '\'' || s[k] == '"') {
		end := sandbox.SkipQuoted(s, k)
		if end == len(s) && (end-k < 2 || s[end-1] != s[k]) {
			return "", k, false // not closed
		}
		b.WriteString(mysqlUnquote(s[k+1:end-1], s[k]))
		k = sandbox.SkipBlank(s, end)
	}
	k, ok := mysqlCloseParens(s, k, parens)
	return b.String(), k, ok
}

// mysqlCaseCalls change a literal's case only, which LIKE's case-insensitive comparisons and
// its cost ignore: LOWER('%New York%') is measured as its literal.
var mysqlCaseCalls = map[string]bool{"lower": true, "upper": true, "lcase": true, "ucase": true}

// mysqlCloseParens is the index after the n closing parentheses (blanks between) at s[k], and
// whether they are there.
func mysqlCloseParens(s string, k, n int) (int, bool) {
	for ; n > 0; n-- {
		if k >= len(s) || s[k] != ')' {
			return k, false
		}
		k = sandbox.SkipBlank(s, k+1)
	}
	return k, true
}

// mysqlUnquote undoes the escapes of a literal's text quoted by q, keeping \% and \_ as LIKE
// reads them.
func mysqlUnquote(s string, q byte) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] == '%' || s[i] == '_' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		case c == q && i+1 < len(s) && s[i+1] == q:
			i++
			b.WriteByte(q)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// mysqlNumber reports whether s[k] starts a number (digits, a point, an exponent; a sign
// before a digit) or NULL, and the index after it. A hex or bit literal (0x25…, 0b1…) is a
// string in MySQL, not a number.
func mysqlNumber(s string, k int) (int, bool) {
	if w := wordAt(s, k); w == "null" {
		return k + len(w), true
	}
	if k < len(s) && (s[k] == '-' || s[k] == '+') {
		k++
	}
	start := k
	for k < len(s) && (s[k] >= '0' && s[k] <= '9' || s[k] == '.' ||
		s[k] == 'e' && k > start || (s[k] == '-' || s[k] == '+') && k > start && s[k-1] == 'e') {
		k++
	}
	if k == start || s[start] == 'e' || k < len(s) && sandbox.IsIdentByte(s[k]) {
		return k, false
	}
	return k, true
}

// mysqlInteger reads the integer at s[k], digits without a sign or a leading zero (the text
// CONCAT makes of it is the same), and returns it and the index after it and the blanks after
// it, or ok false.
func mysqlInteger(s string, k int) (string, int, bool) {
	w := wordAt(s, k)
	if w == "" || w[0] == '0' && len(w) > 1 || strings.Trim(w, "0123456789") != "" {
		return "", k, false
	}
	return w, sandbox.SkipBlank(s, k+len(w)), true
}

// wordAt is the unquoted word (letters, digits, _, $) at s[k], or "".
func wordAt(s string, k int) string {
	j := k
	for j < len(s) && sandbox.IsIdentByte(s[j]) {
		j++
	}
	return s[k:j]
}
