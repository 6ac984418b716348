package postgres

import (
	"fmt"
	"strconv"
	"strings"
)

// pgStmt is a statement's tokens with, for each opening parenthesis, the index of the one
// that closes it (len(toks) when none does), so that every rule below skips a parenthesised
// part in one step and screening stays linear in the statement's length.
type pgStmt struct {
	toks  []pgToken
	close []int
	// open: for each closing parenthesis, the index of the one it closes, else -1.
	open []int
}

// newPGStmt lexes q and matches its parentheses.
func newPGStmt(q string) *pgStmt {
	s := &pgStmt{toks: pgLex(q)}
	s.close = make([]int, len(s.toks))
	s.open = make([]int, len(s.toks))
	var open []int
	for i, t := range s.toks {
		s.close[i], s.open[i] = -1, -1
		switch {
		case t.is("("):
			open = append(open, i)
		case t.is(")") && len(open) > 0:
			s.close[open[len(open)-1]] = i
			s.open[i] = open[len(open)-1]
			open = open[:len(open)-1]
		}
	}
	for _, i := range open {
		s.close[i] = len(s.toks)
	}
	return s
}

// at is toks[i], or a token of no kind past either end.
func (s *pgStmt) at(i int) pgToken {
	if i < 0 || i >= len(s.toks) {
		return pgToken{kind: -1}
	}
	return s.toks[i]
}

// skip is the index after the parenthesised part that starts at i, or i+1.
func (s *pgStmt) skip(i int) int {
	if i < len(s.toks) && s.close[i] >= 0 {
		return s.close[i] + 1
	}
	return i + 1
}

// is reports whether t is punctuation or an operator spelled x.
func (t pgToken) is(x string) bool { return (t.kind == pgPunct || t.kind == pgOp) && t.text == x }

// word reports whether t is the unquoted word w.
func (t pgToken) word(w string) bool { return t.kind == pgWord && t.text == w }

// name reports whether t names something (a word or a quoted identifier).
func (t pgToken) name() bool { return t.kind == pgWord || t.kind == pgQuoted }

// pgSpan is the tokens from i up to (not including) j.
type pgSpan struct{ i, j int }

// pgTokenRules refuses, by the statement's tokens (strings, quoted identifiers and comments
// told apart as the server's lexer does), what PostgreSQL cannot stop at the deadline and no
// name alone shows: array syntax (brackets; _int4-style type names wherever a type is named),
// polygons and paths, the containment and overlap operators and jsonb key lists, the text
// searches whose search string, pattern or set is not a constant costing at most pgMaxPasses
// (search.go), multiranges (a name holding multirange called or named as a type, a multirange
// type's name as a word anywhere, range_agg and range_intersect_agg called), a tsquery parsed
// from anything but a string constant (a cast, to_tsquery and its kin, text @@ text: quadratic
// in its operands), OPERATOR(…), which could spell any operator, and setseed, whose seed
// outlives the session's reset.
func pgTokenRules(s *pgStmt) string {
	for i, t := range s.toks {
		var reason string
		switch t.kind {
		case pgPunct:
			reason = s.punctRule(i)
		case pgOp:
			reason = s.operatorRule(i)
		case pgWord, pgQuoted:
			reason = s.nameRule(i)
		}
		if reason != "" {
			return reason
		}
	}
	return ""
}

// punctRule: brackets (array types and subscripts), a type after ::, a column definition
// list after a function in FROM.
func (s *pgStmt) punctRule(i int) string {
	switch s.toks[i].text {
	case "[", "]":
		return pgCannotStop("[ ] (array types such as int[] and int[1], and subscripts: array functions loop over every element without checking for interrupts)")
	case "::":
		if s.typeName(i+1) == "tsquery" && s.at(i-1).kind == pgString {
			return "" // a constant: bounded by the statement's text
		}
		return pgTypeRule(s.typeName(i + 1))
	case "(":
		return s.columnDefs(i)
	}
	return ""
}

// operatorRule: the containment, overlap and jsonb key-list operators, jsonb's #-, and ~~
// (LIKE).
func (s *pgStmt) operatorRule(i int) string {
	op := s.toks[i].text
	switch {
	case strings.Contains(op, "#-"):
		return pgCannotStop(op + pgWhyJSONOperator + pgWhyJSON[2:])
	case s.jsonbMinus(i):
		return pgCannotStop("- after an untyped string constant" + pgWhyJSONMinus + pgWhyJSON[2:])
	case strings.Contains(op, "@>"), strings.Contains(op, "<@"):
		return pgCannotStop(op + pgWhyContainment)
	case strings.Contains(op, "&&"):
		return pgCannotStop(op + pgWhyOverlap)
	case strings.Contains(op, "?|"), strings.Contains(op, "?&"):
		return pgCannotStop(op + pgWhyKeyLists)
	case strings.Contains(op, "~~"):
		return s.needleRule(op, pgLike, pgSpan{i + 1, s.operandEnd(i + 1)}, '\\')
	case op == "@@" || op == "@@@":
		// text @@ text parses its right operand with plainto_tsquery; a constant, or a
		// tsquery parser's call (checked by callRule), is bounded by the statement's text
		if n := s.at(i + 1); n.name() && pgTsqueryParsers[n.text] && s.at(i+2).is("(") {
			return ""
		}
		end := s.operandEnd(i + 1)
		switch n := s.at(i + 1); {
		case n.word("tsquery") && s.at(i+2).kind == pgString: // tsquery 'a & b'
			end = i + 3
		case n.word("cast") && s.at(i+2).is("("): // CAST('a & b' AS tsquery)
			end = s.skip(i + 2)
		}
		if s.operandEnd(end) != end || !s.tsqueryConstant(pgSpan{i + 1, end}) {
			return pgCannotStop(op + " with a right operand that is not a string constant" + pgWhyTsquery)
		}
	}
	return ""
}

// pgWhyJSONOperator says why #- is refused with json and jsonb: the one operator PostgreSQL
// has for jsonb alone whose operands are both strings, so that its untyped string constants
// are read as jsonb and text[] and it makes a jsonb of a statement that never names json:
// '[1,2,3,4,5,6,7,8]' #- '{9}' doubled by jsonb's || in 19 CTEs, then cast to text, ran 6.9 s
// past a 1 s statement_timeout (21 CTEs: 55 s). jsonb's other operators either take one more
// type (->, #>, -: "operator is not unique" on two constants) or return no jsonb (?, @?).
const pgWhyJSONOperator = " (jsonb's delete-path operator: it reads two string constants as a jsonb and a path, making a jsonb that no word of the statement names; "

// pgWhyJSONMinus says why - is refused after an untyped string constant (PostgreSQL's lexer
// reads a run of + and - with no other operator character as its first character): jsonb - text
// is the only - whose right operand is a text, so that '[1,2]' - 'a'::text (or - a text column)
// reads the constant as a jsonb; || then doubles it: 18 CTEs ran 5.8 s past a 1 s
// statement_timeout. A number after it (unknown - integer is integer - integer), or a typed
// constant before it (date '2020-01-01' - d), or one that holds no JSON array or object (jsonb
// - text fails on a scalar: '1999' - x), passes.
const pgWhyJSONMinus = " (jsonb - text: a string constant of no type before a text is read as a jsonb, making a jsonb that no word of the statement names; "

// pgExprKeywords are the keywords after which an expression starts: a string constant after
// one has no type (after any other name it is a typed constant, date '2020-01-01', and a
// parenthesis after one is a call's).
var pgExprKeywords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`select where and or not then else when case on having by distinct between
		symmetric asymmetric like ilike similar to escape limit offset from for placing both leading trailing in
		return returning all any some values is first next fetch using over exists`) {
		pgExprKeywords[w] = true
	}
}

// untypedConstant returns the index of the first token of the string constant of no type
// (unknown to the server) that ends at toks[j], wrapped in parentheses and COLLATE clauses or
// not, and the index of the constant itself; -1, -1 when toks[j] ends no such constant.
func (s *pgStmt) untypedConstant(j int) (start, str int) {
	for { // COLLATE name or COLLATE schema.name: the constant keeps no type
		switch {
		case s.at(j).name() && s.at(j-1).word("collate"):
			j -= 2
			continue
		case s.at(j).name() && s.at(j-1).is(".") && s.at(j-2).name() && s.at(j-3).word("collate"):
			j -= 4
			continue
		}
		break
	}
	start, str = -1, -1
	switch t := s.at(j); {
	case t.kind == pgString:
		start, str = j, j
	case t.is(")") && s.open[j] >= 0:
		if in, inStr := s.untypedConstant(j - 1); in == s.open[j]+1 {
			start, str = s.open[j], inStr
		}
	}
	if before := s.at(start - 1); start < 0 || before.kind == pgWord && !pgExprKeywords[before.text] || before.kind == pgQuoted {
		return -1, -1 // a typed constant (date '…'), or a call's parentheses
	}
	return start, str
}

// jsonbMinus reports whether the - at toks[i] reads its left operand as a jsonb that outlives
// it: a string constant of no type holding a JSON array or object (a scalar fails the statement:
// "cannot delete from scalar"; a constant the screen cannot read counts as one), before
// anything but a number.
func (s *pgStmt) jsonbMinus(i int) bool {
	if op := s.toks[i].text; op[0] != '-' || strings.Trim(op, "+-") != "" || s.at(i+1).kind == pgNumber && !s.at(i+2).is("::") {
		return false
	}
	_, str := s.untypedConstant(i - 1)
	if str < 0 {
		return false
	}
	t := s.toks[str]
	v := strings.TrimLeft(t.text, " \t\n\r")
	return !t.plain || strings.HasPrefix(v, "[") || strings.HasPrefix(v, "{")
}

// pgWhyTsquery says why a tsquery parsed from anything but a string constant is refused.
const pgWhyTsquery = " (parsing a text into a tsquery moves every operand read so far for each one it reads, without checking for interrupts: 80,000 operands took 5 s and a megabyte of them would take hours; a string constant, to_tsquery('a & b') or 'a & b'::tsquery, is allowed)"

// pgTsqueryParsers are the functions that parse their last argument, a text, into a tsquery:
// to_tsquery and its kin, the tsquery type's input function and cast, and text @@ text's.
var pgTsqueryParsers = map[string]bool{
	"to_tsquery": true, "plainto_tsquery": true, "phraseto_tsquery": true, "websearch_to_tsquery": true,
	"tsquery": true, "tsqueryin": true, "ts_match_tt": true,
}

// tsqueryConstant reports whether sp is a string constant the screen can read (literal),
// cast to tsquery at most ('a & b'::tsquery, CAST('a & b' AS tsquery), tsquery 'a & b'): a
// tsquery parsed from it is bounded by the statement's length.
func (s *pgStmt) tsqueryConstant(sp pgSpan) bool {
	switch {
	case sp.j-sp.i == 2 && s.at(sp.i).word("tsquery") && s.at(sp.i+1).kind == pgString:
		return true
	case sp.j-sp.i > 2 && s.at(sp.i).word("cast") && s.at(sp.i+1).is("(") && s.close[sp.i+1] == sp.j-1:
		inner := pgSpan{sp.i + 2, sp.j - 1}
		as := s.find(inner, "as")
		if as <= inner.i {
			return false
		}
		for k := as + 1; k < inner.j; k++ { // a type's name, schema-qualified at most
			if t := s.toks[k]; !t.name() && !t.is(".") {
				return false
			}
		}
		if t := s.typeName(as + 1); t != "tsquery" && !pgTextTypes[t] {
			return false
		}
		sp = pgSpan{inner.i, as}
	case sp.j-sp.i > 2 && s.at(sp.j-2).is("::") && s.at(sp.j-1).word("tsquery"):
		sp.j -= 2
	}
	_, ok := s.literal(sp)
	return ok
}

// The reasons of the refused operators.
const (
	pgWhyContainment = " (containment: jsonb and array containment compare every pair of elements without checking for interrupts)"
	pgWhyOverlap     = " (overlap: of arrays and of polygons, it compares every pair of elements without checking for interrupts)"
	pgWhyKeyLists    = " (jsonb key lists: each key is looked for in every element of a jsonb array without checking for interrupts)"
)

// nameRule: a multirange type's name (pgMultirangeWords), LIKE and ILIKE, OPERATOR(…),
// CAST(… AS type), RETURNING type, a typed constant (polygon '…'), and a call.
func (s *pgStmt) nameRule(i int) string {
	t, next := s.toks[i], s.at(i+1)
	if t.kind == pgWord {
		if pgMultirangeWords[t.text] {
			return pgCannotStop(t.text + pgWhyMultiranges)
		}
		switch t.text {
		case "like", "ilike":
			end := s.operandEnd(i + 1)
			esc := int('\\')
			if s.at(end).word("escape") {
				v, ok := s.literal(pgSpan{end + 1, s.operandEnd(end + 1)})
				switch {
				case !ok || len(v) > 1 || len(v) == 1 && v[0] >= 0x80:
					return "refused: LIKE with an ESCAPE that is not a one-character string constant is not allowed on PostgreSQL (the screen reads a pattern by its escape character)"
				case v == "":
					esc = -1
				default:
					esc = int(v[0])
				}
			}
			return s.needleRule(strings.ToUpper(t.text), pgLike, pgSpan{i + 1, end}, esc)
		case "operator":
			if next.is("(") {
				return "refused: OPERATOR(…) is not allowed on PostgreSQL (it names an operator by its schema, which the screen cannot check)"
			}
		case "cast":
			if next.is("(") {
				// the last AS at the call's own depth: CAST(x AS polygon)
				for j := i + 2; j < s.close[i+1]; j = s.skip(j) {
					if s.toks[j].word("as") {
						if s.typeName(j+1) == "tsquery" && s.tsqueryConstant(pgSpan{i + 2, j}) {
							continue
						}
						if reason := pgTypeRule(s.typeName(j + 1)); reason != "" {
							return reason
						}
					}
				}
			}
		case "returning":
			return pgTypeRule(s.typeName(i + 1))
		case "zone":
			if s.at(i-1).word("time") && s.at(i-2).word("at") && !s.zoneConstant(pgSpan{i + 1, len(s.toks)}, true) {
				return pgWhyZone
			}
		}
	}
	switch {
	case next.kind == pgString && t.text != "tsquery": // tsquery 'a & b': a constant
		return pgTypeRule(t.text)
	case next.is("("):
		return s.callRule(i)
	}
	return ""
}

// typeName is the type named from toks[i] on (schema.type: the type), or "".
func (s *pgStmt) typeName(i int) string {
	name := ""
	for ; s.at(i).name(); i += 2 {
		name = s.toks[i].text
		if !s.at(i + 1).is(".") {
			break
		}
	}
	return name
}

// pgTypeRule refuses the types of values PostgreSQL cannot stop working on: array types
// (_int4, _text, …: every type has one, a table's row type too), the geometric types of any
// number of points, and multirange types (int4multirange, …: any name holding multirange).
func pgTypeRule(name string) string {
	switch {
	case strings.HasPrefix(name, "_"):
		return pgCannotStop("the array type " + name + pgWhyArrays)
	case name == "polygon" || name == "path":
		return pgCannotStop(name + pgWhyGeometric)
	case strings.Contains(name, "multirange"):
		return pgCannotStop(name + pgWhyMultiranges)
	case name == "tsquery":
		return pgCannotStop("tsquery from a value that is not a string constant" + pgWhyTsquery)
	}
	return ""
}

// pgWhyGeometric says why polygons and paths are refused.
const pgWhyGeometric = " (a geometric type of any number of points: the operators between two of them compare every pair of edges without checking for interrupts)"

// pgWhyMultiranges says why multiranges are refused.
const pgWhyMultiranges = " (reading or aggregating a multirange of many ranges runs without checking for interrupts: 300,000 ranges ran 6 s past a 1 s statement_timeout)"

// pgMultirangeWords are the names of PostgreSQL's multirange types and of the function that
// makes a multirange of any range type, refused as unquoted words wherever they stand, so that a
// place where a type is named that the rules do not parse cannot make one either; a name
// that only holds multirange (a column multirange_count) is refused only where it is called or
// named as a type. TestPostgresUnstoppableCatalog checks this list against the server's.
var pgMultirangeWords = map[string]bool{
	"int4multirange": true, "int8multirange": true, "nummultirange": true, "datemultirange": true, "tsmultirange": true,
	"tstzmultirange": true, "anymultirange": true, "anycompatiblemultirange": true, "multirange": true,
}

// columnDefs checks the types of a column definition list, the ( at toks[i] after a function
// in FROM (f(x) AS t(a int, b text), f(x) AS (a int), JSON_TABLE's COLUMNS (…)): the second
// name of each entry is its type. The alias and the first column may be any name PostgreSQL
// takes there, quoted ("order") or an unreserved keyword (over, partition, by, values, …): only
// a keyword it refuses there (pgNotAlias) opens no list, and VALUES followed by ( a query.
func (s *pgStmt) columnDefs(i int) string {
	prev, prev2, first := s.at(i-1), s.at(i-2), s.at(i+1)
	defs := prev.word("columns") ||
		prev.name() && !(prev.kind == pgWord && pgNotAlias[prev.text]) && (prev2.is(")") || prev2.word("as")) ||
		prev.word("as") && prev2.is(")")
	query := first.kind == pgWord && (pgNotAlias[first.text] || first.text == "values" && s.at(i+2).is("("))
	if !defs || !first.name() || query {
		return ""
	}
	for _, e := range s.args(pgSpan{i + 1, s.close[i]}) {
		if e.j-e.i > 1 && s.toks[e.i].name() {
			if reason := pgTypeRule(s.typeName(e.i + 1)); reason != "" {
				return reason
			}
		}
	}
	return ""
}

// pgNotAlias are the keywords PostgreSQL takes neither as a table alias nor as a column's name
// in a column definition list, so that a ( right before or after one opens no such list: an
// expression, a subquery, a join's condition. The unreserved keywords that open a window, a
// filter or a subquery (over, filter, within, partition, by, exists, between, values) are
// names there too: f(x) over(a tsquery) and AS t(by tsquery) are lists whose types are checked
// (a window's PARTITION BY x or w ORDER BY x names no refused type second).
var pgNotAlias = map[string]bool{
	"and": true, "or": true, "not": true, "in": true, "any": true, "all": true, "some": true, "on": true,
	"using": true, "when": true, "then": true, "else": true, "select": true, "with": true, "table": true,
	"where": true, "order": true, "distinct": true, "case": true, "lateral": true, "join": true, "from": true,
	"is": true, "like": true, "ilike": true, "group": true, "having": true, "union": true, "intersect": true,
	"except": true,
}

// callRule checks the call of toks[i] (toks[i+1] is its "("): the functions refused by name,
// the tsquery parsers by their text, lpad, rpad and format by the length or widths they pad
// to, to_char, to_number, to_timestamp and to_date by their template (a string constant), the
// two-argument log by its base (a short number constant), and the text searches, by their
// search string, pattern or set.
func (s *pgStmt) callRule(i int) string {
	name := s.toks[i].text
	if reason := pgRefusedCall(name); reason != "" {
		return reason
	}
	inner := pgSpan{i + 2, s.close[i+1]}
	args := s.args(inner)
	if pgTsqueryParsers[name] && (len(args) == 0 || !s.tsqueryConstant(args[len(args)-1])) {
		return pgCannotStop(name + " of a text that is not a string constant" + pgWhyTsquery)
	}
	switch name {
	case "lpad", "rpad":
		if len(args) < 2 || !s.smallCount(args[1]) {
			return pgCannotStop(fmt.Sprintf("%s to a length that is not an integer constant of at most %d", name, pgMaxPad) + pgWhyPad)
		}
	case "format":
		if len(args) == 0 {
			break
		}
		v, ok := s.literal(args[0])
		if !ok {
			return pgCannotStop("format with a format string that is not a string constant" + pgWhyPad)
		}
		if width, star := pgFormatWidth(v); star || width > pgMaxPad {
			return pgCannotStop(fmt.Sprintf("format with a width that is not a number of at most %d", pgMaxPad) + pgWhyPad)
		}
	case "to_char", "to_number", "to_timestamp", "to_date":
		if len(args) > 1 {
			if _, ok := s.literal(args[1]); !ok {
				return pgCannotStop(name + " with a template that is not a string constant" + pgWhyTemplate)
			}
		}
	case "timezone", "make_timestamptz", "date_trunc":
		at := map[string]int{"timezone": 0, "make_timestamptz": 6, "date_trunc": 2}[name]
		if len(args) > at && (name != "timezone" || len(args) == 2) && !s.zoneConstant(args[at], false) {
			return pgWhyZone
		}
	case "log", "numeric_log":
		if len(args) == 2 && !s.shortNumber(args[0]) {
			return pgCannotStop(fmt.Sprintf("%s with a base that is not a number constant of at most %d characters", name, pgMaxLogBase) + pgWhyLogBase)
		}
	}
	if c, ok := pgSearchCalls[name]; ok {
		if len(args) > 1 {
			return s.needleRule(name, c.kind, args[1], c.esc)
		}
		return ""
	}
	switch name {
	case "position": // position(search IN text), or pg_catalog.position(text, search)
		if j := s.find(inner, "in"); j >= 0 {
			return s.needleRule(name, pgSubstring, pgSpan{inner.i, j}, -1)
		}
		if len(args) > 1 {
			return s.needleRule(name, pgSubstring, args[1], -1)
		}
	case "trim": // trim([both|leading|trailing] [set] from text [, set]), trim(text [, set])
		if t := s.at(inner.i); t.word("both") || t.word("leading") || t.word("trailing") {
			inner.i++
		}
		if j := s.find(inner, "from"); j >= 0 {
			if j > inner.i {
				if reason := s.needleRule(name, pgCharSet, pgSpan{inner.i, j}, -1); reason != "" {
					return reason
				}
			}
			inner.i = j + 1
		}
		if rest := s.args(inner); len(rest) > 1 {
			return s.needleRule(name, pgCharSet, rest[1], -1)
		}
	}
	return ""
}

// pgWhyTemplate says why a template of to_char and its kin must be a string constant.
const pgWhyTemplate = " (the template is parsed into a node per character and walked without checking for interrupts: to_char(1, x) over a 20 MB template ran 2.7 s past a 2 s statement_timeout, to_timestamp(x, x) 3.7 s, and a text may be 1 GB; a constant, to_char(d, 'YYYY-MM'), is bounded by the statement)"

// pgWhyZone refuses a time zone named by anything but a string constant.
const pgWhyZone = "refused: a time zone named by anything but a string constant (AT TIME ZONE, timezone, make_timestamptz, date_trunc) is not allowed on PostgreSQL (the server keeps every zone it parses for the session's life, about 23 KB each, and made-up zones such as '<X' || g || '>1' took 458 MB for 20,000 in 0.7 s; a constant zone, AT TIME ZONE 'UTC', or an interval passes)"

// zoneConstant reports whether sp starts with (primary) or is (whole) a time zone the
// statement's text bounds: a string constant, cast to a text type or not, or an interval
// (which names no zone: INTERVAL '…' or a string constant cast to interval).
func (s *pgStmt) zoneConstant(sp pgSpan, primary bool) bool {
	i := sp.i
	if s.at(i).word("interval") && s.at(i+1).kind == pgString {
		i++
	}
	if i >= sp.j || s.at(i).kind != pgString {
		return false
	}
	i++
	for s.at(i).is("::") && s.at(i+1).kind == pgWord && (pgTextTypes[s.at(i+1).text] || s.at(i+1).text == "interval") && i+1 < sp.j {
		i += 2
	}
	return primary || i == sp.j
}

// pgMaxLogBase bounds, in characters, the number constant log(base, x) takes as its base: so
// written, a base differs from 1 by at least 10^-pgMaxLogBase, and the logarithms log works
// out have at most about 1,100 digits beside the result's 1,000.
const pgMaxLogBase = 100

// pgWhyLogBase says why the two-argument log needs a short constant base.
const pgWhyLogBase = " (numeric log(b, x) works out ln(b) and ln(x) to as many more digits as b is nearer to 1, without checking for interrupts, in a time that grows with the cube of those digits: a base of 1 + 10^-16383 made log(b, 10^-16383) run 17 s past a 1 s statement_timeout, where one numeric division takes at most a second or two; log(10, x), log(x) and ln(x) / ln(b) stay allowed)"

// shortNumber reports whether sp is one number constant of at most pgMaxLogBase characters.
func (s *pgStmt) shortNumber(sp pgSpan) bool {
	return sp.j-sp.i == 1 && s.toks[sp.i].kind == pgNumber && len(s.toks[sp.i].text) <= pgMaxLogBase
}

// pgMaxPad bounds the length lpad and rpad pad to, and format's widths, in characters.
const pgMaxPad = 10000

// pgWhyPad says why longer pads are refused.
const pgWhyPad = " (lpad, rpad and format's widths build a text of up to 1 GB from a few bytes without checking for interrupts: rpad('x', 268000000) ran 6.7 s past a 1 s statement_timeout, format('%1000000000s', 'x') 12.9 s)"

// smallCount reports whether sp is one integer constant of at most pgMaxPad.
func (s *pgStmt) smallCount(sp pgSpan) bool {
	if sp.j-sp.i != 1 || s.toks[sp.i].kind != pgNumber {
		return false
	}
	n, err := strconv.Atoi(s.toks[sp.i].text)
	return err == nil && n <= pgMaxPad
}

// pgFormatWidth is the widest width of format string f's specifiers (%[n$][-][width]type), and
// whether one takes its width from an argument (*).
func pgFormatWidth(f string) (widest int, star bool) {
	digits := func(i int) (int, int) {
		n := 0
		for ; i < len(f) && f[i] >= '0' && f[i] <= '9'; i++ {
			n = min(n*10+int(f[i]-'0'), 1<<30)
		}
		return n, i
	}
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		if i+1 < len(f) && f[i+1] == '%' {
			i++
			continue
		}
		n, j := digits(i + 1)
		if j < len(f) && f[j] == '$' { // an argument's position, not a width
			n, j = 0, j+1
		}
		for j < len(f) && f[j] == '-' {
			j++
		}
		if j < len(f) && f[j] == '*' {
			return widest, true
		}
		if w, k := digits(j); k > j {
			n, j = w, k
		}
		widest, i = max(widest, n), j
	}
	return widest, false
}

// find is the index of the word w in sp outside its parentheses, or -1.
func (s *pgStmt) find(sp pgSpan, w string) int {
	for j := sp.i; j < sp.j; j = s.skip(j) {
		if s.toks[j].word(w) {
			return j
		}
	}
	return -1
}

// pgSearchCall is how a text search function searches and, for LIKE's, its escape
// character.
type pgSearchCall struct {
	kind pgSearchKind
	esc  int
}

// pgSearchCalls are the functions of PostgreSQL's uninterruptible text searches whose second
// argument is what they search for.
var pgSearchCalls = func() map[string]pgSearchCall {
	m := map[string]pgSearchCall{}
	for _, n := range strings.Fields("strpos replace split_part string_to_table") {
		m[n] = pgSearchCall{pgSubstring, -1}
	}
	for _, n := range strings.Fields("btrim ltrim rtrim translate") {
		m[n] = pgSearchCall{pgCharSet, -1}
	}
	// LIKE's functions, called by name, escape with a backslash.
	for _, n := range strings.Fields(`like notlike textlike textnlike texticlike texticnlike bytealike byteanlike
		namelike namenlike nameiclike nameicnlike bpcharlike bpcharnlike bpchariclike bpcharicnlike`) {
		m[n] = pgSearchCall{pgLike, '\\'}
	}
	return m
}()

// pgRefusedCall refuses by name the functions behind the refused operators and types, the
// array type casts written as calls (_int4('{1}')), parse_ident (an array of any length from
// a text), normalize and ts_rank (quadratic, unchecked: normalize's reordering of combining
// marks, ts_rank's pairs of query words), jsonb_pretty (its text grows with the square of the
// nesting), the multirange functions (any name holding
// multirange, and the aggregates range_agg and range_intersect_agg and their support
// functions), and setseed, whose seed outlives the session's reset.
func pgRefusedCall(name string) string {
	switch {
	case name == "setseed":
		return "refused: setseed is not allowed on PostgreSQL (the seed outlives the statement on the server's session, which neither ROLLBACK nor DISCARD ALL resets, so a later episode's random(), another task's too, would follow it)"
	case strings.HasPrefix(name, "_"):
		return pgCannotStop("the array type " + name + pgWhyArrays)
	case name == "parse_ident":
		return pgCannotStop("parse_ident (it makes an array of any length from a text, and array functions loop over every element without checking for interrupts)")
	case pgGeometricCalls[name], strings.HasPrefix(name, "poly_"), strings.HasPrefix(name, "path_"):
		return pgCannotStop(name + pgWhyGeometric)
	case name == "jsonb_contains", name == "jsonb_contained", name == "arraycontains", name == "arraycontained":
		return pgCannotStop(name + pgWhyContainment)
	case name == "arrayoverlap":
		return pgCannotStop(name + pgWhyOverlap)
	case name == "jsonb_exists_any", name == "jsonb_exists_all":
		return pgCannotStop(name + pgWhyKeyLists)
	case name == "normalize":
		return pgCannotStop("normalize (Unicode normalization puts each run of combining marks in order by swapping neighbours, quadratic in the run's length, without checking for interrupts; IS NORMALIZED stays allowed)")
	case name == "jsonb_pretty":
		return pgCannotStop("jsonb_pretty (it indents each line by its depth, so its text grows with the square of the nesting without checking for interrupts: 8,000 nested arrays, 16 KB, made 256 MB and ran 5 s past a 1 s statement_timeout)")
	case name == "ts_rank":
		return pgCannotStop("ts_rank (it compares every position of every pair of the query's words without checking for interrupts; ts_rank_cd stays allowed)")
	case strings.Contains(name, "multirange"), strings.HasPrefix(name, "range_agg"), strings.HasPrefix(name, "range_intersect_agg"):
		return pgCannotStop(name + pgWhyMultiranges)
	}
	return ""
}

// pgGeometricCalls are the functions that make polygons and paths, or take them, named
// otherwise than poly_… and path_….
var pgGeometricCalls = map[string]bool{
	"polygon": true, "path": true, "popen": true, "pclose": true, "dist_cpoly": true, "dist_polyc": true,
	"dist_polyp": true, "dist_ppoly": true, "dist_pathp": true, "dist_ppath": true, "on_ppath": true,
}

// needleRule refuses the text search fn whose search string, pattern or set, sp, is not a
// constant (literal), or costs more than pgMaxPasses comparisons per character of the text it
// is searched in.
func (s *pgStmt) needleRule(fn string, kind pgSearchKind, sp pgSpan, esc int) string {
	what, how := "search string", "compares the search string at every position of the text"
	switch kind {
	case pgLike:
		what, how = "pattern", "tries the pattern at every position of the text"
	case pgCharSet:
		what, how = "set of characters", "compares every character of the text with every character of the set"
	}
	const instead = "or a regular expression (~, ~*, regexp_replace, substring(x from '…')), which PostgreSQL can stop"
	v, ok := s.literal(sp)
	if !ok {
		return fmt.Sprintf("refused: %s with a %s that is not a string constant cannot be stopped at the deadline on PostgreSQL (it %s without checking for interrupts, so its time is the product of their lengths), so it is not allowed; write it as a string constant ('…'), %s", fn, what, how, instead)
	}
	if p := pgSearchPasses(kind, v, esc); p > pgMaxPasses {
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("refused: %s with the %s %q cannot be stopped at the deadline on PostgreSQL (it %s without checking for interrupts, and this one may take over %d comparisons per character of the text), so it is not allowed; use a shorter or less repetitive one, %s", fn, what, v, how, pgMaxPasses, instead)
	}
	return ""
}

// literal evaluates sp as a constant the screen can measure: plain string constants joined
// by ||, inside lower(), upper() and parentheses, cast to a text type. ok is false for anything
// else (a column, another function's result, an E” or $$ string, a number).
func (s *pgStmt) literal(sp pgSpan) (string, bool) {
	var b strings.Builder
	i := sp.i
	for {
		switch t := s.at(i); {
		case i >= sp.j:
			return "", false
		case t.kind == pgString && t.plain:
			b.WriteString(t.text)
			i++
		case (t.word("lower") || t.word("upper")) && s.at(i+1).is("("), t.is("("):
			if !t.is("(") {
				i++
			}
			inner, ok := s.literal(pgSpan{i + 1, s.close[i]})
			if !ok || s.close[i] >= sp.j {
				return "", false
			}
			b.WriteString(inner)
			i = s.close[i] + 1
		default:
			return "", false
		}
		for i+1 < sp.j && s.at(i).is("::") && s.at(i+1).kind == pgWord && pgTextTypes[s.at(i+1).text] {
			i += 2
		}
		if i == sp.j {
			return b.String(), true
		}
		if !s.at(i).is("||") {
			return "", false
		}
		i++
	}
}

// pgTextTypes are the types a constant may be cast to and still be measured as written.
var pgTextTypes = map[string]bool{"text": true, "varchar": true, "bpchar": true, "char": true, "character": true, "name": true, "bytea": true}

// operandEnd is the index of the first token after the right operand of LIKE or ~~ that
// starts at toks[i]: outside parentheses, a comma, a closing parenthesis, a semicolon, a
// comparison, or a word (a keyword: AND, ESCAPE, THEN; or a column, which makes the operand no
// constant) other than lower, upper and a type after ::.
func (s *pgStmt) operandEnd(i int) int {
	for i < len(s.toks) {
		t := s.toks[i]
		switch {
		case t.is("("):
			i = s.skip(i)
			continue
		case t.is(")"), t.is(","), t.is(";"), t.kind == pgOp && pgComparisons[t.text]:
			return i
		case t.is("::"):
			i++ // the type's name
		case t.kind == pgWord && t.text != "lower" && t.text != "upper":
			return i
		}
		i++
	}
	return i
}

// pgComparisons bind more loosely than LIKE: they end its operand.
var pgComparisons = map[string]bool{"=": true, "<>": true, "!=": true, "<": true, ">": true, "<=": true, ">=": true}

// args splits sp at its commas outside parentheses.
func (s *pgStmt) args(sp pgSpan) []pgSpan {
	if sp.j <= sp.i {
		return nil
	}
	var out []pgSpan
	start := sp.i
	for j := sp.i; j < sp.j; j = s.skip(j) {
		if s.toks[j].is(",") {
			out = append(out, pgSpan{start, j})
			start = j + 1
		}
	}
	return append(out, pgSpan{start, sp.j})
}
