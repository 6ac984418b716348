package mysql

import "fmt"

// mysqlMaxValueSites bounds mysqlValueSites: with each site holding a value of up to the
// server's max_allowed_packet (16 MiB by default), 128 sites hold at most 2 GiB, the server
// memory sandbox.DefaultMaxServerMemory allows a PostgreSQL backend. BIRD's dev gold statements
// have at most 31.
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
// checks for no kill; a statement of MaxStatement bytes could hold 40,000 such calls.
func mysqlValueSites(lower string) int {
	toks := mysqlTokens(lower)
	n := len(mysqlSelectItems(lower, toks))
	for i, t := range toks[:max(len(toks)-1, 0)] {
		if (t.kind == 'w' && !mysqlNotCalls[t.text] || t.kind == 'n') && toks[i+1].kind == 'p' && toks[i+1].text == "(" {
			n++
		}
	}
	return n
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
