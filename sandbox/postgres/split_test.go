package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestPostgresScreenHiddenStatement: a second statement hidden from a split that reads quotes
// and comments otherwise than PostgreSQL (a -- comment ended by a carriage return, an E'…' string
// holding an escaped quote, alone or continuing another) is refused by the screen as a second
// statement (pgSplit), not sent for the server's "cannot insert multiple commands" error;
// unscreened, the server runs neither. A ; inside a string, dollar quote, quoted name or
// comment is one statement and runs.
//
// A statement followed after its ; by whitespace and comments only, as PostgreSQL reads them
// (pgSkip: -- to a line feed or carriage return, /* */ nested), runs as that statement, a ; inside
// the comment too; the server runs the whole text as one statement as well. Text after the ; that
// the server reads as more (a line the -- comment's line feed or carriage return leaves, # and a
// second statement, a /* left open, an extra */) is refused as a second statement, and unscreened
// the server runs none of it. An executable comment after the ; is refused as it is within a
// statement. A bare ; among the whitespace and comments after the ; is an empty statement the
// grammar drops (EmptyAnywhere: SELECT 1; ; -- x runs, unscreened too); one before more text,
// SELECT 1;;SELECT 2, is refused as a second statement.
func TestPostgresScreenHiddenStatement(t *testing.T) {
	_, _, dbs := pgHostileConnector(t, pgHostileSchemas(t, sandboxtest.PGAdmin(t), 1))
	sandboxtest.HiddenStatements(t, dbs[0], unscreened, []string{
		"SELECT 1 AS first --\r; SELECT 2 AS second",
		"SELECT E'\\'' AS first; SELECT 2 AS second",
		"SELECT E'\\'' AS first; SELECT 2 AS second --'",
		"SELECT e'a\\'' AS first; SELECT 2 AS second",
		"SELECT E'a'\n'\\'' AS first; SELECT 2 AS second",
		"SELECT 1 AS first; --\nSELECT 2 AS second",
		"SELECT 1 AS first; -- x\rSELECT 2 AS second",
		"SELECT 1 AS first; /* x */ SELECT 2 AS second",
		"SELECT 1 AS first; # x\nSELECT 2 AS second",
		"SELECT 1 AS first; # x",
		"SELECT 1 AS first; /* x",
		"SELECT 1 AS first; /* /* x */",
		"SELECT 1 AS first; /* x */ */",
		"SELECT 1 AS first; \v-- x",
	}, map[string]any{
		"SELECT E'\\';' AS first":               "';",
		"SELECT $$;$$ AS first;":                ";",
		`SELECT 'a' AS "x;y" -- ;` + "\n":       "a",
		"SELECT /* ; /* ; */ ; */ 'b' AS first": "b",
	})
	sandboxtest.TrailingComments(t, dbs[0], unscreened, map[string]any{
		"SELECT 'a' AS first; -- x":                   "a",
		"SELECT 'a' AS first;-- x\n":                  "a",
		"SELECT 'a' AS first; --":                     "a",
		"SELECT 'a' AS first; --x":                    "a",
		"SELECT 'a' AS first; /* x */":                "a",
		"SELECT 'a' AS first; -- a; SELECT 2":         "a",
		"SELECT 'a' AS first; /* ; SELECT 2 */":       "a",
		"SELECT 'a' AS first; /* /* ; */ x */ -- y\n": "a",
		"SELECT 'a' AS first; -- x\r/* y */\n\t\f":    "a",
		"SELECT 'a' AS first;;":                       "a",
		"SELECT 'a' AS first; ;":                      "a",
		"SELECT 'a' AS first; ; -- x":                 "a",
		"SELECT 'a' AS first;/* x */;\n;;":            "a",
		"SELECT 'a' AS first; -- x\r; /* ; */ ;":      "a",
	}, map[string]string{
		"SELECT 'a' AS first;;SELECT 2":         "one statement",
		"SELECT 'a' AS first; ; SELECT 2":       "one statement",
		"SELECT 'a' AS first;;/* x */ SELECT 2": "one statement",
		"SELECT 'a' AS first; ; # x":            "one statement",
		"SELECT 'a' AS first; /*! SELECT 2 */":  "executable comments",
		"SELECT 'a' AS first; /*M! SELECT 2 */": "executable comments",
	})
	sandboxtest.TrimmedAsEngine(t, dbs[0], unscreened, sandboxtest.NoBreakSpaces)
}

// TestPostgresScreenLeadingComments: the statement's first word is read after the comments as
// PostgreSQL reads them (pgSkip): /* */ nest and -- ends at a carriage return too. A SHOW, SET or
// DO that a reading with unnested comments (or -- ended by a line feed only) takes for a SELECT
// is refused as not a read (the server runs each of them in the reader's read-only transaction:
// DO runs PL/pgSQL whose dynamic SQL the screen never sees, a PREPARE outlives the rollback); a
// SELECT behind such comments runs.
func TestPostgresScreenLeadingComments(t *testing.T) {
	_, _, dbs := pgHostileConnector(t, pgHostileSchemas(t, sandboxtest.PGAdmin(t), 1))
	sandboxtest.LeadingComments(t, dbs[0], unscreened, map[string]any{
		"/* /* */ x */ SELECT 'a' AS first":        "a",
		"-- x\rSELECT 'a' AS first":                "a",
		"/* x */ -- y\r\f/* /* */ */ VALUES ('a')": "a",
	}, []string{
		"/* /* */ SELECT 1 */ SHOW search_path",
		"/* /* */ SELECT 1 */ SET statement_timeout = 0",
		"/* /* */ SELECT 1 */ DO $$BEGIN PERFORM 1; END$$",
		"-- x\rSET statement_timeout = 0 /*\nSELECT 1 */",
		"-- x\rPREPARE p AS\nSELECT 1",
	})
}

// TestPostgresScreenCreatesTable: a CREATE TABLE AS, CREATE MATERIALIZED VIEW or SELECT … INTO
// under EXPLAIN ANALYZE, which the read-only transaction lets through (unscreened, each runs as
// the reader, and writes a temporary table that temp_file_limit does not bound), is refused by the screen (pgCreatesTable); INTO and CREATE as column labels after AS run.
func TestPostgresScreenCreatesTable(t *testing.T) {
	_, _, dbs := pgHostileConnector(t, pgHostileSchemas(t, sandboxtest.PGAdmin(t), 1))
	ctx := context.Background()
	for _, q := range []string{
		"EXPLAIN ANALYZE CREATE TEMP TABLE rv3 AS SELECT 1 AS a",
		"EXPLAIN (ANALYZE) SELECT 1 AS a INTO TEMP rv3",
		"EXPLAIN ANALYZE WITH x AS (SELECT 1 AS a) SELECT a INTO TEMPORARY rv3 FROM x",
		"/* x */ EXPLAIN ANALYZE\tcreate temp table rv3 AS SELECT 1 AS a",
	} {
		r, err := dbs[0].Exec(ctx, q, sandbox.ExecOptions{Timeout: 2 * time.Second})
		if err != nil || r.Outcome != sandbox.OutcomeRefused || !strings.Contains(r.Error, "creates a table") {
			t.Errorf("%q: %v %s %q, want refused as creating a table", q, err, r.Outcome, r.Error)
		}
		// Unscreened, the read-only transaction does not stop it: the table is made (a CREATE
		// or SELECT INTO of its own fails there with "cannot execute … in a read-only transaction").
		if r, err := unscreened(ctx, dbs[0], q, 2*time.Second, 10); err != nil || !r.OK() {
			t.Errorf("%q unscreened: %v %s %q, want the server to run it", q, err, r.Outcome, r.Error)
		}
	}
	sandboxtest.HiddenStatements(t, dbs[0], nil, nil, map[string]any{
		"SELECT 'a' AS into":   "a",
		"SELECT 'a' AS create": "a",
	})
}
