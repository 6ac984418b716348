package mysql

import (
	"testing"

	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestMySQLScreenHiddenStatement: a second statement hidden from a split that reads quotes and
// comments otherwise than MariaDB (a backslash-escaped quote, 1--1 read as a comment) is refused
// by the screen as a second statement (mysqlSplit), not sent for the server's syntax error;
// unscreened, the server (no multiStatements) runs neither. A ; inside a string, quoted name or
// comment is one statement and runs.
func TestMySQLScreenHiddenStatement(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	sandboxtest.HiddenStatements(t, dbs[0], unscreened, []string{
		"SELECT '\\'' AS first; SELECT 2 AS second",
		"SELECT \"\\\"\" AS first; SELECT 2 AS second",
		"SELECT 'a\\'' AS first; SELECT 2 AS second -- '",
		"SELECT 1--1 AS first; SELECT 2 AS second",
		"SELECT 1 AS first --\r\n; SELECT 2 AS second",
	}, map[string]any{
		"SELECT '\\';' AS first":           "';",
		"SELECT 'a' AS `x;y` # ;":          "a",
		"SELECT /* ; */ 'b' AS first -- ;": "b",
	})
}
