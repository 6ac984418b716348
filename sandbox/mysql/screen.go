package mysql

import (
	"strings"

	"github.com/chainedsql/chainedsql/sandbox"
)

// mysqlScreen are MySQL's and MariaDB's own refusals: what mysqlText refuses, and the role
// catalogs; the shared denied names and the role catalogs are looked up among the statement's
// names as MariaDB's lexer reads them (mysqlNames).
func mysqlScreen() sandbox.ScreenRules {
	return sandbox.ScreenRules{Text: mysqlText, Split: mysqlSplit, Names: mysqlNames, MySQLSchema: mysqlSchemaNamed, Skip: mysqlSkip, Empty: sandbox.EmptyTrailing, Word: func(w string) string {
		if mysqlRoleCatalogs[w] {
			return "refused: " + w + " is not allowed on MySQL/MariaDB (the reader holds a role per loaded database, so the role catalogs name every task's database)"
		}
		return ""
	}}
}

// mysqlSplit splits q at its first ; as MariaDB's lexer reads it (mysqlTokens): outside strings
// ('it\'s' and "a\"b" hold a quote), backquoted names and comments (# and /* */; -- only before a
// space or a control character, so SELECT 1--1; SELECT 2 is two statements). The screen's
// one-statement check (ScreenRules.Split). The tokens are read from q with only A to Z
// lower-cased, so that their offsets are q's.
func mysqlSplit(q string) (string, string) {
	b := []byte(q)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	for _, t := range mysqlTokens(string(b)) {
		if t.kind == 'p' && t.text == ";" {
			return q[:t.at], q[t.at+1:]
		}
	}
	return q, ""
}

// mysqlNames are the names q holds as MariaDB's lexer reads it (mysqlTokens over q lower-cased,
// the code of its executable comments read as code, as mysqlText reads it): its unquoted words
// and its backquoted names (`get_lock`(…) calls GET_LOCK, `information_schema`.`processlist`
// reads the threads), which the shared denied names and the role catalogs are looked up
// among. A string ('…' or "…") or a comment names nothing: the sessions read " as a string
// quote and backslashes as escapes, as mysqlTokens does (mysqlQuotingMode keeps ANSI_QUOTES
// and NO_BACKSLASH_ESCAPES out of their sql_mode), and in a read a MariaDB string becomes no
// function and no table ("get_lock"(…) and information_schema."processlist" are syntax
// errors, 'processlist' is a value). A word the lexer reads right after a number is its own
// name (1e1get_lock gives get_lock), one that begins with digits a name as MariaDB reads it
// (1get_lock calls a routine of the task's database).
func mysqlNames(q string) []string {
	var names []string
	for _, t := range mysqlTokens(mysqlExecutable(strings.ToLower(q))) {
		if t.kind == 'w' || t.kind == 'n' {
			names = append(names, t.text)
		}
	}
	return names
}

// mysqlSchemaNamed reports whether q qualifies a name with the mysql schema (server accounts,
// grants and settings) as MariaDB's lexer reads it (mysqlTokens, as mysqlNames): the word mysql
// or the backquoted name `mysql`, then a dot, blanks and comments between them or none
// (mysql.user, `mysql` /* c */ . `user`). A string or a comment that holds mysql.x qualifies
// nothing ('see mysql.com'; "mysql".user is a string and a syntax error).
func mysqlSchemaNamed(q string) bool { return mysqlQualifies(q, "mysql") }

// mysqlQualifies reports whether q qualifies a name with schema (lower case) as MariaDB's lexer
// reads it: the word or backquoted name schema, then a dot token (mysqlSchemaNamed's reading).
func mysqlQualifies(q, schema string) bool {
	toks := mysqlTokens(mysqlExecutable(strings.ToLower(q)))
	for i := 0; i+1 < len(toks); i++ {
		if t := toks[i]; (t.kind == 'w' || t.kind == 'n') && t.text == schema && toks[i+1].kind == 'p' && toks[i+1].text == "." {
			return true
		}
	}
	return false
}

// mysqlSkip returns the index after the whitespace or comment that starts at s[i] as MariaDB's
// lexer reads them, or i where none does (ScreenRules.Skip): # and -- (before a space or a
// control character) to a line feed or the end, /* */ unnested and closed. An executable
// comment (/*! */, /*M! */) is code, and a /* left open fails the whole text on the server, so
// neither is a comment; --x is a minus (two, with its operand).
func mysqlSkip(s string, i int) int {
	switch c := s[i]; {
	case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
		return i + 1
	case strings.HasPrefix(s[i:], "/*!") || strings.HasPrefix(s[i:], "/*M!") || strings.HasPrefix(s[i:], "/*m!"):
		return i
	case strings.HasPrefix(s[i:], "/*"):
		if end := strings.Index(s[i+2:], "*/"); end >= 0 {
			return i + end + 4
		}
		return i
	}
	return sandbox.CommentEnd(s, i)
}

// mysqlText refuses, in lower (lower-cased MySQL text), @@ system variables, a call of one of
// mysqlDeniedCalls or of a spatial function, EXPLAIN FOR CONNECTION (mysqlDenied), and the
// searches, patterns and TRIMs MariaDB cannot interrupt (mysqlSearchRule). It reads lower once,
// as MariaDB's lexer does: a string ('…' or "…", backslash escapes and doubled quotes) is data
// and a comment a blank (/* */, #, and -- only before a space or a control character: 1--1 is a
// subtraction), so a word inside them is no name ('Lost in Space (1998)' calls nothing); the
// content of an executable comment (/*! … */, /*M! … */) is code, as MariaDB runs it
// (mysqlExecutable); a number and a name right after it are two words, as MariaDB reads
// them (mysqlWordEnd: 1e1like x is a LIKE); a word is a call where ( follows it across blanks, and a backquoted name
// is a call where ( follows it (`repeat`(…) calls REPEAT) and otherwise no word (`like` is a
// column).
func mysqlText(lower string) string {
	lower = mysqlExecutable(lower)
	name := -1 // the end of the last name (a word that is no number, or a backquoted name)
	for i := 0; i < len(lower); {
		c := lower[i]
		var w string
		j := i
		switch {
		case c == '\'' || c == '"':
			i = sandbox.SkipQuoted(lower, i)
			continue
		case c == '`':
			if j = sandbox.SkipQuoted(lower, i); j-i >= 2 && lower[j-1] == '`' {
				w = strings.ReplaceAll(lower[i+1:j-1], "``", "`")
			}
		case c == '@' && i+1 < len(lower) && lower[i+1] == '@':
			return "refused: @@ system variables describe the server, not the task's data"
		case c == '.' && name != i:
			// a number, .5 (t.5 is t's column 5)
			if i, _ = mysqlWordEnd(lower, i, false); i == j {
				i++
			}
			continue
		case !sandbox.IsIdentByte(c):
			if i = sandbox.CommentEnd(lower, i); i == j {
				i++
			}
			continue
		default:
			var num bool
			j, num = mysqlWordEnd(lower, i, i >= 2 && lower[i-1] == '.' && name == i-1)
			w = lower[i:j]
			if !num {
				name = j
			}
		}
		if c == '`' {
			name = j
		}
		next := sandbox.SkipBlank(lower, j)
		call := next < len(lower) && lower[next] == '('
		if c == '`' && !call {
			i = j
			continue
		}
		if why := mysqlDenied(lower, w, next, call); why != "" {
			return why
		}
		if why := mysqlSearchRule(lower, w, c == '`', j, next, call); why != "" {
			return why
		}
		i = j
	}
	if why := mysqlFanOutRule(lower); why != "" {
		return why
	}
	return mysqlValueSitesRule(lower)
}

// mysqlWordEnd returns the end of the word that starts at lower[i] (a byte of a name) as
// MariaDB's lexer reads it, and whether it is a number: a run of name bytes, but for a number
// that a name follows without a gap, which MariaDB reads as the number and then the name (an
// alias: SELECT 1e1a1 is 10 named a1, 1.5a1 is 1.5 named a1, 1.a1 is 1 named a1): digits with
// a fraction (.digits, the digits optional) or an exponent (e, a sign, digits; after a
// fraction only where digits follow; a fraction may begin the number, .5a1). A hexadecimal
// 0x… or binary 0b… literal runs to the end of the run or is no literal (0x41g is a name), and
// is read as a word, since only a lower-case 0x or 0b begins one and lower has lost the case
// (0X41 is a name, an alias's too). Digits that a name byte other than such an exponent
// follows begin a name (1a, 1e), as digits directly after a name and a dot do (t.5a1 is t's
// column 5a1: afterName).
func mysqlWordEnd(lower string, i int, afterName bool) (int, bool) {
	run := i
	for run < len(lower) && sandbox.IsIdentByte(lower[run]) {
		run++
	}
	digit := func(k int) bool { return k < len(lower) && lower[k] >= '0' && lower[k] <= '9' }
	digits := func(k int) int {
		for digit(k) {
			k++
		}
		return k
	}
	// exponent returns the end of an exponent at k, or k where none is there.
	exponent := func(k int) int {
		if k >= len(lower) || lower[k] != 'e' {
			return k
		}
		e := k + 1
		if e < len(lower) && (lower[e] == '+' || lower[e] == '-') {
			e++
		}
		if !digit(e) {
			return k
		}
		return digits(e)
	}
	if afterName {
		return run, false
	}
	if lower[i] == '.' && digit(i+1) {
		return exponent(digits(i + 1)), true
	}
	if !digit(i) {
		return run, false
	}
	if strings.HasPrefix(lower[i:], "0x") || strings.HasPrefix(lower[i:], "0b") {
		// A hexadecimal or binary literal is never followed by a name (0x41g is a name), so
		// the word is the whole run either way; and lower has lost the case MariaDB reads it
		// by (0X41 and 0B1 are names: SELECT 1 AS 0Xa0 names an item), so it is a word.
		return run, false
	}
	k := digits(i)
	switch {
	case k < len(lower) && lower[k] == '.':
		return exponent(digits(k + 1)), true
	case k == run:
		return k, true
	case exponent(k) > k:
		return exponent(k), true
	}
	return run, false
}

// mysqlExecutable returns lower with the markers of its executable comments blanked (/*! and
// /*M!, the version digits after them, and the */ that ends one), since MariaDB runs their
// content as code; strings, quoted names and other comments are kept, and within an executable
// comment another comment is one, as MariaDB reads it. Text without an executable comment is
// returned as it is. (Screen refuses them anyway: this keeps mysqlText's reading whole.)
func mysqlExecutable(lower string) string {
	if !strings.Contains(lower, "/*!") && !strings.Contains(lower, "/*m!") {
		return lower
	}
	b := []byte(lower)
	in := false
	blank := func(from, to int) {
		for k := from; k < to; k++ {
			b[k] = ' '
		}
	}
	for i := 0; i < len(lower); {
		switch c := lower[i]; {
		case c == '\'' || c == '"' || c == '`':
			i = sandbox.SkipQuoted(lower, i)
		case in && strings.HasPrefix(lower[i:], "*/"):
			blank(i, i+2)
			in, i = false, i+2
		case !in && (strings.HasPrefix(lower[i:], "/*!") || strings.HasPrefix(lower[i:], "/*m!")):
			k := i + 3
			if lower[i+2] == 'm' {
				k++
			}
			for k < len(lower) && lower[k] >= '0' && lower[k] <= '9' {
				k++
			}
			blank(i, k)
			in, i = true, k
		case sandbox.CommentEnd(lower, i) > i:
			i = sandbox.CommentEnd(lower, i)
		default:
			i++
		}
	}
	return string(b)
}

// mysqlPaddedChar reports whether the CHAR(n) or CHARACTER(n) whose "(" is lower[open] is a
// cast's type that pads its value to n bytes, as BINARY(n) does: CHAR(n) BYTE, or CHAR(n) with
// CHARACTER SET, CHAR SET or CHARSET binary (the name quoted or not, 'bin\ary' too):
// CAST(” AS CHAR(16000000) BYTE) is 16 MB long.
func mysqlPaddedChar(lower string, open int) bool {
	k, depth := open, 0
	for k < len(lower) {
		switch c := lower[k]; {
		case c == '\'' || c == '"' || c == '`':
			k = sandbox.SkipQuoted(lower, k)
			continue
		case sandbox.CommentEnd(lower, k) > k:
			k = sandbox.CommentEnd(lower, k)
			continue
		case c == '(':
			depth++
		case c == ')':
			depth--
		}
		if k++; depth == 0 {
			break
		}
	}
	word := func() string {
		k = sandbox.SkipBlank(lower, k)
		w := wordAt(lower, k)
		k += len(w)
		return w
	}
	switch word() {
	case "byte":
		return true
	case "character", "char":
		if word() != "set" {
			return false
		}
	case "charset":
	default:
		return false
	}
	if name := word(); name != "" || k >= len(lower) {
		return name == "binary"
	}
	switch lower[k] {
	case '\'', '"':
		return mysqlStringText(lower[k:sandbox.SkipQuoted(lower, k)]) == "binary"
	case '`':
		end := sandbox.SkipQuoted(lower, k)
		return strings.ReplaceAll(strings.Trim(lower[k:end], "`"), "``", "`") == "binary"
	}
	return false
}

// mysqlRoleCatalogs are the information_schema tables of roles. Every task's executions log in
// as the one reader, granted a role per loaded database (reader/db_id) and enabling its own:
// MariaDB's APPLICABLE_ROLES lists them all, so it names every other task's database (not its
// rows); MySQL 8 adds ADMINISTRABLE_ROLE_AUTHORIZATIONS and the ROLE_*_GRANTS tables, of the
// same roles. ENABLED_ROLES shows only the task's own role, and nothing Text-to-SQL needs.
var mysqlRoleCatalogs = map[string]bool{
	"applicable_roles": true, "enabled_roles": true, "administrable_role_authorizations": true,
	"role_table_grants": true, "role_column_grants": true, "role_routine_grants": true,
}

// mysqlDeniedCalls are the MariaDB/MySQL functions refused where they are called (the name,
// any gap, then "("), with the reason the observation gives. Found on MariaDB 10.11 with a
// statement time limit of 1 s, KILL QUERY and KILL CONNECTION: XPath over a built-up XML value,
// and REPLACE or REGEXP_REPLACE over a value of a megabyte (growing or shrinking it: each match
// moves the rest of the value), run on for minutes to hours in a thread marked Killed, since the
// server checks for a kill only between rows. REPEAT, LPAD, RPAD, SPACE, CAST(… AS BINARY(n)),
// UNCOMPRESS, SFORMAT ('{:a>16000000}'), WEIGHT_STRING(… AS CHAR(n)) and nested EXPORT_SET build
// such values from a few bytes of text (SFORMAT's made LOCATE run 6 s past a 1 s deadline from a
// 70-byte statement); BENCHMARK only spends server time; ENCRYPT's crypt() takes its rounds from
// the salt (1,000,000 rounds of $5$ ran 0.4 s past a 1 s limit, the most 999,999,999).
// Functions that escape their string arguments with no bound (mysqlEscapers) double a value
// in each nested call. Every native function MariaDB 10.11 knows was checked so:
// TestMySQLNativeCatalog lists those the screen lets through, each judged.
// MariaDB's Oracle-mode twins (LPAD_ORACLE, RPAD_ORACLE, REPLACE_ORACLE) may be called by
// those names in any mode, and are refused with them. Nesting (CONCAT in derived tables, HEX
// of HEX) still builds them: the screen makes that longer to write, the share contains it.
// Other functions are not interrupted either: the searches (LOCATE, INSTR, POSITION,
// SUBSTRING_INDEX) take only short literal needles (mysqlBuiltNeedle), and what is left (REVERSE
// over a value built by nesting CONCAT) runs as the runaways mysqlServer counts and contains.
var mysqlDeniedCalls = map[string]string{
	"extractvalue":   "MariaDB cannot interrupt XPath evaluation (ExtractValue, UpdateXML): it runs on past the deadline and KILL",
	"updatexml":      "MariaDB cannot interrupt XPath evaluation (ExtractValue, UpdateXML): it runs on past the deadline and KILL",
	"replace":        "MariaDB cannot interrupt REPLACE, whose time grows with the square of its input: it runs on past the deadline and KILL",
	"regexp_replace": "MariaDB cannot interrupt REGEXP_REPLACE, whose time grows with the square of its input: it runs on past the deadline and KILL",
	"repeat":         "REPEAT builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"lpad":           "LPAD builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"rpad":           "RPAD builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"lpad_oracle":    "LPAD_ORACLE (LPAD) builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"rpad_oracle":    "RPAD_ORACLE (RPAD) builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"replace_oracle": "MariaDB cannot interrupt REPLACE_ORACLE (REPLACE), whose time grows with the square of its input: it runs on past the deadline and KILL",
	"space":          "SPACE builds values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"binary":         "BINARY(n) pads values to up to 16 MiB, over which MariaDB's string functions run on past the deadline and KILL",
	"uncompress":     "UNCOMPRESS builds values of up to 16 MiB from a few kilobytes, over which MariaDB's string functions run on past the deadline and KILL",
	"sformat":        "SFORMAT pads values to up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"weight_string":  "WEIGHT_STRING(… AS CHAR(n)) pads values to up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"export_set":     "EXPORT_SET multiplies its strings by up to 128 in each call, building values of up to 16 MiB from a few bytes, over which MariaDB's string functions run on past the deadline and KILL",
	"regexp_instr":   mysqlWhyRegexp,
	"regexp_substr":  mysqlWhyRegexp,
	"benchmark":      "BENCHMARK only spends server time",
	"encrypt":        "ENCRYPT runs the system's crypt(), whose salt sets its rounds ('$5$rounds=999999999$'), for minutes without checking for a kill, holding a lock every other ENCRYPT waits on",
}

// mysqlWhyRegexp is why the regular-expression matches (REGEXP, RLIKE, REGEXP_INSTR,
// REGEXP_SUBSTR) are refused: a review built 8 MiB through a recursive CTE's concat(s, s), which
// the screen lets through, and `s REGEXP 'a*b'` over it ran on past a 1 s deadline and KILL
// (threads marked Killed still matching after 77 s; a server shutdown waited on them).
const mysqlWhyRegexp = "MariaDB cannot interrupt a regular-expression match (REGEXP, RLIKE, REGEXP_INSTR, REGEXP_SUBSTR), whose backtracking over a value of megabytes runs on past the deadline and KILL; use LIKE"

// mysqlEscapers are the functions that escape a string argument ('"' as '\"') with no bound
// at max_allowed_packet, so that nesting each in itself (through LOWER, which makes the JSON a
// string again) doubles the value in every call past 16 MiB: 23 nested JSON_SET('{}', '$.a',
// LOWER(…)) of '"' built 42 MB, JSON_OBJECTAGG as much, JSON_QUOTE 50 MB at 24, COLUMN_JSON
// (COLUMN_CREATE('a', …)) 160 MB at 25. JSON_ARRAY, JSON_OBJECT, JSON_ARRAYAGG, HEX, QUOTE and
// TO_BASE64 double too but return NULL past max_allowed_packet (or group_concat_max_len).
var mysqlEscapers = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`json_quote json_set json_insert json_replace json_array_append json_array_insert
		json_objectagg column_json`) {
		m[n] = true
	}
	return m
}()

// mysqlWhyEscaper says why mysqlEscapers are refused.
const mysqlWhyEscaper = " escapes what an inner call escaped, doubling the value in each nested call past max_allowed_packet (23 nested JSON_SET of '\"' built 42 MB from 600 bytes), over which MariaDB's string functions run on past the deadline and KILL"

// mysqlWhySpatial says why the spatial functions are refused.
const mysqlWhySpatial = "MariaDB's spatial functions run their geometry (distances, relations, unions, buffers) without checking for a kill, in time up to the product of the two geometries' sizes: ST_Distance between two multipoints of 10,000 points each ran 7 s past a 1 s deadline, and a geometry may be read from a built text or string of megabytes"

// mysqlSpatialCalls are MariaDB's spatial functions without the ST_ or MBR prefix
// (mysqlSpatial), but X and Y, which read one coordinate of a point and are likelier names of a
// common table expression (WITH x (a) AS …).
var mysqlSpatialCalls = func() map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(`area asbinary astext aswkb aswkt boundary buffer centroid contains convexhull
		crosses dimension disjoint endpoint envelope equals exteriorring geomcollfromtext geomcollfromwkb
		geometrycollection geometrycollectionfromtext geometrycollectionfromwkb geometryfromtext geometryfromwkb
		geometryn geometrytype geomfromtext geomfromwkb glength interiorringn intersects isclosed isempty isring
		issimple linefromtext linefromwkb linestring linestringfromtext linestringfromwkb mlinefromtext mlinefromwkb
		mpointfromtext mpointfromwkb mpolyfromtext mpolyfromwkb multilinestring multilinestringfromtext
		multilinestringfromwkb multipoint multipointfromtext multipointfromwkb multipolygon multipolygonfromtext
		multipolygonfromwkb numgeometries numinteriorrings numpoints overlaps point pointfromtext pointfromwkb pointn
		pointonsurface polyfromtext polyfromwkb polygon polygonfromtext polygonfromwkb srid startpoint touches within`) {
		m[n] = true
	}
	return m
}()

// mysqlSpatial reports whether w, a called name, is one of MariaDB's spatial functions: ST_…,
// MBR… and mysqlSpatialCalls.
func mysqlSpatial(w string) bool {
	return strings.HasPrefix(w, "st_") || strings.HasPrefix(w, "mbr") || mysqlSpatialCalls[w]
}

// mysqlDenied refuses the word w of lower (mysqlText's reading; next is the index after the
// blanks after it, call whether ( is there): a call of one of mysqlDeniedCalls, an escaper
// (mysqlEscapers) or a spatial
// function (mysqlSpatial), and EXPLAIN FOR CONNECTION, which shows the plan (in JSON, the
// literals) of the statement another connection runs: every task's connections log in as one
// reader, so MariaDB shows them all to it.
func mysqlDenied(lower, w string, next int, call bool) string {
	if call {
		if reason, ok := mysqlDeniedCalls[w]; ok {
			return "refused: " + reason
		}
		if mysqlEscapers[w] {
			return "refused: " + strings.ToUpper(w) + mysqlWhyEscaper
		}
		if mysqlSpatial(w) {
			return "refused: " + strings.ToUpper(w) + " is not allowed: " + mysqlWhySpatial
		}
		if (w == "char" || w == "character") && mysqlPaddedChar(lower, next) {
			return "refused: " + mysqlDeniedCalls["binary"] + " (CHAR(n) BYTE and CHAR(n) CHARACTER SET binary are BINARY(n))"
		}
	}
	if w == "regexp" || w == "rlike" {
		return "refused: " + mysqlWhyRegexp
	}
	if w == "for" && wordAt(lower, next) == "connection" {
		return "refused: EXPLAIN FOR CONNECTION shows another connection's statement, which may be another task's"
	}
	return ""
}
