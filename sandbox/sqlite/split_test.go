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
//
// A statement followed after its ; by whitespace and comments only, as SQLite reads them
// (sqliteSkip: -- to a line feed, /* to */ or, left open, to the end), runs as that statement, a ;
// inside the comment too (unscreened, the engine prepares the whole text once and runs its first
// statement). Text after the ; that SQLite reads as more (a line after a -- comment, a parameter
// #x, an extra */, a vertical tab) is refused as a second statement; an executable comment after
// the ; is refused as it is within a statement. A bare ; after the ; is refused as a second
// statement (EmptyNowhere), SELECT 1;; too: SQLite itself reads it as an empty statement, but
// Python's sqlite3, which the judge follows on SQLite (BIRD's and Spider's own evaluation), fails
// it ("You can only execute one statement at a time"), and a step that answered rows where the
// judge scores an error would tell the model a statement ran that scored as not running.
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
		"SELECT 1 AS first; --\nSELECT 2 AS second",
		"SELECT 1 AS first; /* x */ SELECT 2 AS second",
		"SELECT 1 AS first; # x",
		"SELECT 1 AS first; /* /* x */ */",
		"SELECT 1 AS first; \v-- x",
	}, map[string]any{
		"SELECT 1 AS first --\r; SELECT 2 AS second": int64(1),
		"SELECT 1 AS [;]":           int64(1),
		"SELECT 1 AS first /* ; */": int64(1),
		"SELECT 1 AS 'a\\';":        int64(1),
	})
	sandboxtest.TrailingComments(t, db, unscreened, map[string]any{
		"SELECT 1 AS first; -- x":                   int64(1),
		"SELECT 1 AS first;-- x\n":                  int64(1),
		"SELECT 1 AS first; --x":                    int64(1),
		"SELECT 1 AS first; /* x */":                int64(1),
		"SELECT 1 AS first; /* x":                   int64(1),
		"SELECT 1 AS first; /*/":                    int64(1),
		"SELECT 1 AS first; -- a; SELECT 2":         int64(1),
		"SELECT 1 AS first; -- x\rSELECT 2":         int64(1),
		"SELECT 1 AS first; /* ; SELECT 2 */":       int64(1),
		"SELECT 1 AS first; /* /* x */ -- y\n\t\f":  int64(1),
		"SELECT 1 AS first; /* x */ /* ; SELECT 2 ": int64(1),
	}, map[string]string{
		"SELECT 1 AS first;;SELECT 2":         "one statement",
		"SELECT 1 AS first; ; SELECT 2":       "one statement",
		"SELECT 1 AS first;;/* x */ SELECT 2": "one statement",
		"SELECT 1 AS first; ; \v":             "one statement",
		"SELECT 1 AS first;;":                 "one statement",
		"SELECT 1 AS first; ; -- x":           "one statement",
		"SELECT 1 AS first;/* x */;\n;; /* y": "one statement",
		"SELECT 1 AS first; /*! SELECT 2 */":  "executable comments",
		"SELECT 1 AS first; /*M! SELECT 2 */": "executable comments",
	})
	sandboxtest.TrimmedAsEngine(t, db, unscreened, sandboxtest.NoBreakSpaces)
}
