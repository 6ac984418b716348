package postgres

import (
	"strings"
	"unicode/utf8"
)

// pgTokKind is the kind of a pgToken.
type pgTokKind int

const (
	pgWord   pgTokKind = iota // an unquoted name or keyword, lower-cased
	pgQuoted                  // a quoted identifier ("x"), its name lower-cased
	pgString                  // a string constant of any form
	pgNumber                  // a numeric constant
	pgOp                      // a run of operator characters (+ - * / < > = ~ ! @ # % ^ & | ` ?)
	pgPunct                   // one of ( ) [ ] , ; . : or the cast ::
)

// pgToken is one token of a PostgreSQL statement as the server's lexer splits it.
type pgToken struct {
	kind pgTokKind
	// text: a word's or quoted identifier's name in lower case, an operator or punctuation as
	// written; a string's value when plain, else the constant as written.
	text string
	// plain: a string constant in single quotes with no prefix, whose text is its value (with
	// standard_conforming_strings, PostgreSQL's default since 9.1, a backslash is itself).
	plain bool
	// ident: the name the server looks up: a quoted identifier's as written, case kept; a
	// word's with only A to Z lower-cased, as the server folds it in a UTF-8 database (text
	// lower-cases every letter: ÄBC is Äbc on the server, äbc in text).
	ident string
	// at: where a pgPunct token starts in the text (pgSplit cuts at a ;).
	at int
}

// pgMaxIdent is the longest name PostgreSQL keeps, in bytes (NAMEDATALEN - 1): a longer one,
// quoted or not, is cut at a character boundary before it is looked up or named in an error.
const pgMaxIdent = 63

// serverName is the name t stands for on the server (ident) as the server cuts it.
func (t pgToken) serverName() string {
	name := t.ident
	if len(name) > pgMaxIdent {
		cut := pgMaxIdent
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		name = name[:cut]
	}
	return name
}

// pgFoldASCII is w with A to Z lower-cased and every other byte kept.
func pgFoldASCII(w string) string {
	b := []byte(w)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// pgOpChars are the characters PostgreSQL's lexer puts in an operator.
const pgOpChars = "+-*/<>=~!@#%^&|`?"

// pgLex splits q into tokens the way PostgreSQL's lexer does where it matters to the screen:
// comments (-- to a line feed or carriage return, /* */ nested) dropped; string constants ('…'
// with ” for a quote, E'…' with backslash escapes, $tag$…$tag$, and the B, X, N, U& prefixed
// forms), adjacent ones joined as the server joins them, a '…' that continues an E'…' on a later
// line read with its escapes as the server reads it (pgContinues); quoted identifiers ("…" with "" for a quote);
// operators as maximal runs cut before a comment. An unterminated string, identifier or
// comment runs to the end, where the server fails the statement. It never fails itself.
func pgLex(q string) []pgToken {
	var toks []pgToken
	escEnd := -1 // where the last E'…' string (or its last continuation) ended, else -1
	for i := 0; i < len(q); {
		if len(toks) > 0 && toks[len(toks)-1].kind != pgString {
			escEnd = -1
		}
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(q[i:], "--"):
			i = pgSkipLineComment(q, i)
		case strings.HasPrefix(q[i:], "/*"):
			i = pgSkipComment(q, i)
		case c == '\'':
			// A continuation of an E'…' string is read as the E string it continues, backslash
			// escapes included: E'a'<newline>'\' …' is one string on the server.
			if escEnd >= 0 && pgContinues(q[escEnd:i]) {
				_, next := pgQuotedText(q, i, '\'', true)
				toks = pgAddString(toks, pgToken{kind: pgString, text: q[i:next]})
				i, escEnd = next, next
				continue
			}
			val, next := pgQuotedText(q, i, '\'', false)
			toks = pgAddString(toks, pgToken{kind: pgString, text: val, plain: true})
			i = next
		case c == '"':
			val, next := pgQuotedText(q, i, '"', false)
			toks = append(toks, pgToken{kind: pgQuoted, text: strings.ToLower(val), ident: val})
			i = next
		case c == '$' && pgDollarTag(q[i:]) != "":
			tag := pgDollarTag(q[i:])
			end := strings.Index(q[i+len(tag):], tag)
			next := len(q)
			if end >= 0 {
				next = i + len(tag) + end + len(tag)
			}
			toks = pgAddString(toks, pgToken{kind: pgString, text: q[i:next]})
			i = next
		case pgIdentStart(c):
			j := i + 1
			for j < len(q) && pgIdentCont(q[j]) {
				j++
			}
			word := strings.ToLower(q[i:j])
			// A one-letter prefix right before a quote makes a string of another form; U&
			// before a quote, a string or identifier with Unicode escapes.
			if j < len(q) && q[j] == '\'' && (word == "e" || word == "b" || word == "x" || word == "n") {
				_, next := pgQuotedText(q, j, '\'', word == "e")
				toks = pgAddString(toks, pgToken{kind: pgString, text: q[i:next]})
				i = next
				if word == "e" {
					escEnd = next
				}
				continue
			}
			if word == "u" && strings.HasPrefix(q[j:], "&") && j+1 < len(q) && (q[j+1] == '\'' || q[j+1] == '"') {
				val, next := pgQuotedText(q, j+1, q[j+1], false)
				if q[j+1] == '"' {
					toks = append(toks, pgToken{kind: pgQuoted, text: strings.ToLower(val), ident: val})
				} else {
					toks = pgAddString(toks, pgToken{kind: pgString, text: q[i:next]})
				}
				i = next
				continue
			}
			toks = append(toks, pgToken{kind: pgWord, text: word, ident: pgFoldASCII(q[i:j])})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(q) && q[i+1] >= '0' && q[i+1] <= '9':
			j := i + 1
			// Not a $: the server reads 1$a$x$a$ as a number and a dollar quote.
			for j < len(q) && (pgIdentCont(q[j]) && q[j] != '$' || q[j] == '.' || (q[j] == '+' || q[j] == '-') && (q[j-1] == 'e' || q[j-1] == 'E')) {
				j++
			}
			toks = append(toks, pgToken{kind: pgNumber, text: q[i:j]})
			i = j
		case c == ':' && strings.HasPrefix(q[i:], "::"):
			toks = append(toks, pgToken{kind: pgPunct, text: "::"})
			i += 2
		case strings.IndexByte("()[],;.:", c) >= 0:
			toks = append(toks, pgToken{kind: pgPunct, text: q[i : i+1], at: i})
			i++
		case strings.IndexByte(pgOpChars, c) >= 0:
			j := i + 1
			for j < len(q) && strings.IndexByte(pgOpChars, q[j]) >= 0 && !strings.HasPrefix(q[j:], "--") && !strings.HasPrefix(q[j:], "/*") {
				j++
			}
			toks = append(toks, pgToken{kind: pgOp, text: q[i:j]})
			i = j
		default: // a parameter ($1) or a byte the server rejects
			toks = append(toks, pgToken{kind: pgPunct, text: q[i : i+1], at: i})
			i++
		}
	}
	return toks
}

// pgSplit splits q at its first ; as PostgreSQL's lexer reads it (pgLex): outside strings of
// every form (E'it\'s' holds a quote), dollar quotes, quoted identifiers and comments (a -- comment
// ends at a carriage return too, /* */ nest). The screen's one-statement check (ScreenRules.Split).
func pgSplit(q string) (string, string) {
	for _, t := range pgLex(q) {
		if t.kind == pgPunct && t.text == ";" {
			return q[:t.at], q[t.at+1:]
		}
	}
	return q, ""
}

// pgSkip returns the index after the whitespace or comment that starts at s[i] as PostgreSQL's
// lexer reads them, or i where none does (ScreenRules.Skip): -- to a line feed, a carriage
// return or the end, /* */ nested and closed (one left open fails the whole text: "unterminated
// /* comment"); whitespace is space, tab, line feed, carriage return and form feed (PostgreSQL
// 15 fails a vertical tab there as a syntax error).
func pgSkip(s string, i int) int {
	switch c := s[i]; {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
		return i + 1
	case strings.HasPrefix(s[i:], "--"):
		return pgSkipLineComment(s, i)
	case strings.HasPrefix(s[i:], "/*"):
		if end, closed := pgCommentEnd(s, i); closed {
			return end
		}
	}
	return i
}

// pgAddString appends s to toks, joined to a string right before it: the server reads
// 'a'<newline>'b' as 'ab' (and fails the statement when no newline separates them).
func pgAddString(toks []pgToken, s pgToken) []pgToken {
	if n := len(toks); n > 0 && toks[n-1].kind == pgString {
		last := &toks[n-1]
		if last.plain && s.plain {
			last.text += s.text
		} else {
			last.text, last.plain = last.text+" "+s.text, false
		}
		return toks
	}
	return append(toks, s)
}

// pgQuotedText reads the quoted text starting at q[i] == quote (a doubled quote stands for
// one; with backslash, a backslash escapes the next byte) and returns its text, escapes left
// as written, and the index after the closing quote (len(q) when there is none).
func pgQuotedText(q string, i int, quote byte, backslash bool) (string, int) {
	var b strings.Builder
	for j := i + 1; j < len(q); j++ {
		switch {
		case backslash && q[j] == '\\' && j+1 < len(q):
			b.WriteByte(q[j])
			b.WriteByte(q[j+1])
			j++
		case q[j] == quote && j+1 < len(q) && q[j+1] == quote:
			b.WriteByte(quote)
			j++
		case q[j] == quote:
			return b.String(), j + 1
		default:
			b.WriteByte(q[j])
		}
	}
	return b.String(), len(q)
}

// pgSkipLineComment returns the index after the -- comment at q[i]: the server ends one at a
// carriage return as at a line feed (SELECT 1 --<CR>, x runs x).
func pgSkipLineComment(q string, i int) int {
	if j := strings.IndexAny(q[i:], "\n\r"); j >= 0 {
		return i + j + 1
	}
	return len(q)
}

// pgContinues reports whether sep, the text between two string constants, makes the second
// continue the first, as the server's lexer reads it: whitespace and -- comments only, with
// at least one line break (\n or \r); a /* */ comment or no line break ends the first string.
func pgContinues(sep string) bool {
	brk := false
	for i := 0; i < len(sep); {
		switch c := sep[i]; {
		case c == '\n' || c == '\r':
			brk = true
			i++
		case c == ' ' || c == '\t' || c == '\f' || c == '\v':
			i++
		case strings.HasPrefix(sep[i:], "--"):
			i = pgSkipLineComment(sep, i)
			brk = true // a -- comment before the quote ended at a line break
		default:
			return false
		}
	}
	return brk
}

// pgSkipComment returns the index after the /* */ comment at q[i], nested ones included, or
// len(q) where it is left open.
func pgSkipComment(q string, i int) int {
	end, _ := pgCommentEnd(q, i)
	return end
}

// pgCommentEnd returns the index after the /* */ comment at q[i], nested ones included, and
// whether it closes; one left open runs to len(q).
func pgCommentEnd(q string, i int) (int, bool) {
	depth := 0
	for i < len(q) {
		switch {
		case strings.HasPrefix(q[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(q[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i, true
			}
		default:
			i++
		}
	}
	return i, false
}

// pgDollarTag returns the opening $tag$ (or $$) that s starts with, or "".
func pgDollarTag(s string) string {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1]
		case j == 1 && !pgIdentStart(c), !pgIdentCont(c):
			return ""
		}
	}
	return ""
}

func pgIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func pgIdentCont(c byte) bool { return pgIdentStart(c) || c >= '0' && c <= '9' || c == '$' }
