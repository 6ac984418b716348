package datasets

import (
	"strings"
	"testing"
)

// FuzzScreen: screen never panics, and what it accepts is one read statement with no denied
// word, which screening again accepts unchanged.
func FuzzScreen(f *testing.F) {
	for _, q := range hostileQueries {
		f.Add(q)
	}
	for _, q := range chinookQueries {
		f.Add(q.sql)
	}
	f.Add("SELECT 'a;b' -- c;\n")
	f.Add("/* x; */ WITH a AS (SELECT 1) SELECT * FROM a;")
	f.Add(`SELECT "x""y", [a;b], ` + "`c;d`" + ` FROM t`)
	f.Fuzz(func(t *testing.T, q string) {
		stmt, reason := screen(q)
		if reason != "" {
			if stmt != "" || !strings.HasPrefix(reason, "refused: ") {
				t.Fatalf("refusal %q with statement %q", reason, stmt)
			}
			return
		}
		if _, rest := splitFirst(stmt); strings.TrimSpace(rest) != "" {
			t.Fatalf("accepted %q holds a second statement %q", stmt, rest)
		}
		if d := deniedText(stmt); d != "" {
			t.Fatalf("accepted %q: %s", stmt, d)
		}
		if again, r := screen(stmt); r != "" || again != stmt {
			t.Fatalf("screen(%q) = %q, %q; want it unchanged", stmt, again, r)
		}
	})
}
