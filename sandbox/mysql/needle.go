package mysql

import (
	"fmt"
	"strings"

	"github.com/chainedsql/chainedsql/sandbox"
)

// mysqlSearchCalls are the string searches MariaDB runs without checking for a kill, in time up
// to the product of the two lengths, each with the index of its needle among its arguments
// (POSITION's is the part before IN). Over a 16 MiB value built by nesting (HEX of HEX, CONCAT in
// derived tables: the builders the screen refuses by name cannot all be refused), a needle of
// a megabyte runs for hours in a thread marked Killed; a literal needle of a few dozen bytes ends
// within about a second.
var mysqlSearchCalls = map[string]int{"locate": 0, "instr": 1, "position": 0, "substring_index": 1}

// mysqlMaxNeedle is the longest literal needle a search may take, in bytes.
const mysqlMaxNeedle = 64

// mysqlSearchRule refuses, at the word w of lower (mysqlText's reading: quoted when it was
// backquoted, j the index after it, next the index after the blanks after it, call whether (
// is there), a call of one of mysqlSearchCalls whose needle is not a string literal of at most
// mysqlMaxNeedle bytes, a number or NULL: a column may hold a value built in a derived table,
// and an expression may build one; and a LIKE or JSON_SEARCH pattern (mysqlLikeRule) or a
// trailing TRIM (mysqlTrimRule) MariaDB cannot interrupt. A quoted name is no operator (`like`
// is a column).
func mysqlSearchRule(lower, w string, quoted bool, j, next int, call bool) string {
	if at, ok := mysqlSearchCalls[w]; ok && call {
		kw := ""
		if w == "position" {
			kw = "in"
		}
		args := callArgs(lower, next, kw)
		if at < len(args) && !safeNeedle(args[at]) {
			return fmt.Sprintf("refused: %s's needle must be a string literal of at most %d bytes, a number or NULL (here %q): MariaDB cannot interrupt a search, whose time is the product of the two lengths, and a column or an expression may hold a value built to megabytes",
				strings.ToUpper(w), mysqlMaxNeedle, cut(args[at], 80))
		}
	}
	switch {
	case w == "like" && !quoted: // SOUNDS LIKE too: a column named sounds LIKE a pattern reads as one
		return mysqlLikeRule("LIKE", lower[j:], false)
	case (w == "trim" || w == "trim_oracle") && call:
		return mysqlTrimRule(callArgs(lower, next, "from"))
	case w == "json_search" && call:
		if args := callArgs(lower, next, ""); len(args) > 2 {
			pattern := args[2]
			if len(args) > 3 && args[3] != "null" { // NULL: the default escape, \\
				pattern += " escape " + args[3]
			}
			return mysqlLikeRule("JSON_SEARCH", pattern, true)
		}
	}
	return ""
}

// callArgs returns the top-level arguments of the call whose "(" is s[open], trimmed, each
// comment in them a space (a ")" or "," inside one is no end: MySQL reads comments as
// sandbox.SkipBlank does); with a keyword kw, the first argument ends at a top-level kw too
// (POSITION(needle IN haystack), TRIM(remstr FROM str)).
func callArgs(s string, open int, kw string) []string {
	var args []string
	var cur strings.Builder
	next := func() {
		args = append(args, strings.TrimSpace(cur.String()))
		cur.Reset()
	}
	depth := 0
	for k := open; k < len(s); {
		c := s[k]
		switch {
		case c == '\'' || c == '"' || c == '`':
			end := sandbox.SkipQuoted(s, k)
			cur.WriteString(s[k:end])
			k = end
			continue
		case (c == '/' || c == '-' || c == '#') && sandbox.SkipBlank(s, k) > k:
			cur.WriteByte(' ')
			k = sandbox.SkipBlank(s, k)
			continue
		case c == '(':
			if depth++; depth == 1 {
				k++
				continue
			}
		case c == ')':
			if depth--; depth == 0 {
				next()
				return args
			}
		case c == ',' && depth == 1:
			next()
			k++
			continue
		case kw != "" && depth == 1 && len(args) == 0 && strings.HasPrefix(s[k:], kw) &&
			k > 0 && !sandbox.IsIdentByte(s[k-1]) && (k+len(kw) == len(s) || !sandbox.IsIdentByte(s[k+len(kw)])):
			next()
			k += len(kw)
			continue
		}
		cur.WriteByte(c)
		k++
	}
	next()
	return args
}

// safeNeedle reports whether a search's needle argument is a string literal of at most
// mysqlMaxNeedle bytes (one quoted text, nothing after it), a number or NULL.
func safeNeedle(a string) bool {
	if a == "null" {
		return true
	}
	if a != "" && (a[0] == '\'' || a[0] == '"') {
		end := sandbox.SkipQuoted(a, 0)
		return end == len(a) && end-2 <= mysqlMaxNeedle
	}
	if a == "" {
		return false
	}
	for i := 0; i < len(a); i++ {
		if c := a[i]; !(c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+' || c == 'e') {
			return false
		}
	}
	return true
}

// cut is s cut at n bytes with an ellipsis.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// mysqlTrimRule refuses TRIM([BOTH | TRAILING] remstr FROM str) (args as callArgs split it at
// FROM) whose remstr is not a string literal of at most one byte. For a remstr of more bytes in
// a multi-byte character set, MariaDB removes each trailing copy by walking the string from its
// start again, without checking for a kill: TRIM(TRAILING '33' FROM x) over 64 KiB of threes
// ran 17 s past a 1 s limit, over 256 KiB for minutes. LEADING walks once, and one byte (a space,
// the default) is removed in one pass from the end.
func mysqlTrimRule(args []string) string {
	if len(args) < 2 {
		return ""
	}
	rem := args[0]
	switch w := wordAt(rem, 0); w {
	case "leading":
		return ""
	case "both", "trailing":
		rem = strings.TrimSpace(rem[len(w):])
	}
	if rem == "" {
		return ""
	}
	if v, end, ok := mysqlLiteral(rem, 0); ok && end == len(rem) && len(v) <= 1 {
		return ""
	}
	return fmt.Sprintf("refused: TRIM of %q from the end (BOTH, TRAILING or neither) is not allowed on MySQL/MariaDB: only a literal of one character (' ') may be trimmed from the end, since MariaDB removes each trailing copy of a longer one by walking the string from its start again, without checking for a kill (its time is the square of the string's length); TRIM(LEADING … FROM …) and REGEXP_SUBSTR can do the rest",
		cut(rem, 40))
}
