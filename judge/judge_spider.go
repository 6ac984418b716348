package judge

import (
	"regexp"
	"strings"
	"unicode"
)

// This file holds the text rewrites test-suite-sql-eval (taoyds/test-suite-sql-eval,
// evaluation.py --etype exec with exec_eval.py) applies to the gold and the predicted SQL before
// executing them, reimplemented from its source:
//
//   - evaluation.py reads each prediction line stripped and replaces every "value" in it with "1"
//     (case-sensitive, anywhere: identifiers and string literals included);
//   - postprocess joins "> =", "< =" and "! =" into ">=", "<=" and "!=" (anywhere);
//   - remove_distinct (unless --keep_distinct) keeps only the FIRST statement sqlparse finds and
//     drops every token of it whose lowercase text is "distinct": the keyword in SELECT DISTINCT
//     and COUNT(DISTINCT x), but also a bare identifier named distinct, while DISTINCT inside a
//     string, a quoted name or a comment stays;
//   - exec_on_db replaces YEAR(CURDATE()) (and the spaces after it) with 2020;
//   - rows compare in order when the lowercased gold (after the rewrites) contains the exact text
//     "order by" anywhere: in a subquery, a string or a comment too, but not "order  by".
//
// The tokenizer below is written here because remove_distinct's behaviour is that of one library
// (sqlparse's lexer and statement splitter, Python only): which text is one token, where the first
// statement ends. It follows sqlparse 0.4's lexer rules in their order (the multi-word keyword
// rules matter: "ORDER BY# x" is a keyword and a comment, "BY#" alone would be one word);
// TestSpiderRemoveDistinctAgainstSqlparse compares it with the real sqlparse.

// spiderPredText is how evaluation.py reads a prediction: stripped, "value" replaced by "1".
func spiderPredText(sql string) string {
	return strings.ReplaceAll(pyStrip(sql), "value", "1")
}

// spiderPostprocess is exec_eval.postprocess.
func spiderPostprocess(sql string) string {
	sql = strings.ReplaceAll(sql, "> =", ">=")
	sql = strings.ReplaceAll(sql, "< =", "<=")
	return strings.ReplaceAll(sql, "! =", "!=")
}

// curYear is exec_eval.replace_cur_year's pattern (Python's \s is Unicode whitespace; SQL text
// in practice holds ASCII spaces).
var curYear = regexp.MustCompile(`(?i)YEAR\s*\(\s*CURDATE\s*\(\s*\)\s*\)\s*`)

// spiderCurYear is exec_eval.replace_cur_year.
func spiderCurYear(sql string) string { return curYear.ReplaceAllString(sql, "2020") }

// spiderOrdered is exec_eval's order_matters: "order by" anywhere in the lowercased gold.
func spiderOrdered(gold string) bool { return strings.Contains(strings.ToLower(gold), "order by") }

// spiderRemoveDistinct is parse.remove_distinct: the first statement of s as sqlparse splits it,
// without its "distinct" tokens. ok is false when sqlparse finds no statement (blank text; the
// official code then fails with an IndexError).
func spiderRemoveDistinct(s string) (string, bool) {
	toks := firstStatement(sqlparseTokens(s))
	if toks == nil {
		return "", false
	}
	var b strings.Builder
	for _, t := range toks {
		if !strings.EqualFold(t.text, "distinct") || len(t.text) != len("distinct") {
			b.WriteString(t.text)
		}
	}
	return b.String(), true
}

// tokKind is the part of a sqlparse token type the splitter looks at.
type tokKind uint8

const (
	tokOther      tokKind = iota
	tokWhitespace         // Whitespace (not Newline): continues a statement after its ";"
	tokComment            // Comment.Single (not a hint): continues a statement after its ";"
	tokNewline
	tokPunct   // Punctuation
	tokKeyword // any Keyword type
	tokDDL     // Keyword.DDL
)

type sqlTok struct {
	text string
	kind tokKind
}

// firstStatement is sqlparse's StatementSplitter up to the end of its first statement: a ";"
// outside parentheses ends it, and the Whitespace and single-line comments right after the ";"
// belong to it (a newline does not). The nesting level counts parentheses and, as sqlparse does,
// BEGIN/END-style keywords: END lowers it even after CASE (so CASE ... END leaves it at -1).
// nil means no statement (only whitespace).
func firstStatement(toks []sqlTok) []sqlTok {
	level, beginDepth := 0, 0
	isCreate := false
	consumeWS := false
	for i, t := range toks {
		if consumeWS && t.kind != tokWhitespace && t.kind != tokComment {
			return toks[:i]
		}
		switch {
		case t.kind == tokPunct && t.text == "(":
			level++
		case t.kind == tokPunct && t.text == ")":
			level--
		case t.kind == tokDDL && strings.HasPrefix(strings.ToUpper(t.text), "CREATE"):
			isCreate = true
		case t.kind == tokKeyword || t.kind == tokDDL:
			switch u := strings.ToUpper(t.text); {
			case u == "DECLARE" && isCreate && beginDepth == 0:
				level++
			case u == "BEGIN":
				beginDepth++
				if isCreate {
					level++
				}
			case u == "END":
				beginDepth = max(0, beginDepth-1)
				level--
			case (u == "IF" || u == "FOR" || u == "WHILE" || u == "CASE") && isCreate && beginDepth > 0:
				level++
			case u == "END IF" || u == "END FOR" || u == "END WHILE":
				level--
			}
		}
		if level <= 0 && t.kind == tokPunct && t.text == ";" {
			consumeWS = true
		}
	}
	for _, t := range toks {
		if t.kind != tokWhitespace && t.kind != tokNewline {
			return toks
		}
	}
	return nil
}

// splitterKeywords are the keywords firstStatement acts on; sqlparse types each as a Keyword when
// the generic word rule produces it.
var splitterKeywords = map[string]bool{"END": true, "BEGIN": true, "DECLARE": true, "IF": true, "FOR": true, "WHILE": true, "CASE": true}

// sqlparseTokens splits s as sqlparse's lexer does: at each position the first rule that matches
// wins, and a character no rule matches is a token of its own.
func sqlparseTokens(s string) []sqlTok {
	r := []rune(s)
	var out []sqlTok
	for pos := 0; pos < len(r); {
		n, kind := lexAt(r, pos)
		if n <= 0 {
			n, kind = 1, tokOther
		}
		out = append(out, sqlTok{text: string(r[pos : pos+n]), kind: kind})
		pos += n
	}
	return out
}

// lexAt returns the length and kind of the token at pos (0 when no rule matches).
func lexAt(r []rune, pos int) (int, tokKind) {
	c := r[pos]
	at := func(s string) bool { return hasFold(r, pos, s) }
	// Comments: "--" or "# " to the end of the line; /* */ (unterminated: not a comment).
	if at("--") || at("# ") {
		hint := pos+2 < len(r) && r[pos+2] == '+'
		i := pos + 2
		for i < len(r) && r[i] != '\n' && r[i] != '\r' {
			i++
		}
		if i < len(r) {
			if r[i] == '\r' && i+1 < len(r) && r[i+1] == '\n' {
				i++
			}
			i++
		}
		if hint {
			return i - pos, tokOther
		}
		return i - pos, tokComment
	}
	if at("/*") {
		if end := indexRunes(r, pos+2, "*/"); end >= 0 {
			return end + 2 - pos, tokOther
		}
	}
	switch {
	case c == '\r' && pos+1 < len(r) && r[pos+1] == '\n':
		return 2, tokNewline
	case c == '\r' || c == '\n':
		return 1, tokNewline
	case pyIsSpace(c):
		return 1, tokWhitespace
	case at(":=") || at("::"):
		return 2, tokOther
	case c == '*':
		return 1, tokOther
	case c == '`' || c == '´':
		if n := quoted(r, pos, c, false); n > 0 {
			return n, tokOther
		}
	}
	if n := dollarQuoted(r, pos); n > 0 {
		return n, tokOther
	}
	switch {
	case c == '?':
		return 1, tokOther
	case c == '%':
		i := pos + 1
		if i < len(r) && r[i] == '(' {
			j := i + 1
			for j < len(r) && isWordRune(r[j]) {
				j++
			}
			if j > i+1 && j < len(r) && r[j] == ')' {
				i = j + 1
			}
		}
		if i < len(r) && (r[i] == 's' || r[i] == 'S') {
			return i + 1 - pos, tokOther
		}
	case (c == '$' || c == ':' || c == '?') && (pos == 0 || !isWordRune(r[pos-1])):
		if n := wordRun(r, pos+1); n > 0 {
			return n + 1, tokOther
		}
	case c == '\\':
		if n := wordRun(r, pos+1); n > 0 {
			return n + 1, tokOther
		}
	}
	// (NOT\s+)?IN\b, then (CASE|IN|VALUES|USING|FROM|AS)\b.
	if n := phrase(r, pos, "NOT", "IN"); n > 0 {
		return n, tokOther
	}
	if n := phrase(r, pos, "IN"); n > 0 {
		return n, tokOther
	}
	for _, kw := range []string{"CASE", "VALUES", "USING", "FROM", "AS"} {
		if n := phrase(r, pos, kw); n > 0 {
			return n, tokKeyword
		}
	}
	if c == '@' || c == '#' {
		i := pos + 1
		if c == '#' && at("##") {
			i++
		}
		if i < len(r) && isNameStart(r[i]) {
			if n := wordRun(r, i+1); n > 0 {
				return i + 1 + n - pos, tokOther
			}
		}
		if c == '#' && i == pos+2 && pos+1 < len(r) && isNameStart(r[pos+1]) {
			if n := wordRun(r, pos+2); n > 0 {
				return 2 + n, tokOther
			}
		}
	}
	if isNameStart(c) {
		n := 1 + wordRun(r, pos+1)
		j := pos + n
		k := j
		for k < len(r) && pyIsSpace(r[k]) {
			k++
		}
		switch {
		case k < len(r) && r[k] == '.': // Name followed by a period
			return n, tokOther
		case pos > 0 && r[pos-1] == '.': // Name after a period
			return n, tokOther
		case j < len(r) && r[j] == '(': // Name followed by "(" (a function)
			return n, tokOther
		}
	}
	if n := number(r, pos); n > 0 {
		return n, tokOther
	}
	switch c {
	case '\'', '"':
		if n := quoted(r, pos, c, true); n > 0 {
			return n, tokOther
		}
	case '[':
		if pos == 0 || !(isWordRune(r[pos-1]) || r[pos-1] == ']' || r[pos-1] == ')') {
			j := pos + 1
			for j < len(r) && r[j] != ']' && r[j] != '[' {
				j++
			}
			if j > pos+1 && j < len(r) && r[j] == ']' {
				return j + 1 - pos, tokOther
			}
		}
	}
	if n := joinKeyword(r, pos); n > 0 {
		return n, tokKeyword
	}
	// END(\s+IF|\s+LOOP|\s+WHILE)?\b: one Keyword token, so END LOOP does not lower the level.
	for _, next := range []string{"IF", "LOOP", "WHILE"} {
		if n := phrase(r, pos, "END", next); n > 0 {
			return n, tokKeyword
		}
	}
	if n := phrase(r, pos, "END"); n > 0 {
		return n, tokKeyword
	}
	if n := phrase(r, pos, "NOT", "NULL"); n > 0 {
		return n, tokKeyword
	}
	for _, next := range []string{"FIRST", "LAST"} {
		if n := phrase(r, pos, "NULLS", next); n > 0 {
			return n, tokKeyword
		}
	}
	if n := phrase(r, pos, "UNION", "ALL"); n > 0 {
		return n, tokKeyword
	}
	if n := phrase(r, pos, "CREATE", "OR", "REPLACE"); n > 0 {
		return n, tokDDL
	}
	if n := phrase(r, pos, "CREATE"); n > 0 {
		return n, tokDDL
	}
	for _, p := range [][]string{{"DOUBLE", "PRECISION"}, {"GROUP", "BY"}, {"ORDER", "BY"}, {"HANDLER", "FOR"}} {
		if n := phrase(r, pos, p...); n > 0 {
			return n, tokKeyword
		}
	}
	for _, f := range []string{"EXPLODE", "INLINE", "PARSE_URL_TUPLE", "POSEXPLODE", "STACK"} {
		if n := phrase(r, pos, "LATERAL", "VIEW", f); n > 0 {
			return n, tokKeyword
		}
	}
	if n := timeZoneCast(r, pos); n > 0 {
		return n, tokKeyword
	}
	for _, op := range []string{"LIKE", "ILIKE", "RLIKE"} {
		if n := phrase(r, pos, "NOT", op); n > 0 {
			return n, tokOther
		}
		if n := phrase(r, pos, op); n > 0 {
			return n, tokOther
		}
	}
	if isWordStart(c) {
		n := 1
		for pos+n < len(r) && (isWordRune(r[pos+n]) || r[pos+n] == '$' || r[pos+n] == '#') {
			n++
		}
		if splitterKeywords[strings.ToUpper(string(r[pos:pos+n]))] {
			return n, tokKeyword
		}
		return n, tokOther
	}
	switch c {
	case ';', ':', '(', ')', '[', ']', ',', '.':
		return 1, tokPunct
	}
	if n := runOf(r, pos, "<>=~!"); n > 0 {
		return n, tokOther
	}
	if n := runOf(r, pos, "+/@#%^&|-"); n > 0 {
		return n, tokOther
	}
	return 0, tokOther
}

// phrase matches words separated by \s+ and ending at a word boundary (case-insensitive).
func phrase(r []rune, pos int, words ...string) int {
	i := pos
	for k, w := range words {
		if k > 0 {
			j := i
			for j < len(r) && pyIsSpace(r[j]) {
				j++
			}
			if j == i {
				return 0
			}
			i = j
		}
		if !hasFold(r, i, w) {
			return 0
		}
		i += len(w)
	}
	if i < len(r) && isWordRune(r[i]) {
		return 0
	}
	return i - pos
}

// timeZoneCast is sqlparse's (AT|WITH')\s+TIME\s+ZONE\s+'[^']+' rule.
func timeZoneCast(r []rune, pos int) int {
	i := pos
	switch {
	case hasFold(r, i, "AT"):
		i += 2
	case hasFold(r, i, "WITH'"):
		i += 5
	default:
		return 0
	}
	for _, w := range []string{"TIME", "ZONE"} {
		j := i
		for j < len(r) && pyIsSpace(r[j]) {
			j++
		}
		if j == i || !hasFold(r, j, w) {
			return 0
		}
		i = j + len(w)
	}
	j := i
	for j < len(r) && pyIsSpace(r[j]) {
		j++
	}
	if j == i || j >= len(r) || r[j] != '\'' {
		return 0
	}
	k := j + 1
	for k < len(r) && r[k] != '\'' {
		k++
	}
	if k == j+1 || k >= len(r) {
		return 0
	}
	return k + 1 - pos
}

// joinKeyword is sqlparse's JOIN rule: an optional LEFT/RIGHT/FULL, INNER/OUTER/STRAIGHT or
// CROSS/NATURAL before JOIN, as one token.
func joinKeyword(r []rune, pos int) int {
	try := func(prefix ...string) int {
		return phrase(r, pos, append(prefix, "JOIN")...)
	}
	for _, a := range []string{"LEFT", "RIGHT", "FULL", ""} {
		for _, b := range []string{"INNER", "OUTER", "STRAIGHT", ""} {
			var p []string
			if a != "" {
				p = append(p, a)
			}
			if b != "" {
				p = append(p, b)
			}
			if n := try(p...); n > 0 {
				return n
			}
		}
	}
	for _, a := range []string{"CROSS", "NATURAL"} {
		if n := try(a); n > 0 {
			return n
		}
	}
	return 0
}

// number is sqlparse's hexadecimal, exponent, float and integer rules, in that order.
func number(r []rune, pos int) int {
	i := pos
	if i < len(r) && r[i] == '-' {
		i++
	}
	digits := func(j int) int {
		k := j
		for k < len(r) && unicode.IsDigit(r[k]) {
			k++
		}
		return k - j
	}
	// -?0x[\dA-F]+
	if i+2 < len(r) && r[i] == '0' && (r[i+1] == 'x' || r[i+1] == 'X') {
		k := i + 2
		for k < len(r) && (unicode.IsDigit(r[k]) || strings.ContainsRune("abcdefABCDEF", r[k])) {
			k++
		}
		if k > i+2 {
			return k - pos
		}
	}
	// -?\d+(\.\d+)?E-?\d+
	if d := digits(i); d > 0 {
		k := i + d
		if k+1 < len(r) && r[k] == '.' {
			if f := digits(k + 1); f > 0 {
				if n := exponent(r, k+1+f, digits); n > 0 {
					return k + 1 + f + n - pos
				}
			}
		}
		if n := exponent(r, k, digits); n > 0 {
			return k + n - pos
		}
	}
	// (?![_A-ZÀ-Ü])-?(\d+(\.\d*)|\.\d+)(?![_A-ZÀ-Ü]), with the regexp's backtracking over \d*.
	notName := func(j int) bool { return j >= len(r) || !(r[j] == '_' || isNameStart(r[j])) }
	if d := digits(i); d > 0 && i+d < len(r) && r[i+d] == '.' {
		for f := digits(i + d + 1); f >= 0; f-- {
			if notName(i + d + 1 + f) {
				return i + d + 1 + f - pos
			}
		}
	} else if d == 0 && i < len(r) && r[i] == '.' {
		for f := digits(i + 1); f > 0; f-- {
			if notName(i + 1 + f) {
				return i + 1 + f - pos
			}
		}
	}
	// (?![_A-ZÀ-Ü])-?\d+(?![_A-ZÀ-Ü])
	if d := digits(i); d > 0 {
		for ; d > 0; d-- {
			if notName(i + d) {
				return i + d - pos
			}
		}
	}
	return 0
}

// exponent matches E-?\d+ at j (case-insensitive) and returns its length.
func exponent(r []rune, j int, digits func(int) int) int {
	if j >= len(r) || (r[j] != 'e' && r[j] != 'E') {
		return 0
	}
	k := j + 1
	if k < len(r) && r[k] == '-' {
		k++
	}
	if d := digits(k); d > 0 {
		return k + d - j
	}
	return 0
}

// quoted matches a quoted token opened by q at pos (sqlparse's string and quoted-name rules):
// doubled quotes inside and, with backslash, a backslash-escaped quote too. As Python's regexp
// backtracks, an escape is read as one only when the text after it still closes; otherwise its
// quote closes the token. 0 when no quote closes it.
func quoted(r []rune, pos int, q rune, backslash bool) int {
	if n := quotedFrom(r, pos+1, q, backslash); n > 0 {
		return n - pos
	}
	return 0
}

func quotedFrom(r []rune, i int, q rune, backslash bool) int {
	for ; i < len(r); i++ {
		closeAt := -1 // where the quote closes the token if the escape reading fails
		switch {
		case r[i] == q && i+1 < len(r) && r[i+1] == q:
			closeAt = i + 1
		case backslash && r[i] == '\\' && i+1 < len(r) && r[i+1] == q:
			closeAt = i + 2
		case r[i] == q:
			return i + 1
		}
		if closeAt >= 0 {
			if n := quotedFrom(r, i+2, q, backslash); n > 0 {
				return n
			}
			return closeAt
		}
	}
	return 0
}

// dollarQuoted is sqlparse's $tag$ ... $tag$ literal, after whitespace or at the start.
func dollarQuoted(r []rune, pos int) int {
	if r[pos] != '$' || (pos > 0 && !pyIsSpace(r[pos-1])) {
		return 0
	}
	i := pos + 1
	if i < len(r) && (r[i] == '_' || isNameStart(r[i])) {
		i += 1 + wordRun(r, i+1)
	}
	if i >= len(r) || r[i] != '$' {
		return 0
	}
	tag := string(r[pos : i+1])
	if end := indexRunes(r, i+1, tag); end >= 0 {
		return end + len([]rune(tag)) - pos
	}
	return 0
}

func hasFold(r []rune, pos int, s string) bool {
	rs := []rune(s)
	if pos+len(rs) > len(r) {
		return false
	}
	return strings.EqualFold(string(r[pos:pos+len(rs)]), s)
}

func indexRunes(r []rune, from int, s string) int {
	rs := []rune(s)
	for i := from; i+len(rs) <= len(r); i++ {
		if string(r[i:i+len(rs)]) == s {
			return i
		}
	}
	return -1
}

// wordRun is the length of the \w+ run at i (0 if none).
func wordRun(r []rune, i int) int {
	j := i
	for j < len(r) && isWordRune(r[j]) {
		j++
	}
	return j - i
}

func runOf(r []rune, i int, set string) int {
	j := i
	for j < len(r) && strings.ContainsRune(set, r[j]) {
		j++
	}
	return j - i
}

// isWordRune is Python's \w on text: letters, numbers, underscore.
func isWordRune(c rune) bool {
	return c == '_' || unicode.IsLetter(c) || unicode.IsNumber(c)
}

// isNameStart is sqlparse's [A-ZÀ-Ü] under IGNORECASE: ASCII letters, U+00C0-U+00DC and the
// lowercase of those, and the letters whose case partner is one (ſ, K, ı).
func isNameStart(c rune) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return true
	case c >= 0xC0 && c <= 0xDC:
		return true
	case c >= 0xE0 && c <= 0xFC && c != 0xF7:
		return true
	}
	return c == 0x17F || c == 0x212A || c == 0x131
}

// isWordStart is the generic word rule's first character, [0-9_A-ZÀ-Ü].
func isWordStart(c rune) bool { return c >= '0' && c <= '9' || c == '_' || isNameStart(c) }

// pyIsSpace is Python's str.isspace (and \s in a text regexp).
func pyIsSpace(c rune) bool {
	return unicode.IsSpace(c) || (c >= 0x1c && c <= 0x1f)
}

// pyStrip is Python's str.strip().
func pyStrip(s string) string { return strings.TrimFunc(s, pyIsSpace) }
