package mysql

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestMySQLScreenHiddenStatement: a second statement hidden from a split that reads quotes and
// comments otherwise than MariaDB (a backslash-escaped quote, 1--1 read as a comment) is refused
// by the screen as a second statement (mysqlSplit), not sent for the server's syntax error;
// unscreened, the server (no multiStatements) runs neither. A ; inside a string, quoted name or
// comment is one statement and runs.
//
// A statement followed after its ; by whitespace and comments only, as MariaDB reads them
// (mysqlSkip: #, -- before a space or a control character, /* */ unnested), runs as that
// statement, a ; inside the comment too; the server runs the whole text as one statement as well.
// Text after the ; that MariaDB reads as more (--x, a line after a comment, an executable comment,
// a /* left open, a nested */) is refused as a second statement, and unscreened the server (no
// multiStatements) runs none of it. MariaDB strips the run of ; and whitespace that ends the text
// before it parses it (EmptyTrailing): SELECT 1; ; runs, unscreened too, but a ; before a comment
// or more text (SELECT 1; ; -- x, SELECT 1;;SELECT 2: syntax errors there) is refused.
func TestMySQLScreenHiddenStatement(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	sandboxtest.HiddenStatements(t, dbs[0], unscreened, []string{
		"SELECT '\\'' AS first; SELECT 2 AS second",
		"SELECT \"\\\"\" AS first; SELECT 2 AS second",
		"SELECT 'a\\'' AS first; SELECT 2 AS second -- '",
		"SELECT 1--1 AS first; SELECT 2 AS second",
		"SELECT 1 AS first --\r\n; SELECT 2 AS second",
		"SELECT 1 AS first; --x",
		"SELECT 1 AS first; --\nSELECT 2 AS second",
		"SELECT 1 AS first; # x\nSELECT 2 AS second",
		"SELECT 1 AS first; /* x */ SELECT 2 AS second",
		"SELECT 1 AS first; /*! SELECT 2 */",
		"SELECT 1 AS first; /*!50000 SELECT 2 */",
		"SELECT 1 AS first; /*M! SELECT 2 */",
		"SELECT 1 AS first; /* x",
		"SELECT 1 AS first; /* /* x */ */",
	}, map[string]any{
		"SELECT '\\';' AS first":           "';",
		"SELECT 'a' AS `x;y` # ;":          "a",
		"SELECT /* ; */ 'b' AS first -- ;": "b",
	})
	sandboxtest.TrailingComments(t, dbs[0], unscreened, map[string]any{
		"SELECT 'a' AS first; -- x":                  "a",
		"SELECT 'a' AS first;-- x\n":                 "a",
		"SELECT 'a' AS first; --":                    "a",
		"SELECT 'a' AS first; --\tx":                 "a",
		"SELECT 'a' AS first; # x":                   "a",
		"SELECT 'a' AS first; /* x */":               "a",
		"SELECT 'a' AS first; -- a; SELECT 2":        "a",
		"SELECT 'a' AS first; # a; SELECT 2":         "a",
		"SELECT 'a' AS first; /* ; SELECT 2 */":      "a",
		"SELECT 'a' AS first; -- x\rSELECT 2 AS b":   "a",
		"SELECT 'a' AS first; /* /* x */ # y\n":      "a",
		"SELECT 'a' AS first; -- x\n/* y */\v\f # z": "a",
		"SELECT 'a' AS first;;":                      "a",
		"SELECT 'a' AS first; ;":                     "a",
		"SELECT 'a' AS first;\n;\v;":                 "a",
		"SELECT 'a' AS first;/* x */;":               "a",
		"SELECT 'a' AS first; # x\n; ;":              "a",
	}, map[string]string{
		"SELECT 'a' AS first;;SELECT 2":   "one statement",
		"SELECT 'a' AS first; ; SELECT 2": "one statement",
		"SELECT 'a' AS first; ; -- x":     "one statement",
		"SELECT 'a' AS first;; # x":       "one statement",
		"SELECT 'a' AS first;; /* x */":   "one statement",
	})
	sandboxtest.TrimmedAsEngine(t, dbs[0], unscreened, sandboxtest.NoBreakSpaces)
}

// TestMySQLScreenLeadingComments: the statement's first word is read after the comments as
// MariaDB reads them (mysqlSkip): a # comment before a SELECT is a comment, and --x is no
// comment, so --x then a SELECT on the next line is refused as not a read (unscreened, a syntax
// error).
func TestMySQLScreenLeadingComments(t *testing.T) {
	_, _, _, dbs := myHostileSetup(t, 1, 0)
	sandboxtest.LeadingComments(t, dbs[0], unscreened, map[string]any{
		"# x\nSELECT 'a' AS first":                 "a",
		"/* x */ # y\n-- z\n\tSELECT 'a' AS first": "a",
	}, nil)
	if _, reason := sandbox.Screen("--x\nSELECT 1", datasets.MySQL); !strings.Contains(reason, "only read-only") {
		t.Errorf("--x then a SELECT: %q, want refused as not a read", reason)
	}
}
