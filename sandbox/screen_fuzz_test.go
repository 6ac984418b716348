package sandbox_test

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// FuzzScreen: screen never panics in any dialect, and what it accepts is one read statement
// with no denied word, which screening again accepts unchanged.
func FuzzScreen(f *testing.F) {
	for _, q := range hostileQueries {
		f.Add(q)
	}
	for _, q := range sandboxtest.ChinookQueries {
		f.Add(q.SQL)
	}
	f.Add("SELECT 'a;b' -- c;\n")
	f.Add("/* x; */ WITH a AS (SELECT 1) SELECT * FROM a;")
	f.Add(`SELECT "x""y", [a;b], ` + "`c;d`" + ` FROM t`)
	// Second statements that a split reading quotes and comments otherwise than the engine
	// misses (ScreenRules.Split), and a ; that only such a split reads as one.
	f.Add("SELECT 1 --\r; SELECT 2")
	f.Add(`SELECT E'\''; SELECT 2`)
	f.Add(`SELECT '\''; SELECT 2 -- '`)
	f.Add("SELECT 1--1; SELECT 2")
	f.Add(`SELECT $a('); SELECT 2 --'`)
	f.Add(`SELECT '\';'`)
	// Text after the ; that is only comments in one engine and a second statement in another
	// (ScreenRules.Skip).
	for _, q := range []string{"SELECT 1; -- x", "SELECT 1; --x", "SELECT 1; --\nSELECT 2", "SELECT 1; # x\nSELECT 2",
		"SELECT 1; /*! SELECT 2 */", "SELECT 1; /* /* */ */", "SELECT 1; /* x", "SELECT 1; -- x\rSELECT 2"} {
		f.Add(q)
	}
	// Comments before the first word that one engine ends elsewhere than another (a
	// statement that is not a read behind what reads as a SELECT).
	for _, q := range []string{"/* /* */ SELECT 1 */ SET x = 1", "-- x\rSET x = 1 /*\nSELECT 1 */", "# x\nSELECT 1", "--x\nSELECT 1",
		"\u00a0SELECT 1", "SELECT 1 ORDER BY x\u00a0;", "SELECT 1;\u00a0"} {
		f.Add(q)
	}
	// PostgreSQL's lexing as the screen's token rules follow it, and what they refuse.
	for _, q := range []string{
		`SELECT E'\'' [1], $a$ [ $a$, /* /* [ */ */ x FROM t`, "SELECT 'a'\n'b' LIKE '%a%'", `SELECT U&"_int4" '{1}'`,
		"SELECT strpos(repeat('a', 1000000), 'b' || repeat('a', 10000))", "SELECT x FROM t WHERE y LIKE '_:%:__.___' ESCAPE '!'",
		"SELECT trim(both 'ab' from x), position('a' IN x), translate(x, 'ab', '') FROM t",
		"SELECT a @> b, j ?| '{a}', ('{1}')::int[1] && ('{2}')::int[1], '{1}'::_inet, setseed(0.5)",
		"SELECT * FROM jsonb_to_record('{}') AS r(a _int4, b polygon), CAST(x AS path)",
	} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, q string) {
		for _, d := range []datasets.Dialect{datasets.SQLite, datasets.Postgres, datasets.MySQL} {
			screenOnce(t, q, d)
		}
	})
}

// screenOnce checks one screening of q in dialect d.
func screenOnce(t *testing.T, q string, d datasets.Dialect) {
	stmt, reason := sandbox.Screen(q, d)
	if reason != "" {
		if stmt != "" || !strings.HasPrefix(reason, "refused: ") {
			t.Fatalf("%s: refusal %q with statement %q", d, reason, stmt)
		}
		return
	}
	if _, rest := sandbox.SplitFor(d)(stmt); strings.TrimSpace(rest) != "" {
		t.Fatalf("%s: accepted %q holds a second statement %q", d, stmt, rest)
	}
	if why := sandbox.DeniedText(stmt, d); why != "" {
		t.Fatalf("%s: accepted %q: %s", d, stmt, why)
	}
	if again, r := sandbox.Screen(stmt, d); r != "" || again != stmt {
		t.Fatalf("%s: screen(%q) = %q, %q; want it unchanged", d, stmt, again, r)
	}
}

// hostileQueries is sandboxtest.HostileFor with a fixed tag, for fuzz seeds.
var hostileQueries = sandboxtest.HostileFor("seed")
