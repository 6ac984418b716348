package sqlite

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
	"github.com/chainedsql/chainedsql/sandbox/internal/sandboxtest"
)

// TestSQLiteScreenNamesNotText: SQLite's refused built-ins (json_patch, jsonb_patch, unhex) and
// the denied names of every dialect are looked for outside string constants and comments, as
// SQLite's tokenizer reads them, and as a string's whole value (SQLite reads FROM
// 'pragma_database_list' as the table-valued function): a string or comment holding them among
// other text runs; the same names called,
// quoted ("…", `…`, […]), or after a doubled quote, a blob, a comment or a bracketed name
// holding a quote, are refused.
func TestSQLiteScreenNamesNotText(t *testing.T) {
	db := openChinookSQLite(t)
	for _, q := range []string{
		"SELECT Name FROM Track WHERE Name <> 'json_patch of unhex' -- load_extension('x')",
		"SELECT count(*) FROM Track /* readfile('/etc/passwd') */ WHERE Composer <> 'it''s writefile'",
		"SELECT Name AS note FROM Artist WHERE Name = 'no pragma_database_list' OR Name = 'JSONB_PATCH of x'",
	} {
		if r := sandboxtest.MustExec(t, db, q, sandbox.ExecOptions{}); !r.OK() {
			t.Errorf("%s\n  did not run: %s %s", q, r.Outcome, r.Error)
		}
	}
	for q, want := range map[string]string{
		`SELECT "json_patch"('{}', '{}')`:           "json_patch is not allowed",
		"SELECT [unhex]('41')":                      "unhex is not allowed",
		"SELECT `jsonb_patch`('{}', '{}')":          "jsonb_patch is not allowed",
		"SELECT 'a''b', json_patch('{}', '{}')":     "json_patch is not allowed",
		"SELECT '-- x', load_extension('x')":        "load_extension is not allowed",
		"SELECT 1 /* c */, readfile('x')":           "readfile is not allowed",
		"SELECT x'00', unhex('41')":                 "unhex is not allowed",
		`SELECT "a""b", unhex('41')`:                "unhex is not allowed",
		"SELECT [a'b], unhex('41')":                 "unhex is not allowed",
		`SELECT "x -- ", unhex('41')`:               "unhex is not allowed",
		"SELECT `a'`, JSON_PATCH('{}', '{}')":       "json_patch is not allowed",
		"SELECT * FROM pragma_database_list":        "pragma_database_list is not allowed",
		"SELECT 1 -- c\n, json_patch('{}', '{}')":   "json_patch is not allowed",
		"SELECT /* ' */ json_patch('{}', '{}')":     "json_patch is not allowed",
		"SELECT * FROM 'pragma_database_list'":      "pragma_database_list is not allowed",
		"SELECT * FROM main.'PRAGMA_DATABASE_LIST'": "pragma_database_list is not allowed",
		"SELECT * FROM 'pragma_database_list'()":    "pragma_database_list is not allowed",
		`SELECT "json_patch"`:                       "json_patch is not allowed",
	} {
		if _, why := sandbox.Screen(q, datasets.SQLite); !strings.Contains(why, want) {
			t.Errorf("%s\n  refused with %q\n  want it to say %q", q, why, want)
		}
	}
}

// TestSQLiteScreenParameterName: SQLite's tokenizer takes a parameter's (…) suffix (Tcl's array
// syntax: $a(x), also after @, : and #) to the first ) or whitespace, a quote included, so a
// quote there opens no string and what follows is code: go-sqlite3, given the parameter, calls
// unhex in each statement below. The screen reads the parameter as SQLite does and refuses
// them; a $ inside a name, and a parameter without (…), start no such name.
func TestSQLiteScreenParameterName(t *testing.T) {
	plain, err := sql.Open("sqlite3", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	for _, q := range []string{
		"SELECT $a('),unhex('41'),'x'", "SELECT coalesce(@a('),'k'),unhex('41'),'x'",
		"SELECT :a::b('),unhex('41'),'x'", "SELECT #a('),unhex('41'),'x'",
	} {
		var p, got, x string
		if err := plain.QueryRow(q, 1).Scan(&p, &got, &x); err != nil || got != "A" {
			t.Errorf("%s on SQLite: %q %v, want unhex's A", q, got, err)
		}
		if _, why := sandbox.Screen(q, datasets.SQLite); !strings.Contains(why, "unhex is not allowed") {
			t.Errorf("%s passed the screen (%q); SQLite calls unhex in it", q, why)
		}
	}
	for _, q := range []string{"SELECT x$a('unhex of x') FROM t", "SELECT $a, 'unhex (x)' FROM t", "SELECT @a ('unhex of x')"} {
		if _, why := sandbox.Screen(q, datasets.SQLite); why != "" {
			t.Errorf("%s refused: %s", q, why)
		}
	}
}
