package sqlite

import (
	"testing"

	"github.com/chainedsql/chainedsql/internal/shared"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestSQLiteScreenHiddenStatement: go-sqlite3 prepares the first statement and drops the rest
// unrun, so the screen alone refuses a second statement; it splits as SQLite's tokenizer does
// (sqliteSplit): a ; after a parameter's (…) suffix that holds a quote ends the statement, and
// a -- comment ends at a line feed only (a carriage return leaves it open: one statement).
func TestSQLiteScreenHiddenStatement(t *testing.T) {
	db, err := Open(shared.Path(t, "data/multi/chinook/Chinook_Sqlite.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	sandboxtest.HiddenStatements(t, db, nil, []string{
		"SELECT 1 AS first; SELECT 2 AS second",
		"SELECT $a(') AS first; SELECT 2 AS second --'",
		"SELECT @a(') AS first; SELECT 2 AS second --'",
	}, map[string]any{
		"SELECT 1 AS first --\r; SELECT 2 AS second": int64(1),
		"SELECT 1 AS [;]":           int64(1),
		"SELECT 1 AS first /* ; */": int64(1),
		"SELECT 1 AS 'a\\';":        int64(1),
	})
}
