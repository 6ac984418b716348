package mysql

import (
	"context"
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
		if r, err := unscreened(context.Background(), db, q, 2*time.Second, 10); err != nil || !r.OK() {
			t.Errorf("%q unscreened: %v %s %s, want it run by the reader", q, err, r.Outcome, r.Error)
		}
		if _, why := sandbox.Screen(q, datasets.MySQL); !strings.Contains(why, name) {
			t.Errorf("%q: screen says %q, want it refused naming %q", q, why, name)
		}
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
