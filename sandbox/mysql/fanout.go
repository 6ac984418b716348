package mysql

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/chainedsql/chainedsql/sandbox"
)

// mysqlMaxFanOut bounds mysqlFanOut: how many times one row may evaluate the items of a
// select list through the references to them.
const mysqlMaxFanOut = 64

// mysqlFanOutRule refuses lower (mysqlText's reading) when one select-list item could be
// evaluated more than mysqlMaxFanOut times in one row through references to the items before
// it (mysqlFanOut). A subquery may name an item of an enclosing select list by its alias
// (SELECT 1 AS a0, (SELECT a0+a0) AS a1, …; AS may be left out) or by its text (`1+1`), and
// each such reference evaluates the item's expression again, within one row, where MariaDB
// does not check for a kill: 6 levels of 16 references ran 2.6 s past a 1 s
// max_statement_time, and each level more multiplies that by 16 (with a FROM in each
// subquery, 26 s past). Derived tables and common table expressions are materialized instead
// (mysqlNoMerge).
func mysqlFanOutRule(lower string) string {
	if n := mysqlCTECopies(mysqlTokens(lower)); n > mysqlMaxCTECopies {
		return fmt.Sprintf("refused: the common table expressions would be copied over %d times (each reference to one copies its definition, the references inside it included): MariaDB makes the copies while it prepares the statement, where neither the time limit nor KILL stops it, in memory that grows with them", mysqlMaxCTECopies)
	}
	if n, item := mysqlFanOut(lower); n > mysqlMaxFanOut {
		return fmt.Sprintf("refused: the select-list item %q would be evaluated over %d times in one row through the aliases it names and they name in turn: a subquery naming an item of an enclosing select list by its alias evaluates that item's expression again at each reference, and MariaDB does not check for a kill within a row",
			cut(item, 60), mysqlMaxFanOut)
	}
	return ""
}

// mysqlMaxCTECopies bounds mysqlCTECopies.
const mysqlMaxCTECopies = 256

// mysqlCTECopies returns how many copies of common table expressions MariaDB makes to prepare
// the statement of toks: each reference to one (its name, neither called nor qualified)
// copies its definition, with the references in it, so a CTE naming the one before k times,
// depth levels deep, is copied k^depth times. MariaDB makes them while it prepares, unchecked
// for a kill: 5 levels of 8 references (968 bytes) took 11 GB of the server's memory for
// 140 s past a KILL, and 7 levels took all of it (the server was killed for memory), 4 levels
// ran 2.6 s past a 1 s limit. A reference resolves as MariaDB scopes it: to the innermost
// definition of its name whose WITH encloses it, where a definition's own body, unless its WITH
// is RECURSIVE, sees the definitions outside it (WITH c AS (WITH c AS (…) SELECT … FROM c r0,
// c r1) … names the inner c twice, each copying the inner one); a recursive reference to itself
// counts once, but a WITH inside a RECURSIVE one's body still shadows it (WITH RECURSIVE c AS
// (WITH RECURSIVE c AS (…) SELECT … FROM c r0, c r1) … copies the inner c twice, as without
// RECURSIVE).
func mysqlCTECopies(toks []myToken) int { return mysqlCTEWeight(toks, nil, 1) }

// mysqlCTEWeight is mysqlCTECopies with each copy of a definition weighing base plus the
// weights of the tokens its body owns (weight[i] for token i; nil weighs none), and the
// statement outside every definition weighing its own tokens' weights: mysqlCTECopies weighs
// each copy 1, mysqlValueSites the calls and select-list items each copy holds.
func mysqlCTEWeight(toks []myToken, weight []int, base int) int {
	type cte struct {
		name         string
		from, to     int // its definition's tokens
		scope, until int // the tokens its WITH's query reads it in
		recursive    bool
	}
	var defs []cte
	names := map[string]bool{}
	header := make([]bool, len(toks)) // the names being defined, no references
	for i, t := range toks {
		if t.kind != 'w' || t.text != "with" {
			continue
		}
		until := i + 1
		for until < len(toks) && toks[until].depth >= t.depth {
			until++
		}
		k := i + 1
		recursive := k < len(toks) && toks[k].text == "recursive"
		if recursive {
			k++
		}
		for k < len(toks) && (toks[k].kind == 'w' || toks[k].kind == 'n') {
			name := toks[k].text
			header[k] = true
			k++
			if k < len(toks) && toks[k].text == "(" && toks[k].kind == 'p' { // its columns
				for k++; k < len(toks) && !(toks[k].text == ")" && toks[k].depth == t.depth); k++ {
				}
				k++
			}
			if k+1 >= len(toks) || toks[k].text != "as" || toks[k+1].text != "(" {
				break
			}
			from := k + 2
			for k = from; k < len(toks) && !(toks[k].kind == 'p' && toks[k].text == ")" && toks[k].depth == t.depth); k++ {
			}
			defs = append(defs, cte{name, from, k, i, until, recursive})
			names[name] = true
			if k+1 < len(toks) && toks[k+1].kind == 'w' && toks[k+1].text == "cycle" { // CYCLE a, b RESTRICT
				for k++; k < len(toks) && !(toks[k].kind == 'w' && toks[k].text == "restrict"); k++ {
				}
			}
			if k+1 >= len(toks) || toks[k+1].text != "," {
				break
			}
			k += 2
		}
	}
	outside := 0
	for _, w := range weight {
		outside += w
	}
	if len(defs) == 0 {
		return outside
	}
	// owner[i] is the innermost definition whose body holds token i, -1 for none.
	owner := make([]int, len(toks))
	for i := range owner {
		owner[i] = -1
	}
	for e, d := range defs { // a definition nested in another comes after it
		for i := d.from; i < d.to; i++ {
			owner[i] = e
		}
	}
	// resolve returns the definition the token at i names, -1 for none (a table, a column, a
	// recursive reference).
	resolve := func(i int) int {
		t := toks[i]
		if t.kind != 'w' && t.kind != 'n' || !names[t.text] || header[i] {
			return -1
		}
		if i+1 < len(toks) && toks[i+1].kind == 'p' && (toks[i+1].text == "(" || toks[i+1].text == ".") {
			return -1
		}
		if i > 0 && toks[i-1].kind == 'p' && toks[i-1].text == "." && i > 1 && (toks[i-2].kind == 'n' || toks[i-2].kind == 'w' && !mysqlKeywords[toks[i-2].text]) {
			return -1 // db.name, a table; FROM .name names the CTE
		}
		best := -1
		for e, d := range defs {
			if d.name != t.text || i < d.scope || i >= d.until {
				continue
			}
			if i >= d.from && i < d.to && !d.recursive {
				continue // its own name in its body is a definition outside it
			}
			if best < 0 || d.scope > defs[best].scope {
				best = e
			}
		}
		if best >= 0 && i >= defs[best].from && i < defs[best].to {
			return -1 // a recursive reference, unless a WITH inside the body names another
		}
		return best
	}
	// refs[e] are the definitions definition e's body names (owned by it, not by one inside),
	// top those the statement names outside every definition; own[e] is the weight of one copy
	// of e, without those it names.
	refs := make([][]int, len(defs))
	var top []int
	own := make([]int, len(defs))
	for e := range own {
		own[e] = base
	}
	for i, w := range weight {
		if w != 0 && owner[i] >= 0 {
			own[owner[i]] += w
			outside -= w
		}
	}
	for i := range toks {
		switch r := resolve(i); {
		case r < 0:
		case owner[i] >= 0:
			refs[owner[i]] = append(refs[owner[i]], r)
		default:
			top = append(top, r)
		}
	}
	// copies counts definition e's copies reached along the references on the path: a
	// reference to one on the path (recursive, or a cycle of names: WITH c0 AS (SELECT 1 AS s,
	// 0 AS c1), c1 AS (SELECT … AS s, 0 AS c2 FROM c0 r0, …), … has each body name the next
	// definition as an alias) counts once, and a count that counted one is not kept, since it
	// holds only for that path: kept, c1's count, made while c0's was, held c0 as 1, and so on
	// up the chain. Past mysqlFanOutWork references followed, the copies are too many.
	memo := make([]int, len(defs))
	onPath := make([]bool, len(defs))
	work := 0
	var copies func(e int) (int, bool)
	copies = func(e int) (int, bool) {
		if memo[e] > 0 {
			return memo[e], true
		}
		if onPath[e] {
			return 1, false
		}
		onPath[e] = true
		defer func() { onPath[e] = false }()
		c, kept := own[e], true
		for _, r := range refs[e] {
			if work++; work > mysqlFanOutWork {
				return 1 << 30, true
			}
			rc, ok := copies(r)
			c, kept = min(c+rc, 1<<30), kept && ok
		}
		if kept {
			memo[e] = c
		}
		return c, kept
	}
	total := outside
	for _, r := range top {
		c, _ := copies(r)
		total = min(total+c, 1<<30)
	}
	for e := range defs { // a definition no reference reaches is still prepared
		c, _ := copies(e)
		total = max(total, c)
	}
	return total
}

// myToken is a token of mysqlTokens: a word (lower-cased text; it may begin with digits, as a
// MariaDB name may: 1a, 2c, 0x), a backquoted name or a string (its content: a string may be an
// alias, SELECT 1 AS 'a0'), a number (digits only), or one byte of punctuation.
type myToken struct {
	text   string
	kind   byte // 'w' word, 'n' backquoted name, 'q' string, 's' number, 'p' punctuation
	depth  int  // parentheses open before it ("(" itself at the outer depth)
	at, to int  // its bytes in the text
}

// mysqlTokens splits lower as mysqlText reads it: strings are data, comments blanks, and a
// number (1e1, 1.5, .5, 0x41) ends where MariaDB ends it, before a name that follows it
// without a gap (mysqlWordEnd: SELECT 1.5a1 is 1.5 named a1).
func mysqlTokens(lower string) []myToken {
	var out []myToken
	depth := 0
	for i := 0; i < len(lower); {
		c := lower[i]
		switch {
		case c == '\'' || c == '"':
			j := sandbox.SkipQuoted(lower, i)
			out = append(out, myToken{text: mysqlStringText(lower[i:j]), kind: 'q', depth: depth, at: i, to: j})
			i = j
		case c == '`':
			j := sandbox.SkipQuoted(lower, i)
			out = append(out, myToken{text: strings.ReplaceAll(strings.TrimSuffix(lower[i+1:j], "`"), "``", "`"), kind: 'n', depth: depth, at: i, to: j})
			i = j
		case sandbox.IsIdentByte(c):
			n := len(out)
			afterName := n >= 2 && out[n-1].text == "." && out[n-1].at == i-1 && out[n-2].to == i-1 && (out[n-2].kind == 'w' || out[n-2].kind == 'n')
			j, num := mysqlWordEnd(lower, i, afterName)
			kind := byte('w')
			if num {
				kind = 's' // a name may begin with a digit (1a, 2c), and follow a number (1e1a1)
			}
			out = append(out, myToken{text: lower[i:j], kind: kind, depth: depth, at: i, to: j})
			i = j
		default:
			n := len(out)
			if j, num := mysqlWordEnd(lower, i, n > 0 && out[n-1].to == i && (out[n-1].kind == 'w' || out[n-1].kind == 'n')); num {
				out = append(out, myToken{text: lower[i:j], kind: 's', depth: depth, at: i, to: j}) // .5
				i = j
				continue
			}
			if j := sandbox.CommentEnd(lower, i); j > i {
				i = j
				continue
			}
			if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v' {
				i++
				continue
			}
			if c == ')' {
				depth--
			}
			out = append(out, myToken{text: string(c), kind: 'p', depth: depth, at: i, to: i + 1})
			if c == '(' {
				depth++
			}
			i++
		}
	}
	return out
}

// myItem is an item of a select list: the names it may be referenced by (its alias, else
// its text) and the names it references below its own depth, in subqueries or calls.
type myItem struct {
	text  string
	at    int // the byte its first token begins at
	names []string
	refs  []string
}

// mysqlSelectEnds are the words that end a select list at its depth.
var mysqlSelectEnds = map[string]bool{"from": true, "where": true, "group": true, "having": true, "order": true,
	"limit": true, "union": true, "except": true, "intersect": true, "into": true, "window": true, "for": true, "lock": true}

// mysqlWindowClause reports whether toks, after a WINDOW, are a window clause's name AS (: WINDOW
// is no reserved word, so an item may be named window (SELECT 1 AS window, (SELECT window+…)).
func mysqlWindowClause(toks []myToken) bool {
	return len(toks) >= 3 && (toks[0].kind == 'w' || toks[0].kind == 'n') && toks[1].kind == 'w' && toks[1].text == "as" && toks[2].kind == 'p' && toks[2].text == "("
}

// mysqlFanOut returns an upper bound on how many times one row evaluates a select-list item
// through the references to items (by alias or text, from anywhere within another item: the
// server resolves those in its subqueries to the enclosing items), and that item's text: an
// item costs 1 plus the cost of each item its references name (the costliest of those of one
// name), so that a chain of aliases, each naming the one before k times, costs about k^depth.
func mysqlFanOut(lower string) (int, string) {
	items := mysqlSelectItems(lower, mysqlTokens(lower))
	byName := map[string][]*myItem{}
	for _, it := range items {
		for _, n := range it.names {
			byName[mysqlNameKey(n)] = append(byName[mysqlNameKey(n)], it)
		}
	}
	// named returns the items r may name: those of its key, and where r may be a name MariaDB
	// cut (mysqlNameCut), those whose key it begins, but for a last - or /: the cut may end
	// within a -- or /* that the key of the whole name reads as a comment (inside a string:
	// '-- '), and so drops with what follows it.
	named := func(r string) []*myItem {
		k := mysqlNameKey(r)
		if utf8.RuneCountInString(r) < mysqlNameCut/4 {
			return byName[k]
		}
		k = strings.TrimRight(k, "-/")
		var out []*myItem
		for _, it := range items {
			for _, n := range it.names {
				if strings.HasPrefix(mysqlNameKey(n), k) {
					out = append(out, it)
					break
				}
			}
		}
		return out
	}
	// cost is the cost of it reached along path: a name of an item on the path (a cycle, which
	// a name matching more items than MariaDB resolves it to makes) counts 1 there, and a cost
	// that counted one is not kept, since it holds only for that path: kept, it undercounted
	// a chain whose every item also held the next one's name (SELECT (SELECT 1 + (SELECT 0 AS
	// a1)) AS a0, (SELECT a0+…+a0 + (SELECT 0 AS a2)) AS a1, …). A real reference never
	// names an item on the path of real references to it, so the cost of each item along
	// those is at least what MariaDB evaluates. Past mysqlFanOutWork steps, it is all too many.
	memo := map[*myItem]int{}
	onPath := map[*myItem]bool{}
	resolved := map[string][]*myItem{} // named's answers
	work := 0
	var cost func(it *myItem) (int, bool)
	cost = func(it *myItem) (int, bool) {
		if c, ok := memo[it]; ok {
			return c, true
		}
		if onPath[it] {
			return 1, false
		}
		onPath[it] = true
		c, kept := 1, true
		for _, r := range it.refs {
			most := 0
			cands, ok := resolved[r]
			if !ok {
				cands = named(r)
				resolved[r] = cands
			}
			for _, o := range cands {
				if work++; work > mysqlFanOutWork {
					delete(onPath, it)
					return 1 << 30, true
				}
				if o != it { // a name resolving to its own item is another item's
					oc, ok := cost(o)
					most, kept = max(most, oc), kept && ok
				}
			}
			c = min(c+most, 1<<30)
		}
		delete(onPath, it)
		if kept {
			memo[it] = c
		}
		return c, kept
	}
	top, text := 0, ""
	for _, it := range items {
		if c, _ := cost(it); c > top {
			top, text = c, it.text
		}
	}
	return top, text
}

// mysqlSelectItems returns the items of every select list of toks (lower's tokens), each
// SELECT's list read up to the word or punctuation that ends it at its depth.
func mysqlSelectItems(lower string, toks []myToken) []*myItem {
	var items []*myItem
	for i, t := range toks {
		if t.kind != 'w' || t.text != "select" {
			continue
		}
		d := t.depth
		start := i + 1
		for start < len(toks) && toks[start].kind == 'w' && (toks[start].text == "distinct" || toks[start].text == "all" || toks[start].text == "distinctrow" || strings.HasPrefix(toks[start].text, "sql_") || toks[start].text == "straight_join" || toks[start].text == "high_priority") {
			start++
		}
		k := start
		for k <= len(toks) {
			end := k == len(toks) || toks[k].depth < d || toks[k].depth == d && (toks[k].kind == 'p' && (toks[k].text == "," || toks[k].text == ";") || toks[k].kind == 'w' && mysqlSelectEnds[toks[k].text] && (toks[k].text != "window" || mysqlWindowClause(toks[k+1:])))
			if !end {
				k++
				continue
			}
			if k > start {
				items = append(items, mysqlItem(lower, toks[start:k], d))
			}
			if k == len(toks) || toks[k].text != "," || toks[k].depth != d {
				break
			}
			k++
			start = k
		}
	}
	return items
}

// mysqlName3 returns name as MariaDB names an item by it on a utf8mb4 connection: its names
// are utf8mb3, where a character of 4 bytes of UTF-8 becomes ?, so a subquery names SELECT 1
// AS '😀a0' by `?a0` (and an unaliased item's text likewise).
func mysqlName3(name string) string {
	return strings.Map(func(r rune) rune {
		if r > 0xffff {
			return '?'
		}
		return r
	}, name)
}

// mysqlFanOutWork bounds the references mysqlFanOut follows for one statement (a cost is not
// kept where a cycle cut it, so one may be followed again): past it, the statement is refused
// as too costly.
const mysqlFanOutWork = 1 << 20

// mysqlNameCut is the length in bytes MariaDB cuts an item's name to (an unaliased item is
// named by its text): a subquery names the item by the cut name, not by its whole text.
const mysqlNameCut = 255

// mysqlNameKey returns name as mysqlFanOut matches it: without comments and white space (bytes
// up to a space, and DEL). MariaDB strips an alias's leading ones (AS ` a0` is named a0) and
// names an item with a comment by a text of its own, so a key may match more names than
// MariaDB does, never fewer.
func mysqlNameKey(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); {
		if j := sandbox.CommentEnd(name, i); j > i {
			i = j
			continue
		}
		if c := name[i]; c > ' ' && c != 0x7f {
			b.WriteByte(c)
		}
		i++
	}
	return b.String()
}

// mysqlItem reads the select-list item toks (at depth d) of lower: its alias (after AS, or
// a word, backquoted name or string ending it after an operand), or its text, and that name as
// MariaDB writes it (mysqlName3); and the names it references deeper than d (neither called
// nor qualified).
func mysqlItem(lower string, toks []myToken, d int) *myItem {
	it := &myItem{text: strings.TrimSpace(lower[toks[0].at:toks[len(toks)-1].to]), at: toks[0].at}
	last := toks[len(toks)-1]
	switch {
	case len(toks) >= 2 && last.kind != 'p' && last.depth == d && toks[len(toks)-2].kind == 'w' && toks[len(toks)-2].text == "as":
		it.names = []string{last.text}
	case len(toks) >= 2 && last.depth == d && mysqlImplicitAlias(toks, d):
		it.names = []string{last.text}
	default:
		it.names = []string{it.text}
		if len(toks) == 1 && toks[0].kind != 'p' {
			it.names = []string{toks[0].text}
		}
	}
	if n := mysqlName3(it.names[0]); n != it.names[0] {
		it.names = append(it.names, n)
	}
	for i, t := range toks {
		// Keywords count too: MariaDB reads most of them as names (SELECT 1 AS year, (SELECT
		// year+year) AS month), and only names some item has matter (mysqlFanOut).
		if t.depth <= d || t.kind != 'w' && t.kind != 'n' {
			continue
		}
		if i+1 < len(toks) && (toks[i+1].text == "(" || toks[i+1].text == ".") && toks[i+1].kind == 'p' {
			continue
		}
		if i > 0 && toks[i-1].kind == 'p' && (toks[i-1].text == "." || toks[i-1].text == "@") {
			continue
		}
		it.refs = append(it.refs, t.text)
	}
	return it
}

// mysqlImplicitAlias reports whether the last token of the select-list item toks (at depth d)
// is its alias written without AS: a word, backquoted name or string after an operand (a ")",
// a name, a number, a string, or a keyword that ends one: SELECT 1 IS NULL a, CASE … END a).
// Keywords too may be aliases (SELECT 1 year, (SELECT year+year) day), but for the END of a
// CASE and the unit of an INTERVAL.
func mysqlImplicitAlias(toks []myToken, d int) bool {
	last, prev := toks[len(toks)-1], toks[len(toks)-2]
	switch {
	case last.kind != 'n' && last.kind != 'q' && last.kind != 'w':
		return false
	case prev.kind == 'p':
		return prev.text == ")"
	case prev.kind == 'w' && mysqlOperandNext[prev.text]:
		return false
	case last.kind != 'w' || !mysqlKeywords[last.text]:
		return true
	}
	cases, ends, interval := 0, 0, false
	for _, t := range toks[:len(toks)-1] {
		if t.depth == d && t.kind == 'w' {
			switch t.text {
			case "case":
				cases++
			case "end":
				ends++
			case "interval":
				interval = true
			}
		}
	}
	switch {
	case last.text == "end":
		return ends >= cases
	case mysqlUnits[last.text]:
		return !interval
	}
	return true
}

// mysqlOperandNext are the keywords an operand follows (SELECT x, x IS y, CASE x, x COLLATE
// y): a word after one is no alias.
var mysqlOperandNext = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`select distinct distinctrow all and or not is in like rlike regexp
		between case when then else collate as interval div mod xor escape binary sounds over by
		partition order any some exists straight_join high_priority sql_no_cache sql_cache
		sql_calc_found_rows sql_small_result sql_big_result sql_buffer_result separator`) {
		m[w] = true
	}
	return m
}()

// mysqlUnits are the units of an INTERVAL, which end it without being an alias.
var mysqlUnits = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`year month day hour minute second microsecond week quarter
		day_hour day_minute day_second day_microsecond hour_minute hour_second hour_microsecond
		minute_second minute_microsecond second_microsecond year_month`) {
		m[w] = true
	}
	return m
}()

// mysqlKeywords are the words of MySQL's grammar that may end a select-list item without
// being its alias (CASE … END, a cast's CHAR): a word missing here could be read as an alias,
// and so only make the item costlier where items name it.
var mysqlKeywords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`select from where and or not in is null as on join left right inner
		outer cross natural using group by order having limit offset asc desc distinct distinctrow all
		any some union except intersect exists between like rlike regexp escape case when then else end
		interval true false unknown div mod xor collate with recursive over partition rows range
		preceding following unbounded current row window binary unsigned signed char character varchar
		date time datetime timestamp decimal dec numeric integer int bigint smallint tinyint float double
		real year month day hour minute second microsecond week quarter day_hour day_minute day_second
		hour_minute hour_second minute_second separator straight_join sounds values table into for
		update share lock mode nowait skip locked high_priority sql_no_cache sql_cache
		sql_calc_found_rows sql_small_result sql_big_result sql_buffer_result ignore force index key
		use nulls first last fetch next only percent ties json nchar text charset lateral of rollup`) {
		m[w] = true
	}
	return m
}()

// mysqlEscapes are the backslash escapes of MariaDB's strings that stand for another byte.
var mysqlEscapes = map[byte]byte{'0': 0, 'b': '\b', 'n': '\n', 'r': '\r', 't': '\t', 'z': 0x1a}

// mysqlStringText returns the content of the quoted string q as MariaDB reads it: the doubled
// quote and backslash escapes (\0, \b, \n, \r, \t, \Z, else the byte itself) undone.
func mysqlStringText(q string) string {
	if len(q) < 2 {
		return ""
	}
	quote, body := q[0], q[1:]
	body = strings.TrimSuffix(body, string(quote))
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body):
			i++
			c = body[i]
			if r, ok := mysqlEscapes[c]; ok {
				c = r
			}
		case c == quote && i+1 < len(body) && body[i+1] == quote:
			i++
		}
		b.WriteByte(c)
	}
	return b.String()
}
