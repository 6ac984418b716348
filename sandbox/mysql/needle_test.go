package mysql

import (
	"strings"
	"testing"

	"github.com/chainedsql/chainedsql/datasets"
	"github.com/chainedsql/chainedsql/sandbox"
)

// TestMySQLBuiltNeedle: LOCATE, INSTR, POSITION and SUBSTRING_INDEX are refused where their needle
// is not a short literal, a number or NULL, and only there: the golds' forms pass, and the names
// inside strings, quoted names and comments are no calls.
func TestMySQLBuiltNeedle(t *testing.T) {
	refused := []string{
		"SELECT LOCATE(HEX(HEX(HEX('a'))), name) FROM t",
		"SELECT INSTR(name, HEX(HEX(x))) FROM t",
		"SELECT INSTR(a.name, b.name) FROM a, b",
		"SELECT POSITION(CONCAT(x, x) IN name) FROM t",
		"SELECT SUBSTRING_INDEX(name, n.big, 1) FROM t, (SELECT HEX(HEX(name)) big FROM t) n",
		"SELECT locate /* c */ (x, y) FROM t",
		"SELECT INSTR(name, '" + strings.Repeat("x", 65) + "') FROM t",
		"SELECT LOCATE('a' 'b', name) FROM t",
	}
	passed := []string{
		"SELECT INSTR(T2.fastestLapTime, ':') FROM t T2",
		"SELECT SUBSTR(time, 1, INSTR(time, ':') - 1) FROM t",
		"SELECT LOCATE('x', name), LOCATE(\"y\", name, 3) FROM t",
		"SELECT POSITION('a' IN name), POSITION(NULL IN name), INSTR(name, 1) FROM t",
		"SELECT SUBSTRING_INDEX(name, ',', 1) FROM t",
		"SELECT INSTR(name, 'it''s') FROM t",
		"SELECT 'locate(x, y)', `instr(a, b)` FROM t -- locate(x, y)",
		"SELECT name FROM t WHERE name IN ('a', 'b') /* instr(a, b) */",
		"SELECT INSTR(name, '" + strings.Repeat("x", 64) + "') FROM t",
	}
	for _, q := range refused {
		if _, why := sandbox.Screen(q, datasets.MySQL); !strings.Contains(why, "needle") {
			t.Errorf("%s: passed the screen (%q), want it refused", q, why)
		}
	}
	for _, q := range passed {
		if _, why := sandbox.Screen(q, datasets.MySQL); why != "" {
			t.Errorf("%s: %s", q, why)
		}
	}
}
