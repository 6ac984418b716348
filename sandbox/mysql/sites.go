package mysql

import (
	"fmt"
	"strings"
)

// mysqlMaxValueSites bounds mysqlValueSites: with each site holding a value of up to the
// server's max_allowed_packet (16 MiB by default), 128 sites hold at most 2 GiB, the server
// memory sandbox.DefaultMaxServerMemory allows a PostgreSQL backend. BIRD's dev gold statements
// have at most 62.
const mysqlMaxValueSites = 128

// mysqlNotCalls are the keywords that may stand before a ( without calling anything (IN (…),
// EXISTS (…), AS (…), OVER (…), FROM (…), …); the rest of the words before a ( are counted as
// calls, a keyword among them only overcounting.
var mysqlNotCalls = map[string]bool{
	"in": true, "exists": true, "as": true, "from": true, "join": true, "over": true, "using": true,
	"on": true, "values": true, "any": true, "some": true, "all": true, "and": true, "or": true, "xor": true,
	"not": true, "where": true, "having": true, "when": true, "then": true, "else": true, "select": true,
	"union": true, "except": true, "intersect": true, "lateral": true, "by": true, "with": true,
	"distinct": true, "is": true, "like": true, "between": true, "recursive": true, "window": true,
	"partition": true, "case": true, "limit": true, "offset": true, "div": true,
}

// mysqlValueSites returns how many places of the statement lower (mysqlText's reading) may
// each hold a value of its own while one row is evaluated: the calls (a word or backquoted
// name before a "(", but for mysqlNotCalls), each of which keeps its result in a buffer of its
// own until the statement ends (CONCAT, LOWER, CAST, …), and the items of every select list,
// which MariaDB copies into the row it sends (or into a derived table's row). MariaDB frees
// none of those buffers before the statement ends and counts none of them against
// max_session_mem_used, and a value may be up to max_allowed_packet (16 MiB): a recursive CTE's
// concat(s, s) builds 8 MiB in 23 steps, and 100 calls of LOWER (or CONCAT) over it grew the
// server by 840 MB within one row, 100 select-list items naming it by 806 MB, where MariaDB
// checks for no kill; a statement of MaxStatement bytes could hold 40,000 such calls. The
// sites of a common table expression's body count once for each copy of it MariaDB makes (each
// reference, mysqlCTEWeight), each copy materialized with values of its own (count(*) over 10
// references of a CTE of 10 such items grew the server by 1,690 MB), and a * or x.* item,
// whose columns may be every copy's items again, multiplies the count by one more (10 w.* over
// such a CTE: 1,000 MB). Each column of a JSON_TABLE (its PATH) holds a value of its own too:
// 100 LONGTEXT columns of one 8 MiB string grew the server by 812 MB.
func mysqlValueSites(lower string) int {
	toks := mysqlTokens(lower)
	weight := make([]int, len(toks))
	at := map[int]int{}
	for i, t := range toks {
		at[t.at] = i
	}
	stars := 0
	for _, it := range mysqlSelectItems(lower, toks) {
		weight[at[it.at]]++
		if it.text == "*" || strings.HasSuffix(it.text, ".*") {
			stars++
		}
	}
	for i, t := range toks[:max(len(toks)-1, 0)] {
		if (t.kind == 'w' && !mysqlNotCalls[t.text] || t.kind == 'n') && toks[i+1].kind == 'p' && toks[i+1].text == "(" {
			weight[i]++
		}
		if t.kind == 'w' && t.text == "path" { // a JSON_TABLE column (or a name path: overcounted)
			weight[i]++
		}
	}
	n := mysqlCTEWeight(toks, weight, 0)
	return min(n*(1+stars), 1<<30)
}

// mysqlValueSitesRule refuses lower (mysqlText's reading) when it has more than
// mysqlMaxValueSites places that may each hold a value of up to max_allowed_packet in one row
// (mysqlValueSites).
func mysqlValueSitesRule(lower string) string {
	if n := mysqlValueSites(lower); n > mysqlMaxValueSites {
		return fmt.Sprintf("refused: the statement has %d calls and select-list items, over %d: each may hold a value of up to max_allowed_packet (16 MiB) at once within one row, memory that MariaDB neither counts against max_session_mem_used nor frees before the statement ends, and within a row it checks for no kill", n, mysqlMaxValueSites)
	}
	return ""
}
