package postgres

import (
	"testing"

	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestPostgresScreenHiddenStatement: a second statement hidden from a split that reads quotes
// and comments otherwise than PostgreSQL (a -- comment ended by a carriage return, an E'…' string
// holding an escaped quote, alone or continuing another) is refused by the screen as a second
// statement (pgSplit), not sent for the server's "cannot insert multiple commands" error;
// unscreened, the server runs neither. A ; inside a string, dollar quote, quoted name or
// comment is one statement and runs.
func TestPostgresScreenHiddenStatement(t *testing.T) {
	_, _, dbs := pgHostileConnector(t, pgHostileSchemas(t, sandboxtest.PGAdmin(t), 1))
	sandboxtest.HiddenStatements(t, dbs[0], unscreened, []string{
		"SELECT 1 AS first --\r; SELECT 2 AS second",
		"SELECT E'\\'' AS first; SELECT 2 AS second",
		"SELECT E'\\'' AS first; SELECT 2 AS second --'",
		"SELECT e'a\\'' AS first; SELECT 2 AS second",
		"SELECT E'a'\n'\\'' AS first; SELECT 2 AS second",
	}, map[string]any{
		"SELECT E'\\';' AS first":               "';",
		"SELECT $$;$$ AS first;":                ";",
		`SELECT 'a' AS "x;y" -- ;` + "\n":       "a",
		"SELECT /* ; /* ; */ ; */ 'b' AS first": "b",
	})
}
