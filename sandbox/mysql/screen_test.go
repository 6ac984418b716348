package mysql

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestMySQLScreenNamesNotText: the shared denied names and the role catalogs are looked up
// among the statement's names as MariaDB's lexer reads them (mysqlNames), not its raw words: a
// string ('…', "…", n'…', with escaped and doubled quotes), a comment (--, #, /* */, /*+ */, a
// -- comment past a carriage return) or a backquoted alias of several words that holds
// get_lock, processlist, load_file or applicable_roles runs as the task's reader. The same
// names as MariaDB reads them as code are refused, each shown to reach the server as the
// reader unscreened: backquoted, split from their ( or qualifier by comments and blanks, in
// upper case, after a string that ends where MariaDB ends it ('a\”, 'a”', "a\""), after a
// hexadecimal literal, inside an ODBC escape, in a subquery; and in executable comments
// (/*!50000 …*/, /*M!…*/), which are refused as such. The mysql schema is read so too: a string
// or comment holding mysql.user runs, mysql.user however qualified is refused.
func TestMySQLScreenNamesNotText(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	db := dbs[0]
	for _, q := range []string{
		"SELECT 'get_lock', \"is_free_lock('a')\", 'load_file', x FROM t -- processlist\nWHERE x <> 'outfile' /* performance_schema */",
		"SELECT x AS `the processlist` FROM t # get_lock('a', 0)\n",
		"SELECT x FROM t WHERE 'information_schema.processlist' <> 'it''s get_lock' AND \"a\\\"global_status\" <> n'sys_exec'",
		"SELECT x FROM t WHERE 'applicable_roles' <> 'enabled_roles' /*+ is_free_lock('a') */",
		"SELECT 1 AS a --\r, is_free_lock('a') AS b",
		"SELECT 'see mysql.com' AS a, x FROM t -- or mysql.user\n",
	} {
		if r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{}); !r.OK() {
			t.Errorf("%q did not run: %s %s", q, r.Outcome, r.Error)
		}
	}
	for q, name := range map[string]string{
		"SELECT `is_free_lock`('a')":                                                "is_free_lock is not allowed",
		"SELECT IS_FREE_LOCK/**/('a')":                                              "is_free_lock is not allowed",
		"SELECT is_free_lock -- c\n ('a')":                                          "is_free_lock is not allowed",
		"SELECT count(*) FROM information_schema./**/processlist":                   "processlist is not allowed",
		"SELECT count(*) FROM `information_schema` . `PROCESSLIST`":                 "processlist is not allowed",
		"SELECT x FROM t WHERE x IN (SELECT 1 FROM information_schema.processlist)": "processlist is not allowed",
		"SELECT 'a\\'', is_free_lock('a') -- '":                                     "is_free_lock is not allowed",
		"SELECT 'a''', is_free_lock('a') -- '":                                      "is_free_lock is not allowed",
		"SELECT \"a\\\"\", is_free_lock('a') -- \"":                                 "is_free_lock is not allowed",
		"SELECT x'41', is_free_lock('a')":                                           "is_free_lock is not allowed",
		"SELECT {fn is_free_lock('a')}":                                             "is_free_lock is not allowed",
		"SELECT count(*) FROM information_schema.`applicable_roles`":                "applicable_roles is not allowed",
		"SELECT /*!50000 is_free_lock('a') */":                                      "executable comments",
		"SELECT /*M!100000 is_free_lock('a') */":                                    "executable comments",
	} {
		reachedRefused(t, db, q, name)
	}
	// "…" is a string (the session's sql_mode has no ANSI_QUOTES): where a call or a table
	// would be, MariaDB answers a syntax error, screened or not.
	for _, q := range []string{`SELECT "is_free_lock"('a')`, `SELECT count(*) FROM information_schema."processlist"`, `SELECT user FROM "mysql"."user"`} {
		if r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{}); r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "1064") {
			t.Errorf("%q: %s %q, want MariaDB's syntax error", q, r.Outcome, r.Error)
		}
	}
	// The mysql schema, however qualified, is refused; the reader holds no privilege there either.
	for _, q := range []string{"SELECT count(*) FROM mysql.user", "SELECT count(*) FROM `mysql` . /* c */ `user`",
		"SELECT 1 FROM MySQL -- c\n.db", "SELECT 'a''', (SELECT count(*) FROM mysql#\n.`global_priv`) -- '"} {
		if r, err := unscreened(context.Background(), db, q, 2*time.Second, 10); err != nil || r.Outcome != sandbox.OutcomeError || !strings.Contains(r.Error, "denied") {
			t.Errorf("%q unscreened: %v %s %q, want the reader denied", q, err, r.Outcome, r.Error)
		}
		if _, why := sandbox.Screen(q, datasets.MySQL); !strings.Contains(why, "mysql schema") {
			t.Errorf("%q: screen says %q, want the mysql schema refused", q, why)
		}
	}
}

// TestMySQLScreenLexerAgrees checks the screen's reading of names against MariaDB's own, on the
// server: a harmless call, sha1('rvz'), and a read of the task database's table rv qualified
// by the database's name stand for a denied function and for the mysql schema. Every
// statement of a sweep (each byte 1 to 255 before, inside and after the name, the dot and the
// qualifier, in a comment, a string and a backquoted name) and of seeded random mixes of
// quotes, backslashes, comments (--, -- before tab or CR, #, /* */, /*/, unterminated),
// numbers glued to names (1e1, .5, 1., 0x1, 0b1), prefixes (N, X, B, _utf8mb4), \N, ODBC
// braces, @, $, UTF-8 and a stray lead byte, that MariaDB runs (unscreened, as the reader)
// with the call's value or the table's in its rows must be one whose names (mysqlNames) hold
// sha1, or that qualifies by the name (mysqlQualifies, mysqlSchemaNamed's reading): where the
// lexer read a string or comment that MariaDB runs as code, a denied name there would pass.
// And information_schema's names with a dotted capital İ, which MariaDB folds to i, are read
// by the reader and refused.
func TestMySQLScreenLexerAgrees(t *testing.T) {
	admin, _, _, dbs := myHostileSetup(t, 1, 0)
	db := dbs[0]
	schema := db.(*mysqlDB).database
	if _, err := admin.Exec("CREATE TABLE " + schema + ".rv (v INT)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("INSERT INTO " + schema + ".rv VALUES (31337)"); err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte("rvz"))
	called := hex.EncodeToString(sum[:])
	var calls, reads, bad int
	check := func(q string) {
		t.Helper()
		r, err := unscreened(context.Background(), db, q, 2*time.Second, 3)
		if err != nil || !r.OK() {
			return
		}
		rows := fmt.Sprint(r.Rows)
		if strings.Contains(rows, called) {
			calls++
			if !slices.Contains(mysqlNames(q), "sha1") {
				bad++
				t.Errorf("%q: MariaDB calls sha1, but the screen's names %q do not hold it", q, mysqlNames(q))
			}
		}
		if strings.Contains(rows, "31337") {
			reads++
			if !mysqlQualifies(q, schema) {
				bad++
				t.Errorf("%q: MariaDB reads %s.rv, but the screen reads no qualification by %s", q, schema, schema)
			}
		}
	}
	for b := 1; b < 256; b++ {
		c := string([]byte{byte(b)})
		for _, q := range []string{
			"SELECT " + c + "sha1('rvz')", "SELECT sha1" + c + "('rvz')", "SELECT 1" + c + "sha1('rvz')",
			"SELECT 1 --" + c + ", sha1('rvz')", "SELECT 1 #" + c + ", sha1('rvz')", "SELECT 1 /*" + c + "*/, sha1('rvz')",
			"SELECT 1 AS `" + c + "`, sha1('rvz')", "SELECT '" + c + "'', sha1('rvz') -- '", "SELECT \"" + c + "\"\", sha1('rvz') -- \"",
			"SELECT '" + c + "', sha1('rvz') -- '", "SELECT \"" + c + "\", sha1('rvz') -- \"",
			"SELECT v FROM " + schema + c + ".rv", "SELECT v FROM " + schema + "." + c + "rv", "SELECT v FROM " + c + schema + ".rv",
		} {
			check(q)
		}
	}
	frags := []string{"'", "\"", "`", "\\", "''", "\\'", "--", "-- ", "--\t", "--\r", "#", "\n", "\r", "/*", "*/", "/*/", "/**/",
		"1", "1e1", "1.", ".5", ".", "x", "N", "X", "B", "_utf8mb4", "\\N", ",", "(", ")", "{fn ", "{d ", "}", " ", "a", "0x", "0x1",
		"0b1", "@", "$", "é", "\xc3", "\u00a0", "AS ", "t", "`a``b`", "'a''b'", "\"a\"\"b\"", "'\\\\'", "\\\"", "-", "+", "*",
		"/", "!", ";", "=", "e", "E", "1e", "\f", "\v", "\x7f", "OR ", "IS ", "NULL"}
	payloads := []string{"sha1('rvz')", "SHA1 ('rvz')", "`sha1`('rvz')", "sha1/**/('rvz')", "sha1\n('rvz')",
		"(SELECT v FROM DB.rv)", "(SELECT v FROM DB . rv)", "(SELECT v FROM `DB`.`rv`)", "(SELECT v FROM DB/**/.rv)",
		"(SELECT v FROM DB -- c\n.rv)", "(SELECT v FROM DB#c\n.rv)"}
	rng := rand.New(rand.NewPCG(1, 2))
	some := func(b *strings.Builder, n int) {
		for range rng.IntN(n) {
			b.WriteString(frags[rng.IntN(len(frags))])
		}
	}
	for range 3000 {
		var b strings.Builder
		b.WriteString("SELECT ")
		some(&b, 4)
		if rng.IntN(2) == 0 {
			b.WriteString("1,")
		}
		some(&b, 3)
		b.WriteString(strings.ReplaceAll(payloads[rng.IntN(len(payloads))], "DB", schema))
		some(&b, 4)
		check(b.String())
		if bad > 20 {
			t.Fatal("too many disagreements")
		}
	}
	// MariaDB folds an information_schema table's name by its own lower case, in which the
	// dotted capital İ is i (and the Kelvin sign k), as Go's strings.ToLower, which mysqlNames
	// reads by, does: the reader reads PROCESSLIST by either spelling, and both are refused.
	for q, name := range map[string]string{
		"SELECT count(*) FROM information_schema.processlİst":         "processlist is not allowed",
		"SELECT count(*) FROM information_schema.`PROCESSLİST`":       "processlist is not allowed",
		"SELECT count(*) FROM information_schema.applİcable_roles":    "applicable_roles is not allowed",
		"SELECT count(*) FROM information_schema.GLOBAL_VARİABLES":    "global_variables is not allowed",
		"SELECT count(*) FROM information_schema.`sessİon_variables`": "session_variables is not allowed",
	} {
		reachedRefused(t, db, q, name)
	}
	// Enough statements ran the call and the read for the checks to have been made.
	if calls < 300 || reads < 50 {
		t.Errorf("MariaDB called sha1 in %d statements and read rv in %d; want at least 300 and 50", calls, reads)
	}
	t.Logf("MariaDB called sha1 in %d statements, read %s.rv in %d", calls, schema, reads)
}

// reachedRefused checks that q runs as db's reader unscreened, and that the screen refuses it
// with a reason holding name.
func reachedRefused(t *testing.T, db sandbox.DB, q, name string) {
	t.Helper()
	if r, err := unscreened(context.Background(), db, q, 2*time.Second, 10); err != nil || !r.OK() {
		t.Errorf("%q unscreened: %v %s %s, want it run by the reader", q, err, r.Outcome, r.Error)
	}
	if _, why := sandbox.Screen(q, datasets.MySQL); !strings.Contains(why, name) {
		t.Errorf("%q: screen says %q, want it refused naming %q", q, why, name)
	}
}
