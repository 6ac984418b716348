package mysql

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// myWideCTE returns a statement reading a CTE w of width items naming r's value (as myWide)
// through refs references to w, each a copy of w with items of its own: "stars" selects
// w.* refs times from one reference, "refs" counts the rows of refs references joined.
func myWideCTE(steps, width, refs int, kind string) string {
	var items, from, stars []string
	for i := range width {
		items = append(items, fmt.Sprintf("s a%d", i))
	}
	for i := range refs {
		from = append(from, fmt.Sprintf("w w%d", i))
		stars = append(stars, "w.*")
	}
	w := fmt.Sprintf("WITH RECURSIVE r(n,s) AS (SELECT 1, CAST('a' AS CHAR(16000000)) UNION ALL SELECT n+1, concat(s,s) FROM r WHERE n<%d), w AS (SELECT %s FROM r WHERE n=%d) ", steps, strings.Join(items, ", "), steps)
	if kind == "stars" {
		return w + "SELECT " + strings.Join(stars, ", ") + " FROM w"
	}
	return w + "SELECT count(*) FROM " + strings.Join(from, ", ")
}

// myJSONTable returns a statement reading r's value (as myWide) through a JSON_TABLE of n
// LONGTEXT columns, each holding it, all compared.
func myJSONTable(steps, n int) string {
	var cols, where []string
	for i := range n {
		cols = append(cols, fmt.Sprintf("c%d LONGTEXT PATH '$.a'", i))
		where = append(where, fmt.Sprintf("c%d <> ''", i))
	}
	return fmt.Sprintf(`WITH RECURSIVE r(n,s) AS (SELECT 1, CAST('a' AS CHAR(16000000)) UNION ALL SELECT n+1, concat(s,s) FROM r WHERE n<%d), d AS (SELECT concat('{"a":"', s, '"}') j FROM r WHERE n=%d) SELECT count(*) FROM d, JSON_TABLE(d.j, '$' COLUMNS(%s)) t WHERE %s`,
		steps, steps, strings.Join(cols, ", "), strings.Join(where, " AND "))
}

// myWide returns a statement over the recursive CTE r whose row n=steps holds a value of
// 2^(steps-1) bytes (concat(s, s) doubling it), reading it at n sites of kind: "lower" n calls
// of LOWER in the WHERE clause, "items" n select-list items naming it.
func myWide(steps, n int, kind string) string {
	w := fmt.Sprintf("WITH RECURSIVE r(n,s) AS (SELECT 1, CAST('a' AS CHAR(16000000)) UNION ALL SELECT n+1, concat(s,s) FROM r WHERE n<%d) ", steps)
	var sites []string
	for i := range n {
		if kind == "lower" {
			sites = append(sites, fmt.Sprintf("lower(s) <> '%d'", i))
		} else {
			sites = append(sites, "s")
		}
	}
	if kind == "lower" {
		return w + fmt.Sprintf("SELECT count(*) FROM r WHERE n=%d AND %s", steps, strings.Join(sites, " AND "))
	}
	return w + fmt.Sprintf("SELECT %s FROM r WHERE n=%d", strings.Join(sites, ", "), steps)
}

// TestMySQLValueSites: a statement with more than mysqlMaxValueSites calls and select-list
// items is refused. Each holds its value in a buffer of its own until the statement ends, one
// of up to max_allowed_packet, which MariaDB 10.11 neither counts against max_session_mem_used
// (34 MB counted under SET STATEMENT max_session_mem_used=200000000, which it passed) nor
// checks for a kill within a row: over an 8 MiB value built by a recursive CTE, 100 LOWER
// calls grew mariadbd's RSS by 836 MB within one row, 100 select-list items by 806 MB, and a
// statement of sandbox.MaxStatement bytes could hold 40,000 of them. Here the value is 8
// bytes (nothing large is built): 200 sites run unscreened and are refused through Exec; 100
// run through Exec.
func TestMySQLValueSites(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	db := dbs[0]
	// A CTE's items count in each copy of it (each reference), and each * or x.* as all the
	// statement's sites again: w.* ten times over a CTE of 10 items of 8 MiB grew mariadbd by
	// 1,000 MB, and count(*) over 10 references of it by 1,690 MB, each with a dozen sites
	// counted by items and calls alone. JSON_TABLE's columns hold one each: 100 LONGTEXT
	// columns of an 8 MiB string grew it by 812 MB.
	for _, c := range []struct{ name, over, under string }{
		{"200 lower", myWide(4, 200, "lower"), myWide(4, 100, "lower")},
		{"200 items", myWide(4, 200, "items"), myWide(4, 100, "items")},
		{"12 w.*", myWideCTE(4, 12, 12, "stars"), myWideCTE(4, 4, 4, "stars")},
		{"12 references", myWideCTE(4, 12, 12, "refs"), myWideCTE(4, 4, 4, "refs")},
		{"200 JSON_TABLE columns", myJSONTable(4, 200), myJSONTable(4, 100)},
	} {
		r, err := unscreened(context.Background(), db, c.over, 10*time.Second, 10)
		if err != nil || !r.OK() || len(r.Rows) != 1 {
			t.Errorf("%s unscreened as the reader: %+v, %v; want one row", c.name, r, err)
		}
		r = sandboxtest.MustExec(t, db, c.over, sandbox.ExecOptions{Timeout: 10 * time.Second})
		if r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, "calls and select-list items") {
			t.Errorf("%s: %s %q, want it refused naming the calls and select-list items", c.name, r.Outcome, r.Error)
		}
		if r := sandboxtest.MustExec(t, db, c.under, sandbox.ExecOptions{Timeout: 10 * time.Second}); !r.OK() || len(r.Rows) != 1 {
			t.Errorf("%s, fewer: %s %q, want one row", c.name, r.Outcome, r.Error)
		}
	}
	for q, want := range map[string]int{
		"select a, b from t where x in (1, 2) and exists (select 1)":      3,
		"select lower(a), `f` (b), count(*) over (partition by c) from t": 6,
		"with w as (select lower(a) x, b from t) select x from w, w v":    7,
		"select * from (select concat(a, b) from t) d":                    6,
	} {
		if got := mysqlValueSites(q); got != want {
			t.Errorf("mysqlValueSites(%q) = %d, want %d", q, got, want)
		}
	}
}
