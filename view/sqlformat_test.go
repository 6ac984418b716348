package view

import (
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFormatSQL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"select a, b from t where x = 1 order by a limit 5",
			"select a, b\nfrom t\nwhere x = 1\norder by a\nlimit 5"},
		{"SELECT COUNT(*) FROM singer AS T1 JOIN concert AS T2 ON T1.id = T2.singer_id LEFT OUTER JOIN x USING (id) GROUP BY T1.name HAVING count(*) > 1",
			"SELECT COUNT(*)\nFROM singer AS T1\nJOIN concert AS T2 ON T1.id = T2.singer_id\nLEFT OUTER JOIN x USING (id)\nGROUP BY T1.name\nHAVING count(*) > 1"},
		{"SELECT name FROM t WHERE id IN (SELECT id FROM u WHERE v > (SELECT avg(v) FROM u)) AND x = 'a  from  b'",
			"SELECT name\nFROM t\nWHERE id IN (\n  SELECT id\n  FROM u\n  WHERE v > (\n    SELECT avg(v)\n    FROM u\n  )\n) AND x = 'a  from  b'"},
		{"WITH c AS (SELECT 1 AS n) SELECT n FROM c UNION ALL SELECT 2",
			"WITH c AS (\n  SELECT 1 AS n\n)\nSELECT n\nFROM c\nUNION ALL\nSELECT 2"},
		// Not clauses: FROM inside EXTRACT, ORDER BY inside OVER, LEFT(), a column named from.
		{"SELECT EXTRACT(YEAR FROM d), row_number() OVER (PARTITION BY a ORDER BY b), LEFT(s, 2), t.from FROM t",
			"SELECT EXTRACT(YEAR FROM d), row_number() OVER (PARTITION BY a ORDER BY b), LEFT(s, 2), t.from\nFROM t"},
		// Comments and quoted names stay; a line comment still ends its line.
		{"SELECT a -- the from part\n  FROM \"select  from\" /* where */ WHERE `x  y` = [a  b]",
			"SELECT a -- the from part\nFROM \"select  from\" /* where */\nWHERE `x  y` = [a  b]"},
		{"select 'it''s  -- no', $q$ from  x $q$, 'a\\' from b' from t", "select 'it''s  -- no', $q$ from  x $q$, 'a\\' from b'\nfrom t"},
		{"  SELECT\n\n1  ", "SELECT 1"},
		// Only the white space engines read as such: a no-break or ideographic space is part of
		// a name to SQLite, PostgreSQL and MySQL (SELECT\u00a04 fails), so it stays as written.
		{"SELECT\u00a04 FROM\u3000t WHERE\u2028x\u0085=  1", "SELECT\u00a04\nFROM\u3000t\nWHERE\u2028x\u0085= 1"},
		{"SELECT\v1\f\rFROM\tt", "SELECT 1\nFROM t"},
		{"", ""},
	} {
		got := formatSQL(c.in)
		if got != c.want {
			t.Errorf("formatSQL(%q):\n%s\nwant:\n%s", c.in, got, c.want)
		}
		checkFormatted(t, c.in, got)
	}
}

// checkFormatted checks what formatSQL promises of out, the formatting of in: the same tokens
// other than white space, in the same order (so every literal, quoted name and comment byte
// for byte, and no line comment swallowing what followed it), the same text once all white
// space is removed, and formatting out again gives out.
func checkFormatted(t *testing.T, in, out string) {
	t.Helper()
	sig := func(s string) []sqlToken {
		return slices.DeleteFunc(sqlTokens(s), func(t sqlToken) bool { return t.kind == tokSpace })
	}
	if a, b := sig(in), sig(out); !slices.Equal(a, b) {
		t.Fatalf("formatSQL(%q) = %q: tokens differ:\n%q\n%q", in, out, a, b)
	}
	strip := func(s string) string {
		return strings.Map(func(r rune) rune {
			if r < utf8.RuneSelf && sqlSpace(byte(r)) {
				return -1
			}
			return r
		}, s)
	}
	if strip(in) != strip(out) {
		t.Fatalf("formatSQL(%q) = %q: changed more than white space", in, out)
	}
	if again := formatSQL(out); again != out {
		t.Fatalf("formatSQL is not idempotent on %q:\n%q\n%q", in, out, again)
	}
	if strings.Join(tokenTexts(sqlTokens(in)), "") != in {
		t.Fatalf("the tokens of %q do not join back to it", in)
	}
}

func tokenTexts(ts []sqlToken) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.text)
	}
	return out
}

func FuzzFormatSQL(f *testing.F) {
	for _, s := range []string{
		"SELECT a FROM t WHERE b IN (SELECT c FROM u) ORDER BY a",
		"select x -- c\nfrom y /* n /* nested */ */ join z on 1 = 1",
		"SELECT 'a''b', \"q\"\"r\", `s`, [t], $x$ y $x$, E'\\n' FROM a.b GROUP BY 1 HAVING 2 LIMIT 3",
		"WITH a AS (SELECT 1) SELECT * FROM a UNION SELECT 2 EXCEPT SELECT 3",
		"SELECT a#b\nFROM t", "SELECT - -1, 1-- x\nFROM t", "(SELECT 1)) FROM ((", "'unterminated FROM x", "/* open",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkFormatted(t, s, formatSQL(s))
	})
}
